//! The SPEAD capture rules: where a packet of a heap goes ([`HeapMap`], the
//! format's [`crate::wire::Locate`]).

use super::{heap_packet, HEAP_CNT, PAYLOAD_LEN};
use super::{HEADER_LEN, ITEM_LEN};
use crate::wire::{IndexKey, Locate, Located, StreamKey, StreamKeyed, WireError};
use crate::Error;

/// Where a packet's heap index (its heap's place in time) and stream come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapIndex {
    /// Heap index = time stamp item / `samples_per_heap`, stream from the id
    /// item: every packet must carry both (MeerKAT digitiser heaps of one
    /// packet; spead2 heaps sent with `repeat_pointers`). The heap counter
    /// is not read.
    Timestamp,
    /// The heap counter is linear in time: heap counter = heap index *
    /// `step` + stream id (MeerKAT F-engine output: `step` F-engines, the id
    /// the F-engine's). Packets need not carry the time stamp or id items
    /// (spead2 puts them in a heap's first packet only); where they do,
    /// they must agree: time stamp = heap index * `samples_per_heap`, id
    /// item = stream id.
    HeapCnt { step: u64 },
}

/// The capture rules for SPEAD heaps of one or more packets, built by
/// `FormatSpec::locator` from validated values. A heap of `heap_bytes` is
/// sent as `packets_per_heap` packets of `heap_bytes / packets_per_heap`
/// payload bytes at heap offsets 0, that, 2 * that, ...; packet `k` of heap
/// `h` goes to index `h * packets_per_heap + k`, so a chunk of a multiple of
/// `packets_per_heap` packets holds whole heaps with presence per packet.
#[derive(Debug, Clone)]
pub struct HeapMap {
    pub heap_address_bits: u8,
    /// Stream ids in stream order: id item values, or heap counter residues.
    pub ids: Box<[u64]>,
    pub samples_per_heap: u64,
    pub heap_bytes: usize,
    pub packets_per_heap: usize,
    pub timestamp_id: u64,
    pub id_item: u64,
    pub index: HeapIndex,
}

impl HeapMap {
    /// Checks the values, saying what is wrong and what to use instead
    /// (`FormatSpec::validate` of a SPEAD format).
    pub fn validate(&self) -> crate::Result<()> {
        let HeapMap {
            heap_address_bits,
            ids: digitiser_ids,
            samples_per_heap,
            heap_bytes,
            packets_per_heap,
            timestamp_id,
            id_item: digitiser_id_item,
            index: heap_index,
        } = self;
        let bits = *heap_address_bits as u32;
        if bits % 8 != 0 || !(8..=56).contains(&bits) {
            return Err(Error::Config(format!(
                "SPEAD heap address bits {bits} is not a SPEAD-64-XX flavour; use a \
                 multiple of 8 from 8 to 56 (48 for SPEAD-64-48)"
            )));
        }
        let max_id = (1u64 << (63 - bits)) - 1;
        let max_value = (1u64 << bits) - 1;
        for (what, id) in [
            ("timestamp", timestamp_id),
            ("digitiser id", digitiser_id_item),
        ] {
            if *id > max_id || (HEAP_CNT..=PAYLOAD_LEN).contains(id) {
                return Err(Error::Config(format!(
                    "SPEAD {what} item id {id:#x} is invalid: it must fit {} bits and \
                     not be a standard item (0x1..=0x4)",
                    63 - bits
                )));
            }
        }
        if timestamp_id == digitiser_id_item {
            return Err(Error::Config(
                "SPEAD timestamp and digitiser id items must differ (0x1600, 0x3101)".into(),
            ));
        }
        if digitiser_ids.is_empty() {
            return Err(Error::Config(
                "SPEAD format needs at least one digitiser id (e.g. digitiser_ids = \
                 [0, 1] for two polarisations)"
                    .into(),
            ));
        }
        for (i, &d) in digitiser_ids.iter().enumerate() {
            if d > max_value {
                return Err(Error::Config(format!(
                    "SPEAD digitiser id {d} does not fit {bits} bits"
                )));
            }
            if digitiser_ids[..i].contains(&d) {
                return Err(Error::Config(format!(
                    "SPEAD digitiser id {d} is listed twice; list each digitiser once"
                )));
            }
        }
        if *samples_per_heap == 0 || *heap_bytes == 0 || *heap_bytes as u64 > max_value {
            return Err(Error::Config(format!(
                "SPEAD samples per heap ({samples_per_heap}) and heap bytes \
                 ({heap_bytes}) must be positive (MeerKAT: 4096 samples, 5120 bytes \
                 at 10 bits)"
            )));
        }
        if *packets_per_heap == 0 || heap_bytes % packets_per_heap != 0 {
            return Err(Error::Config(format!(
                "SPEAD heap of {heap_bytes} bytes does not split into {packets_per_heap}                          packets of equal payload; packets per heap must divide the heap size"
            )));
        }
        if let HeapIndex::HeapCnt { step } = heap_index {
            if *step == 0 {
                return Err(Error::Config(
                    "SPEAD heap counter step is 0; use the number of heap counters per \
                     heap time (e.g. the number of F-engines)"
                        .into(),
                ));
            }
            if let Some(&d) = digitiser_ids.iter().find(|&&d| d >= *step) {
                return Err(Error::Config(format!(
                    "SPEAD heap counter step {step} leaves no room for stream id {d}: \
                     heap_cnt = heap index * step + id needs every id below step (e.g. \
                     step = number of F-engines)"
                )));
            }
        }
        Ok(())
    }

