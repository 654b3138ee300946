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

/// One section of a spec given as a dict (sections.rs): a struct read with
/// `#[derive(FromPyObject)]`, every field optional (None: absent, the core's
/// default kept, so the binding has none of its own), its keys listed for
/// [`sections::Section::KEYS`] so that a key it does not know is refused.
/// (`sections::section` fills absent keys with None before extracting: pyo3
/// refuses a struct whose every field is `#[pyo3(default)]`.)
macro_rules! section {
    (
        $(#[$meta:meta])*
        struct $name:ident($key:literal) {
            $( $(#[$fmeta:meta])* $field:ident: $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(pyo3::FromPyObject, Default)]
        #[pyo3(from_item_all)]
        pub(crate) struct $name {
            $( $(#[$fmeta])* pub $field: Option<$ty>, )*
        }

        impl $crate::sections::Section for $name {
            const NAME: &'static str = $key;
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

mod capture;
mod capture_spec;
mod chunk;
mod errors;
mod format_args;
mod frame_send;
mod latency;
mod layout;
mod lock;
mod record;
mod report;
mod sections;
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
    capture_spec::register(m)?;
    chunk::register(m)?;
    record::register(m)?;
    latency::register(m)?;
    Ok(())
}
