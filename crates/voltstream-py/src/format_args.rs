//! The format keywords of `Capture()` and `locate()` made into the core library's
//! [`FormatSpec`]: one place, so both speak the same keywords and refuse the same
//! things. Adding a format: its keywords in [`FormatArgs`] and one arm here.

use pyo3::prelude::*;
use voltstream_core::wire::{FormatSpec, Layout, SpeadHeapIndex};

use crate::errors::{config_error, to_py};
use crate::layout::layout_from_dict;
use pyo3::types::PyDict;

/// Every format keyword, as given (`None`: not given).
pub(crate) struct FormatArgs {
    pub vdif_threads: Option<Vec<u16>>,
    pub vdif_frame_len: Option<usize>,
    pub frames_per_second: Option<u32>,
    pub subband: Option<u8>,
    pub station: Option<u16>,
    pub streams: usize,
    pub payload_len: Option<usize>,
    pub digitiser_ids: Option<Vec<u64>>,
    pub samples_per_heap: u64,
    pub sample_bits: u8,
    pub heap_address_bits: u8,
    pub timestamp_id: u64,
    pub digitiser_id_item: u64,
    pub codif_threads: Option<Vec<u16>>,
    pub codif_frame_len: Option<usize>,
    pub frames_per_period: Option<u32>,
    pub group: Option<u16>,
    pub layout: Option<Layout>,
    pub packets_per_heap: usize,
    pub heap_bytes: Option<usize>,
    pub heap_cnt_step: Option<u64>,
    pub vdif_legacy: bool,
}

impl Default for FormatArgs {
    /// `Capture()`'s defaults (its signature states them for Python's help).
    fn default() -> Self {
        FormatArgs {
            vdif_threads: None,
            vdif_frame_len: None,
            frames_per_second: None,
            subband: None,
            station: None,
            streams: 1,
            payload_len: None,
            digitiser_ids: None,
            samples_per_heap: 4096,
            sample_bits: 10,
            heap_address_bits: 48,
            timestamp_id: 0x1600,
            digitiser_id_item: 0x3101,
            codif_threads: None,
            codif_frame_len: None,
            frames_per_period: None,
            group: None,
            layout: None,
            packets_per_heap: 1,
            heap_bytes: None,
            heap_cnt_step: None,
            vdif_legacy: false,
        }
    }
}

/// A keyword that `format` cannot do without.
fn need<T>(value: Option<T>, format: &str, what: &str) -> PyResult<T> {
    value.ok_or_else(|| {
        config_error(format!(
            "format '{format}' needs {what}; pass it to Capture()"
        ))
    })
}

/// The [`FormatSpec`] that `format` and its keywords describe (validated later,
/// with the rest of the capture, by the core).
pub(crate) fn format_spec(format: &str, a: FormatArgs) -> PyResult<FormatSpec> {
    Ok(match format {
        "ynao" => FormatSpec::Ynao { subband: a.subband },
        "vdif" => FormatSpec::Vdif {
            threads: need(a.vdif_threads, "vdif", "vdif_threads (e.g. [0])")?,
            frame_len: need(
                a.vdif_frame_len,
                "vdif",
                "vdif_frame_len (bytes, header included)",
            )?,
            frames_per_second: need(a.frames_per_second, "vdif", "frames_per_second")?,
            station: a.station,
            legacy: a.vdif_legacy,
        },
        "spead" => {
            let ids = need(a.digitiser_ids, "spead", "digitiser_ids (e.g. [0, 1])")?;
            // Heap index from the heap counter when its step is given,
            // else from the time stamp item (docs/formats.md).
            let index = match a.heap_cnt_step {
                Some(step) => SpeadHeapIndex::HeapCnt { step },
                None => SpeadHeapIndex::Timestamp,
            };
            let mut spec = match a.heap_bytes {
                Some(b) => FormatSpec::spead_heaps(ids, a.samples_per_heap, b, 1, index),
                None => FormatSpec::spead_digitiser(ids, a.samples_per_heap, a.sample_bits),
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
                (*heap_address_bits, *timestamp_id) = (a.heap_address_bits, a.timestamp_id);
                (*digitiser_id_item, *packets_per_heap) = (a.digitiser_id_item, a.packets_per_heap);
                *heap_index = index;
            }
            spec
        }
        "codif" => FormatSpec::Codif {
            threads: need(a.codif_threads, "codif", "codif_threads (e.g. [0])")?,
            frame_len: need(
                a.codif_frame_len,
                "codif",
                "codif_frame_len (bytes, header included)",
            )?,
            frames_per_period: need(a.frames_per_period, "codif", "frames_per_period")?,
            station: a.station,
            group: a.group,
        },
        "counter" => FormatSpec::Counter {
            streams: a.streams,
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

/// [`format_spec`] from `Capture()`'s format keywords given as a dict (what
/// `voltstream.streams`' `capture_kwargs()` makes of a stream description),
/// for the classes that take a format but not the capture's other keywords.
pub(crate) fn format_spec_from_kwargs(
    format: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<FormatSpec> {
    let mut a = FormatArgs::default();
    for (key, value) in kwargs.into_iter().flat_map(|d| d.iter()) {
        let key: String = key.extract()?;
        let v = &value;
        match key.as_str() {
            "vdif_threads" => a.vdif_threads = v.extract()?,
            "vdif_frame_len" => a.vdif_frame_len = v.extract()?,
            "frames_per_second" => a.frames_per_second = v.extract()?,
            "subband" => a.subband = v.extract()?,
            "station" => a.station = v.extract()?,
            "streams" => a.streams = v.extract()?,
            "payload_len" => a.payload_len = v.extract()?,
            "digitiser_ids" => a.digitiser_ids = v.extract()?,
            "samples_per_heap" => a.samples_per_heap = v.extract()?,
            "sample_bits" => a.sample_bits = v.extract()?,
            "heap_address_bits" => a.heap_address_bits = v.extract()?,
            "timestamp_id" => a.timestamp_id = v.extract()?,
            "digitiser_id_item" => a.digitiser_id_item = v.extract()?,
            "codif_threads" => a.codif_threads = v.extract()?,
            "codif_frame_len" => a.codif_frame_len = v.extract()?,
            "frames_per_period" => a.frames_per_period = v.extract()?,
            "group" => a.group = v.extract()?,
            "layout" => {
                let d: Option<Bound<'_, PyDict>> = v.extract()?;
                a.layout = d.map(|d| layout_from_dict(&d)).transpose()?;
            }
            "packets_per_heap" => a.packets_per_heap = v.extract()?,
            "heap_bytes" => a.heap_bytes = v.extract()?,
            "heap_cnt_step" => a.heap_cnt_step = v.extract()?,
            "vdif_legacy" => a.vdif_legacy = v.extract()?,
            "format" => {}
            other => {
                return Err(config_error(format!(
                    "unknown format keyword '{other}' for format '{format}'"
                )))
            }
        }
    }
    format_spec(format, a)
}
