//! The SPEAD capture rules: where a packet of a heap goes ([`HeapMap`], the
//! format's [`crate::wire::Locate`]).

use super::heap_packet;
use crate::wire::{Located, WireError};

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
