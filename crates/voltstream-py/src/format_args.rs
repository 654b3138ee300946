//! The `format` section of a capture or latency spec (and `locate()`'s
//! keywords) made into the core library's [`FormatSpec`]: one place, so all
//! speak the same keys and refuse the same things. Adding a format: its keys
//! in [`FormatArgs`] and one arm here.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::wire::spead::{DIG_SAMPLES_PER_HEAP, DIG_SAMPLE_BITS};
use voltstream_core::wire::{FormatSpec, Layout, SpeadHeapIndex};

use crate::errors::{config_error, to_py};
use crate::layout::layout_from_dict;

section! {
    /// The `format` section: `name` and that format's own keys (None: not given).
    struct FormatArgs("format") {
        name: String,
        vdif_threads: Vec<u16>,
        vdif_frame_len: usize,
        frames_per_second: u32,
        subband: u8,
        station: u16,
        streams: usize,
        payload_len: usize,
        digitiser_ids: Vec<u64>,
        samples_per_heap: u64,
        sample_bits: u8,
        heap_address_bits: u8,
        timestamp_id: u64,
        digitiser_id_item: u64,
        codif_threads: Vec<u16>,
        codif_frame_len: usize,
        frames_per_period: u32,
        group: u16,
        #[pyo3(from_py_with = layout_arg)]
        layout: Layout,
        packets_per_heap: usize,
        heap_bytes: usize,
        heap_cnt_step: u64,
        vdif_legacy: bool,
    }
}

/// `layout`: a dict (docs/formats.md, "Declarative layouts"), or None.
fn layout_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<Layout>> {
    if value.is_none() {
        return Ok(None);
    }
    Ok(Some(layout_from_dict(value.cast::<PyDict>()?)?))
}

/// A key that `format` cannot do without.
fn need<T>(value: Option<T>, format: &str, what: &str) -> PyResult<T> {
    value.ok_or_else(|| {
        config_error(format!(
            "format '{format}' needs {what} in the spec's format section"
        ))
    })
}

/// A frame format's `<format>_frame_len`, which it cannot do without.
fn need_frame_len<T>(value: Option<T>, format: &str) -> PyResult<T> {
    need(
        value,
        format,
        &format!("{format}_frame_len (bytes, header included)"),
    )
}

/// The [`FormatSpec`] the section describes (validated later, with the rest
/// of the capture, by the core).
pub(crate) fn format_spec(a: FormatArgs) -> PyResult<FormatSpec> {
    let format = a.name.as_deref().ok_or_else(|| {
        config_error(
            "the spec's format section needs a name: 'vdif', 'ynao', 'spead', 'codif', \
             'counter' or 'layout'"
                .into(),
        )
    })?;
    Ok(match format {
        "ynao" => FormatSpec::Ynao { subband: a.subband },
        "vdif" => FormatSpec::Vdif {
            threads: need(a.vdif_threads, "vdif", "vdif_threads (e.g. [0])")?,
            frame_len: need_frame_len(a.vdif_frame_len, "vdif")?,
            frames_per_second: need(a.frames_per_second, "vdif", "frames_per_second")?,
            station: a.station,
            legacy: a.vdif_legacy.unwrap_or(false),
        },
        "spead" => {
            let ids = need(a.digitiser_ids, "spead", "digitiser_ids (e.g. [0, 1])")?;
            // Heap index from the heap counter when its step is given,
            // else from the time stamp item (docs/formats.md).
            let index = match a.heap_cnt_step {
                Some(step) => SpeadHeapIndex::HeapCnt { step },
                None => SpeadHeapIndex::Timestamp,
            };
            let samples = a.samples_per_heap.unwrap_or(DIG_SAMPLES_PER_HEAP);
            let mut spec = match a.heap_bytes {
                Some(b) => FormatSpec::spead_heaps(ids, samples, b, 1, index),
                None => FormatSpec::spead_digitiser(
                    ids,
                    samples,
                    a.sample_bits.unwrap_or(DIG_SAMPLE_BITS),
                ),
            }
            .map_err(to_py)?;
            if let FormatSpec::Spead {
                heap_address_bits,
                timestamp_id,
                digitiser_id_item,
                packets_per_heap,
                heap_index,
                ..
            } = &mut spec
            {
                // Absent: the core's digitiser defaults stay.
                crate::sections::set(heap_address_bits, a.heap_address_bits);
                crate::sections::set(timestamp_id, a.timestamp_id);
                crate::sections::set(digitiser_id_item, a.digitiser_id_item);
                crate::sections::set(packets_per_heap, a.packets_per_heap);
                *heap_index = index;
            }
            spec
        }
        "codif" => FormatSpec::Codif {
            threads: need(a.codif_threads, "codif", "codif_threads (e.g. [0])")?,
            frame_len: need_frame_len(a.codif_frame_len, "codif")?,
            frames_per_period: need(a.frames_per_period, "codif", "frames_per_period")?,
            station: a.station,
            group: a.group,
        },
        "counter" => FormatSpec::Counter {
            streams: a.streams.unwrap_or(1),
            payload_len: need(a.payload_len, "counter", "payload_len (bytes per packet)")?,
        },
        "layout" => {
            FormatSpec::Layout(need(a.layout, "layout", "layout={packet_len, index, ...}")?)
        }
        other => {
            return Err(config_error(format!(
                "unknown capture format '{other}'; use 'vdif', 'ynao', 'spead', 'codif', \
                 'counter' or 'layout'"
            )))
        }
    })
}
