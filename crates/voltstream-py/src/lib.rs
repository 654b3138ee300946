//! Thin PyO3 bindings: argument conversion, GIL release around blocking calls,
//! and error mapping. No logic lives here; it lives in voltstream-core.

use pyo3::prelude::*;

/// `d[name] = src.name` for each field named: the dict keys are the core
/// library's field names, so the report cannot drift from the counters.
macro_rules! set_fields {
    ($d:expr, $src:expr, [$($field:ident),+ $(,)?]) => {
        $( $d.set_item(stringify!($field), &$src.$field)?; )+
    };
}

mod capture;
mod chunk;
mod errors;
mod format_args;
mod frame_send;
mod latency;
mod layout;
mod lock;
mod record;
mod report;
mod send;
mod wire;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Whether engine="dpdk" works (built with `-F dpdk`, see docs/architecture.md).
    m.add("DPDK_AVAILABLE", voltstream_core::capture::DPDK_AVAILABLE)?;
    wire::register(m)?;
    send::register(m)?;
    frame_send::register(m)?;
    capture::register(m)?;
    chunk::register(m)?;
    record::register(m)?;
    latency::register(m)?;
    Ok(())
}
