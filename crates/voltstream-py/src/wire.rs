//! Bindings for the packet formats: small helpers so Python can check its own
//! packets against the Rust parsers (tests, `voltstream simulate` self-checks).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::wire::{self, Locate, WireError};

use crate::errors::{py_error, to_py};
use crate::format_args::{format_spec, FormatArgs};

fn wire_err(py: Python<'_>, format: &str, e: WireError) -> PyErr {
    let what = match e {
        WireError::Truncated => "is shorter than its header or frame length says",
        WireError::Malformed => "has a field the format forbids (version, sizes, flags...)",
        WireError::Foreign => "is well-formed but not from a configured thread/station/subband",
        WireError::Invalid { .. } => "is flagged invalid by its sender (its samples are lost)",
    };
    py_error(py, "FormatError", format!("{format} packet {what} ({e})"))
}

/// Classifies one packet as a capture would: returns (stream, index,
/// payload_offset) or raises FormatError (truncated, malformed, foreign).
#[pyfunction]
#[pyo3(signature = (format, packet, *, threads=None, frame_len=None, frames_per_second=None,
                    station=None, subband=None))]
#[allow(clippy::too_many_arguments)]
fn locate(
    py: Python<'_>,
    format: &str,
    packet: &[u8],
    threads: Option<Vec<u16>>,
    frame_len: Option<usize>,
    frames_per_second: Option<u32>,
    station: Option<u16>,
    subband: Option<u8>,
) -> PyResult<(usize, u64, usize)> {
    // A capture spec's format section, with a one-packet test's defaults:
    // thread 0, a frame as long as the packet.
    let args = FormatArgs {
        name: Some(format.to_string()),
        vdif_threads: Some(threads.unwrap_or_else(|| vec![0])),
        vdif_frame_len: Some(frame_len.unwrap_or(packet.len())),
        frames_per_second,
        station,
        subband,
        ..Default::default()
    };
    let s = format_spec(args)?;
    let loc = s.locator().map_err(to_py)?;
    let l = loc.locate(packet).map_err(|e| wire_err(py, format, e))?;
    let offset = packet.len() - l.payload.len();
    Ok((l.stream, l.index, offset))
}

/// Parses one packet's header into a dict of its fields (Rust's reading, for
/// checking Python writers against).
#[pyfunction]
fn parse_header<'py>(py: Python<'py>, format: &str, packet: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match format {
        "vdif" => {
            let p = wire::VdifPacket::new_checked(packet).map_err(|e| wire_err(py, format, e))?;
            let r = wire::VdifRepr::parse(&p).map_err(|e| wire_err(py, format, e))?;
            set_fields!(d, r, [invalid, legacy, seconds, ref_epoch, frame, version]);
            d.set_item("nchan", 1u64 << r.log2_nchan)?;
            set_fields!(
                d,
                r,
                [frame_len, complex, bits_per_sample, thread, station, edv]
            );
        }
        "ynao" => {
            let p = wire::YnaoPacket::new_checked(packet).map_err(|e| wire_err(py, format, e))?;
            let r = wire::YnaoRepr::parse(&p).map_err(|e| wire_err(py, format, e))?;
            set_fields!(d, r, [sequence, mjd, second, nanosecond, subband]);
        }
        other => {
            return Err(py_error(
                py,
                "ConfigError",
                format!("unknown packet format {other:?}; use 'vdif' or 'ynao'"),
            ))
        }
    }
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(locate, m)?)?;
    m.add_function(wrap_pyfunction!(parse_header, m)?)?;
    Ok(())
}