    /// Payload bytes of each packet.
    pub fn packet_payload(&self) -> usize {
        self.heap_bytes / self.packets_per_heap.max(1)
    }

    /// Places one packet. `Malformed`: [`heap_packet`]'s checks; heap size
    /// missing or not `heap_bytes`; payload length not
    /// [`Self::packet_payload`]; heap offset not a multiple of it (so a
    /// sender that splits heaps differently is counted, not misplaced); the
    /// rules of `index`. `Foreign`: a stream id not in `ids`.
    pub fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let h = heap_packet(
            packet,
            self.heap_address_bits,
            self.timestamp_id,
            self.id_item,
        )?;
        let part_len = self.packet_payload() as u64;
        // `heap_packet` checked offset + length <= heap size, so `part` <
        // packets_per_heap once the sizes agree.
        // (Checked division: a hand-built map with zeros must not panic.)
        if h.heap_size != Some(self.heap_bytes as u64)
            || h.payload.len() as u64 != part_len
            || h.heap_offset.checked_rem(part_len) != Some(0)
        {
            return Err(WireError::Malformed);
        }
        let part = h.heap_offset / part_len;
        let spp = self.samples_per_heap;
        let (heap, id) = match self.index {
            HeapIndex::Timestamp => match (h.timestamp, h.stream_id) {
                (Some(ts), Some(id)) if ts.checked_rem(spp) == Some(0) => (ts / spp, id),
                _ => return Err(WireError::Malformed),
            },
            HeapIndex::HeapCnt { step } => {
                let (Some(heap), Some(id)) =
                    (h.heap_cnt.checked_div(step), h.heap_cnt.checked_rem(step))
                else {
                    return Err(WireError::Malformed);
                };
                let ts_disagrees = h
                    .timestamp
                    .is_some_and(|ts| heap.checked_mul(spp) != Some(ts));
                if ts_disagrees || h.stream_id.is_some_and(|s| s != id) {
                    return Err(WireError::Malformed);
                }
                (heap, id)
            }
        };
        let index = heap
            .checked_mul(self.packets_per_heap as u64)
            .and_then(|i| i.checked_add(part))
            .ok_or(WireError::Malformed)?;
        let stream = self
            .ids
            .iter()
            .position(|&i| i == id)
            .ok_or(WireError::Foreign)?;
        Ok(Located {
            stream,
            index,
            payload: h.payload,
        })
    }
}

impl Locate for HeapMap {
    fn streams(&self) -> usize {
        self.ids.len()
    }

    fn payload_len(&self) -> usize {
        self.packet_payload()
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        HeapMap::locate(self, packet)
    }
}

impl StreamKeyed for HeapMap {
    /// The stream id is an item (or a heap counter residue) whose place in
    /// the packet varies: nothing to steer by.
    fn stream_key(&self) -> Option<StreamKey> {
        None
    }

    /// Heaps of one packet indexed by time stamp in SPEAD-64-48, the samples
    /// per heap a power of two: the index is the time stamp item's value
    /// shifted, read at the item pointer where a digitiser puts it
    /// ([`TIMESTAMP_POSITION`]). A packet with another item there steers to
    /// thread 0, which forwards it to its chunk's owner (a stray).
    fn index_key(&self) -> Option<IndexKey> {
        let one_packet = self.packets_per_heap == 1 && self.index == HeapIndex::Timestamp;
        if !one_packet || self.heap_address_bits != 48 || !self.samples_per_heap.is_power_of_two() {
            return None;
        }
        let at = HEADER_LEN + ITEM_LEN * TIMESTAMP_POSITION;
        Some(IndexKey::TaggedShifted {
            value_at: at + 2,
            value_bytes: 6,
            shift: self.samples_per_heap.trailing_zeros(),
            tag_at: at,
            // The immediate flag and the 15-bit id (validate keeps it in range).
            tag: 0x8000 | self.timestamp_id as u16,
        })
    }
}

/// The item pointer a digitiser's heap carries its time stamp in: after the
/// heap counter, heap size, heap offset and payload length (MeerKAT's order,
/// and `Repr::digitiser`'s).
pub const TIMESTAMP_POSITION: usize = 4;
