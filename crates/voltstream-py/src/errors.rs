//! Maps voltstream-core errors onto the Python hierarchy in `voltstream.errors`,
//! so Python callers catch one family (`VoltstreamError`) whatever layer failed.

use pyo3::prelude::*;
use voltstream_core::Error;

/// Builds an instance of `voltstream.errors.<class_name>` carrying `msg`.
pub fn py_error(py: Python<'_>, class_name: &str, msg: String) -> PyErr {
    let class = py
        .import("voltstream.errors")
        .and_then(|m| m.getattr(class_name));
    match class {
        Ok(class) => match class.call1((msg.clone(),)) {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        },
        // The pure-Python package is missing (a bare extension import): still raise.
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
    }
}

/// Converts a core error to the matching `VoltstreamError` subclass.
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| {
        let class = match &err {
            Error::Malformed(_) => "FormatError",
            Error::Config(_) => "ConfigError",
            Error::Io { .. } => "CaptureError",
        };
        py_error(py, class, err.to_string())
    })
}

/// A `voltstream.errors.ConfigError`: settings that do not fit.
pub(crate) fn config_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "ConfigError", msg))
}

/// A `voltstream.errors.CaptureError`: a capture that cannot do what was asked.
pub(crate) fn capture_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "CaptureError", msg))
}
