//! Reading one packet of a heap at capture: the standard items and the
//! time stamp and stream id items in one pass, allocation-free.

use super::{Packet, HEAP_CNT, HEAP_OFFSET, HEAP_SIZE, PAYLOAD_LEN};
use crate::wire::WireError;

/// MeerKAT digitiser items: ADC sample count of the heap's first sample, the
/// digitiser id, its status word, and the raw (packed) sample data.
pub const DIG_TIMESTAMP: u64 = 0x1600;
pub const DIG_ID: u64 = 0x3101;
pub const DIG_STATUS: u64 = 0x3102;
pub const DIG_RAW_DATA: u64 = 0x3300;
/// A MeerKAT digitiser heap: 4096 samples of 10 bits (the defaults of a
/// `spead` capture format that does not give its own).
pub const DIG_SAMPLES_PER_HEAP: u64 = 4096;
pub const DIG_SAMPLE_BITS: u8 = 10;

/// Most item pointers [`heap_packet`] (and so [`digitiser`]) accepts in one
/// packet (MeerKAT digitiser heaps carry eight); it bounds the capture's
/// receive buffer.
pub const MAX_DIGITISER_ITEMS: usize = 16;

/// What one packet of a heap says, read in one pass over its pointers: the
/// standard items, and the time stamp and stream id items when the packet
/// carries them (spead2, for one, puts a heap's other items in its first
/// packet only unless the heap repeats its pointers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapPacket<'a> {
    pub heap_cnt: u64,
    pub heap_size: Option<u64>,
    pub heap_offset: u64,
    pub timestamp: Option<u64>,
    pub stream_id: Option<u64>,
    /// Exactly the payload length of bytes.
    pub payload: &'a [u8],
}

/// Reads one packet of a heap for capture: checked view, flavour
/// `heap_address_bits`, at most [`MAX_DIGITISER_ITEMS`] pointers, no bytes
/// after the payload, and the items `timestamp_id` and `id_item` immediate
/// when present (the first of each counts); `Malformed` otherwise. Which
/// items must be present, and the sizes, are the caller's rules.
/// Allocation-free.
pub fn heap_packet(
    packet: &[u8],
    heap_address_bits: u8,
    timestamp_id: u64,
    id_item: u64,
) -> Result<HeapPacket<'_>, WireError> {
    let p = Packet::new_checked(packet)?;
    if p.heap_address_bits() != heap_address_bits || p.n_items() > MAX_DIGITISER_ITEMS {
        return Err(WireError::Malformed);
    }
    let (mut heap_cnt, mut heap_size, mut heap_offset, mut payload_len) = (0, None, 0, 0);
    let (mut timestamp, mut stream_id) = (None, None);
    // `new_checked` found the standard items immediate and unrepeated.
    for it in p.items() {
        let slot = match it.id {
            HEAP_CNT => {
                heap_cnt = it.value;
                continue;
            }
            HEAP_SIZE => {
                heap_size = Some(it.value);
                continue;
            }
            HEAP_OFFSET => {
                heap_offset = it.value;
                continue;
            }
            PAYLOAD_LEN => {
                payload_len = it.value;
                continue;
            }
            id if id == timestamp_id => &mut timestamp,
            id if id == id_item => &mut stream_id,
            _ => continue,
        };
        if !it.immediate {
            return Err(WireError::Malformed);
        }
        slot.get_or_insert(it.value);
    }
    if (packet.len() - p.header_len()) as u64 != payload_len {
        return Err(WireError::Malformed);
    }
    Ok(HeapPacket {
        heap_cnt,
        heap_size,
        heap_offset,
        timestamp,
        stream_id,
        payload: packet.get(p.header_len()..).ok_or(WireError::Truncated)?,
    })
}

/// What a digitiser heap packet says, read in one pass over its pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digitiser<'a> {
    pub timestamp: u64,
    pub digitiser_id: u64,
    pub payload: &'a [u8],
}

/// Reads a single-packet heap: [`heap_packet`]'s checks, heap offset 0,
/// heap size present and equal to the payload length, and the immediate
/// items `timestamp_id` and `id_item` present (`Malformed` otherwise).
/// Allocation-free.
pub fn digitiser(
    packet: &[u8],
    heap_address_bits: u8,
    timestamp_id: u64,
    id_item: u64,
) -> Result<Digitiser<'_>, WireError> {
    let h = heap_packet(packet, heap_address_bits, timestamp_id, id_item)?;
    match h {
        HeapPacket {
            heap_size: Some(size),
            heap_offset: 0,
            timestamp: Some(timestamp),
            stream_id: Some(digitiser_id),
            payload,
            ..
        } if size == payload.len() as u64 => Ok(Digitiser {
            timestamp,
            digitiser_id,
            payload,
        }),
        _ => Err(WireError::Malformed),
    }
}
