//! Which packet format a capture expects, and the `Locate` it builds: the
//! registry of formats.
//!
//! [`FormatSpec`] is the user-facing description, one variant per format;
//! [`FormatSpec::locator`] hands its values to that format's own locator
//! (`vdif::Locator`, `spead::HeapMap`, ..., in the format's file), which
//! validates them with messages that say what to change, and wraps it in a
//! [`Locator`], the allocation-free per-packet classifier the assembler calls.

use super::locator::Locator;
use super::{codif, counter, layout, spead, vdif, ynao};
use crate::{Error, Result};

/// A capture's packet format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatSpec {
    /// VDIF frames with standard 32-byte headers. One stream per thread id,
    /// numbered by position in `threads`.
    Vdif {
        threads: Vec<u16>,
        /// Whole frame in bytes, header included (the UDP payload length).
        frame_len: usize,
        /// Frames per second per thread: the index is seconds * this + frame.
        frames_per_second: u32,
        /// Accept only this station id; `None` accepts any.
        station: Option<u16>,
        /// Legacy 16-byte headers (VDIF's legacy bit) instead of 32-byte ones.
        legacy: bool,
    },
    /// YNAO frames (8216 bytes); one stream.
    Ynao {
        /// Accept only this subband id; `None` accepts any.
        subband: Option<u8>,
    },
    /// SPEAD heaps of one packet (MeerKAT digitiser heaps) or several. One
    /// stream per digitiser id (or heap counter residue, see `heap_index`),
    /// numbered by position in `digitiser_ids`. Packet `k` of heap `h` goes
    /// to index `h * packets_per_heap + k` (`spead::HeapMap`).
    Spead {
        /// Flavour: heap address bits, 48 for SPEAD-64-48.
        heap_address_bits: u8,
        /// Values of the digitiser-id item accepted, in stream order.
        digitiser_ids: Vec<u64>,
        /// Samples per heap: the index is timestamp / this.
        samples_per_heap: u64,
        /// Heap payload bytes (digitiser: samples_per_heap * bits / 8).
        heap_bytes: usize,
        /// Packets per heap, each of heap_bytes / packets_per_heap payload
        /// bytes; 1 for MeerKAT digitiser heaps.
        packets_per_heap: usize,
        /// Where the heap index and stream come from: the time stamp and id
        /// items, or a heap counter linear in time.
        heap_index: spead::HeapIndex,
        /// Item id of the time stamp (ADC sample count), 0x1600 for MeerKAT.
        timestamp_id: u64,
        /// Item id of the digitiser id, 0x3101 for MeerKAT.
        digitiser_id_item: u64,
    },
    /// CODIF frames with 64-byte headers. One stream per thread id,
    /// numbered by position in `threads`.
    Codif {
        threads: Vec<u16>,
        /// Whole frame in bytes, header included (the UDP payload length).
        frame_len: usize,
        /// Frames per period per thread: the index is
        /// (seconds / period) * this + frame.
        frames_per_period: u32,
        /// Accept only this station id; `None` accepts any.
        station: Option<u16>,
        /// Accept only this group id; `None` accepts any.
        group: Option<u16>,
    },
    /// The sequence-counter packet (`wire::counter`): stream ids `0..streams`.
    Counter { streams: usize, payload_len: usize },
    /// A declarative user format.
    Layout(layout::Layout),
}

fn config(msg: String) -> Error {
    Error::Config(msg)
}

impl FormatSpec {
    /// Checks the values, saying what is wrong and what to use instead (each
    /// format's locator checks its own).
    pub fn validate(&self) -> Result<()> {
        self.locator().map(drop)
    }

    /// Number of streams a capture with this format has.
    pub fn streams(&self) -> usize {
        match self {
            FormatSpec::Vdif { threads, .. } => threads.len(),
            FormatSpec::Ynao { .. } => 1,
            FormatSpec::Spead { digitiser_ids, .. } => digitiser_ids.len(),
            FormatSpec::Codif { threads, .. } => threads.len(),
            FormatSpec::Counter { streams, .. } => *streams,
            FormatSpec::Layout(l) => l.streams(),
        }
    }

    /// UDP payload bytes of one packet; for SPEAD, whose item count may
    /// vary, the largest packet accepted.
    pub fn packet_len(&self) -> usize {
        match self {
            FormatSpec::Vdif { frame_len, .. } => *frame_len,
            FormatSpec::Ynao { .. } => ynao::FRAME_LEN,
            FormatSpec::Spead {
                heap_bytes,
                packets_per_heap,
                ..
            } => (heap_bytes / packets_per_heap.max(&1))
                .saturating_add(spead::HEADER_LEN + spead::ITEM_LEN * spead::MAX_DIGITISER_ITEMS),
            FormatSpec::Codif { frame_len, .. } => *frame_len,
            FormatSpec::Counter { payload_len, .. } => {
                payload_len.saturating_add(counter::HEADER_LEN)
            }
            FormatSpec::Layout(l) => l.packet_len,
        }
    }

