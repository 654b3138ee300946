//! A spec from Python: one dict of sections, each a dict of fields, read into
//! the `section!` structs (lib.rs) and nothing more. The binding converts; the
//! core fills in what is absent and validates the whole. Every key is checked,
//! so a typo (`nchunk`) is an error naming it rather than a default silently
//! kept; a value of the wrong type is an error naming its `section.field`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::config_error;

/// A section of a spec: its key, and the keys it knows (its struct's fields).
pub(crate) trait Section: Default {
    const NAME: &'static str;
    const KEYS: &'static [&'static str];
}

/// The spec as a dict whose keys are all among `sections`.
pub(crate) fn spec_dict<'py>(
    spec: &Bound<'py, PyAny>,
    what: &str,
    sections: &[&str],
) -> PyResult<Bound<'py, PyDict>> {
    let d = spec.cast::<PyDict>().map_err(|_| {
        config_error(format!(
            "the {what} is a dict of sections ({}), not a {}",
            sections.join(", "),
            type_name(spec)
        ))
    })?;
    for key in d.keys() {
        let key = key.str()?.to_string();
        if !sections.contains(&key.as_str()) {
            return Err(config_error(format!(
                "the {what} has no section '{key}'; its sections are {}",
                sections.join(", ")
            )));
        }
    }
    Ok(d.clone())
}

/// Section `T` of `spec` (absent: every field absent), its keys checked.
/// None and an absent key mean the same: the core's default.
pub(crate) fn section<'py, T>(spec: &Bound<'py, PyDict>, what: &str) -> PyResult<T>
where
    T: Section + for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    let Some(value) = spec.get_item(T::NAME)? else {
        return Ok(T::default());
    };
    let d = value.cast::<PyDict>().map_err(|_| {
        config_error(format!(
            "the {what}'s section '{}' is a dict of its fields, not a {}",
            T::NAME,
            type_name(&value)
        ))
    })?;
    for key in d.keys() {
        let key = key.str()?.to_string();
        if !T::KEYS.contains(&key.as_str()) {
            return Err(config_error(format!(
                "the {what}'s section '{}' has no key '{key}'; its keys are {}",
                T::NAME,
                T::KEYS.join(", ")
            )));
        }
    }
    // Every key present, None where absent, as the derived extraction needs.
    let full = PyDict::new(spec.py());
    for key in T::KEYS {
        full.set_item(key, spec.py().None())?;
    }
    full.update(d.as_mapping())?;
    full.as_any()
        .extract::<T>()
        .map_err(|e| field_error(spec.py(), e, what, T::NAME))
}

/// A required field's value, or an error naming it.
pub(crate) fn need<T>(value: Option<T>, what: &str, key: &str) -> PyResult<T> {
    value.ok_or_else(|| config_error(format!("the {what} needs {key}")))
}

/// `*field = value` when the spec gave one; else the core's default stays.
pub(crate) fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// pyo3's "failed to extract field Struct.field" (a TypeError whose cause says
/// why) as a ConfigError naming the spec's `section.field` and the cause.
fn field_error(py: Python<'_>, e: PyErr, what: &str, section: &str) -> PyErr {
    if !e.is_instance_of::<PyTypeError>(py) {
        return e;
    }
    let Some(cause) = e.cause(py) else { return e };
    let msg = e.value(py).to_string();
    let Some(field) = msg
        .strip_prefix("failed to extract field ")
        .and_then(|f| f.rsplit('.').next())
    else {
        return e;
    };
    config_error(format!(
        "the {what}'s {section}.{field}: {}",
        cause.value(py)
    ))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}
