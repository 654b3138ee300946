//! Thin PyO3 bindings: argument conversion, GIL release around blocking calls,
//! and error mapping. No logic lives here; it lives in voltstream-core.

use pyo3::prelude::*;

mod capture;
mod chunk;
mod errors;
mod layout;
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
    capture::register(m)?;
    chunk::register(m)?;
    Ok(())
}