    /// SPEAD-64-48 MeerKAT digitiser heaps of `samples_per_heap` samples of
    /// `bits` bits, items 0x1600 (time stamp) and 0x3101 (digitiser id).
    pub fn spead_digitiser(
        digitiser_ids: Vec<u64>,
        samples_per_heap: u64,
        bits: u8,
    ) -> Result<Self> {
        let heap_bytes = usize::try_from(samples_per_heap)
            .ok()
            .and_then(|n| spead::packed_len(n, bits))
            .filter(|_| matches!(bits, 8 | 10 | 12 | 16))
            .ok_or_else(|| {
                config(format!(
                    "SPEAD digitiser heaps of {samples_per_heap} samples of {bits} bits are not \
                     whole bytes, or the width is not 8, 10, 12 or 16"
                ))
            })?;
        let spec = FormatSpec::Spead {
            heap_address_bits: spead::DEFAULT_HEAP_ADDRESS_BITS,
            digitiser_ids,
            samples_per_heap,
            heap_bytes,
            packets_per_heap: 1,
            heap_index: spead::HeapIndex::Timestamp,
            timestamp_id: spead::DIG_TIMESTAMP,
            digitiser_id_item: spead::DIG_ID,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// SPEAD-64-48 heaps of `heap_bytes` payload bytes, each split into
    /// `packets_per_heap` packets, indexed as `heap_index` says, with the
    /// MeerKAT time stamp (0x1600) and id (0x3101) items.
    pub fn spead_heaps(
        ids: Vec<u64>,
        samples_per_heap: u64,
        heap_bytes: usize,
        packets_per_heap: usize,
        heap_index: spead::HeapIndex,
    ) -> Result<Self> {
        let spec = FormatSpec::Spead {
            heap_address_bits: spead::DEFAULT_HEAP_ADDRESS_BITS,
            digitiser_ids: ids,
            samples_per_heap,
            heap_bytes,
            packets_per_heap,
            heap_index,
            timestamp_id: spead::DIG_TIMESTAMP,
            digitiser_id_item: spead::DIG_ID,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Packets per heap: SPEAD heaps may span several; other formats' frames
    /// are one packet. A capture's chunk must hold whole heaps.
    pub fn packets_per_heap(&self) -> usize {
        match self {
            FormatSpec::Spead {
                packets_per_heap, ..
            } => *packets_per_heap,
            _ => 1,
        }
    }

    /// Sample bytes per packet (the packet minus its header).
    pub fn payload_len(&self) -> usize {
        match self {
            FormatSpec::Vdif {
                frame_len, legacy, ..
            } => frame_len.saturating_sub(vdif::header_len(*legacy)),
            FormatSpec::Ynao { .. } => ynao::DATA_LEN,
            FormatSpec::Spead {
                heap_bytes,
                packets_per_heap,
                ..
            } => heap_bytes / packets_per_heap.max(&1),
            FormatSpec::Codif { frame_len, .. } => frame_len.saturating_sub(codif::HEADER_LEN),
            FormatSpec::Counter { payload_len, .. } => *payload_len,
            FormatSpec::Layout(l) => l.payload_len,
        }
    }

    /// Validates and builds the per-packet classifier: the registry of
    /// formats, each arm the format's own locator. Allocates once (a
    /// thread-id table, the id lists); `locate` itself never allocates.
    pub fn locator(&self) -> Result<Locator> {
        Ok(match self {
            FormatSpec::Vdif {
                threads,
                frame_len,
                frames_per_second,
                station,
                legacy,
            } => vdif::Locator::new(threads, *frame_len, *frames_per_second, *station, *legacy)?
                .into(),
            FormatSpec::Ynao { subband } => ynao::Locator { subband: *subband }.into(),
            FormatSpec::Spead {
                heap_address_bits,
                digitiser_ids,
                samples_per_heap,
                heap_bytes,
                packets_per_heap,
                heap_index,
                timestamp_id,
                digitiser_id_item,
            } => {
                let map = spead::HeapMap {
                    heap_address_bits: *heap_address_bits,
                    ids: digitiser_ids.clone().into_boxed_slice(),
                    samples_per_heap: *samples_per_heap,
                    heap_bytes: *heap_bytes,
                    packets_per_heap: *packets_per_heap,
                    timestamp_id: *timestamp_id,
                    id_item: *digitiser_id_item,
                    index: *heap_index,
                };
                map.validate()?;
                map.into()
            }
            FormatSpec::Codif {
                threads,
                frame_len,
                frames_per_period,
                station,
                group,
            } => codif::Locator::new(threads, *frame_len, *frames_per_period, *station, *group)?
                .into(),
            FormatSpec::Counter {
                streams,
                payload_len,
            } => counter::Locator::new(*streams, *payload_len)?.into(),
            FormatSpec::Layout(l) => {
                l.validate()?;
                l.clone().into()
            }
        })
    }
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
