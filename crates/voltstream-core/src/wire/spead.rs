//! SPEAD packets (flavours SPEAD-64-XX: 64-bit item pointers, XX-bit heap
//! addresses), as zero-copy views, the MeerKAT digitiser heap, and the capture
//! rules for heaps of one or more packets ([`HeapMap`]).
//!
//! A packet is an 8-byte header, `n_items` big-endian 64-bit item pointers,
//! then payload bytes: the slice `[heap_offset, heap_offset + payload_len)`
//! of one heap. Every packet must carry the heap counter (0x1), heap offset
//! (0x3) and payload length (0x4) as immediate items; the heap size (0x2) is
//! optional, and when present the packet's slice must lie inside it. No
//! function here panics on any input; `docs/formats.md` gives the layout and
//! cites the specification.

use super::{Located, WireError};

/// Bytes in the packet header.
pub const HEADER_LEN: usize = 8;
/// Bytes in one item pointer (all flavours we accept are SPEAD-64-XX).
pub const ITEM_LEN: usize = 8;
pub const MAGIC: u8 = 0x53;
pub const VERSION: u8 = 4;
/// Heap address bits of the usual flavour, SPEAD-64-48 (MeerKAT, spead2's default).
pub const DEFAULT_HEAP_ADDRESS_BITS: u8 = 48;

/// Standard item ids (SPEAD specification, section "reserved items").
pub const HEAP_CNT: u64 = 0x1;
pub const HEAP_SIZE: u64 = 0x2;
pub const HEAP_OFFSET: u64 = 0x3;
pub const PAYLOAD_LEN: u64 = 0x4;
/// MeerKAT digitiser items: ADC sample count of the heap's first sample, the
/// digitiser id, its status word, and the raw (packed) sample data.
pub const DIG_TIMESTAMP: u64 = 0x1600;
pub const DIG_ID: u64 = 0x3101;
pub const DIG_STATUS: u64 = 0x3102;
pub const DIG_RAW_DATA: u64 = 0x3300;

mod field {
    use core::ops::Range;
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    /// Bytes of an item pointer that hold the immediate flag and the id.
    pub const ID_WIDTH: usize = 2;
    /// Bytes of an item pointer that hold the value or heap address.
    pub const ADDR_WIDTH: usize = 3;
    pub const RESERVED: Range<usize> = 4..6;
    pub const N_ITEMS: Range<usize> = 6..8;
    pub const IMMEDIATE_BIT: u32 = 63;
}

/// One item pointer: an immediate value, or an address into the heap payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub immediate: bool,
    pub id: u64,
    /// The value (immediate) or the byte address in the heap (not immediate).
    pub value: u64,
}

impl Item {
    pub const fn immediate(id: u64, value: u64) -> Item {
        Item {
            immediate: true,
            id,
            value,
        }
    }

    pub const fn address(id: u64, value: u64) -> Item {
        Item {
            immediate: false,
            id,
            value,
        }
    }

    fn decode(raw: u64, addr_bits: u32) -> Item {
        let value_mask = mask(addr_bits);
        Item {
            immediate: raw >> field::IMMEDIATE_BIT != 0,
            id: (raw >> addr_bits) & mask(field::IMMEDIATE_BIT - addr_bits),
            value: raw & value_mask,
        }
    }

    /// The 64-bit pointer, or `None` if the id or value does not fit.
    fn encode(&self, addr_bits: u32) -> Option<u64> {
        let id_bits = field::IMMEDIATE_BIT - addr_bits;
        if self.id > mask(id_bits) || self.value > mask(addr_bits) {
            return None;
        }
        Some(
            ((self.immediate as u64) << field::IMMEDIATE_BIT) | (self.id << addr_bits) | self.value,
        )
    }
}

/// Low `bits` bits set (`bits` <= 64).
const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Whether a packet's slice of its heap lies inside the heap (when sized).
fn fits(offset: u64, len: u64, heap_size: Option<u64>) -> bool {
    match heap_size {
        Some(size) => offset.checked_add(len).is_some_and(|end| end <= size),
        None => true,
    }
}

/// The four items every packet carries, found in one pass over the pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Standard {
    heap_cnt: u64,
    heap_size: Option<u64>,
    heap_offset: u64,
    payload_len: u64,
}

/// A read/write view of one SPEAD packet held in `T`.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; accessors read zeros where it is short.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps untrusted bytes. Checks: magic 0x53, version 4, 64-bit item
    /// pointers (id width + address width = 8 bytes, address 1..=7 bytes),
    /// all pointers present; heap counter, heap offset and payload length
    /// present, immediate and not repeated (heap size too, if present);
    /// the payload within the buffer (`Truncated` if not) and, when the
    /// heap size is given, `heap_offset + payload_len <= heap_size`. Bytes
    /// after the payload are allowed here; the capture locator refuses them.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Packet { buffer };
        p.check()?;
        Ok(p)
    }

    /// The checks of [`Self::new_checked`].
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let (idw, aw) = (b[field::ID_WIDTH] as usize, b[field::ADDR_WIDTH] as usize);
        if b[field::MAGIC] != MAGIC
            || b[field::VERSION] != VERSION
            || idw + aw != ITEM_LEN
            || !(1..ITEM_LEN).contains(&aw)
        {
            return Err(WireError::Malformed);
        }
        if b.len() < self.header_len() {
            return Err(WireError::Truncated);
        }
        let s = self.standard()?;
        if !fits(s.heap_offset, s.payload_len, s.heap_size) {
            return Err(WireError::Malformed);
        }
        if (b.len() as u64).saturating_sub(self.header_len() as u64) < s.payload_len {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// One pass over the item pointers for the standard items.
    fn standard(&self) -> Result<Standard, WireError> {
        let mut found = [None::<u64>; 4];
        for it in self.items() {
            if (HEAP_CNT..=PAYLOAD_LEN).contains(&it.id) {
                let slot = &mut found[(it.id - HEAP_CNT) as usize];
                if !it.immediate || slot.is_some() {
                    return Err(WireError::Malformed);
                }
                *slot = Some(it.value);
            }
        }
        match found {
            [Some(heap_cnt), heap_size, Some(heap_offset), Some(payload_len)] => Ok(Standard {
                heap_cnt,
                heap_size,
                heap_offset,
                payload_len,
            }),
            _ => Err(WireError::Malformed),
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn byte(&self, i: usize) -> u8 {
        self.buffer.as_ref().get(i).copied().unwrap_or(0)
    }

    pub fn magic(&self) -> u8 {
        self.byte(field::MAGIC)
    }
    pub fn version(&self) -> u8 {
        self.byte(field::VERSION)
    }
    /// Bits of an item pointer that hold values and addresses (48 for 64-48);
    /// 0 if the header does not say.
    pub fn heap_address_bits(&self) -> u8 {
        (self.byte(field::ADDR_WIDTH) as u32 * 8).min(56) as u8
    }
    pub fn n_items(&self) -> usize {
        let b = self.buffer.as_ref();
        match b.get(field::N_ITEMS) {
            Some(n) => u16::from_be_bytes([n[0], n[1]]) as usize,
            None => 0,
        }
    }
    /// Header and item pointers: where the payload starts.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + ITEM_LEN * self.n_items()
    }

    /// Item pointer `i`, if the buffer holds it.
    pub fn item(&self, i: usize) -> Option<Item> {
        let at = HEADER_LEN.checked_add(i.checked_mul(ITEM_LEN)?)?;
        let w = self.buffer.as_ref().get(at..at.checked_add(ITEM_LEN)?)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(w);
        Some(Item::decode(
            u64::from_be_bytes(raw),
            self.heap_address_bits() as u32,
        ))
    }

    /// The item pointers in packet order (those the buffer holds).
    pub fn items(&self) -> impl Iterator<Item = Item> + '_ {
        (0..self.n_items()).map_while(|i| self.item(i))
    }

    /// The first item pointer with this id.
    pub fn find(&self, id: u64) -> Option<Item> {
        self.items().find(|it| it.id == id)
    }

    fn immediate_or_zero(&self, id: u64) -> u64 {
        match self.find(id) {
            Some(it) if it.immediate => it.value,
            _ => 0,
        }
    }

    pub fn heap_cnt(&self) -> u64 {
        self.immediate_or_zero(HEAP_CNT)
    }
    /// The heap size, when the packet carries it.
    pub fn heap_size(&self) -> Option<u64> {
        self.find(HEAP_SIZE)
            .filter(|i| i.immediate)
            .map(|i| i.value)
    }
    pub fn heap_offset(&self) -> u64 {
        self.immediate_or_zero(HEAP_OFFSET)
    }
    pub fn payload_len(&self) -> u64 {
        self.immediate_or_zero(PAYLOAD_LEN)
    }

    /// The payload bytes (payload length of them after the pointers); empty
    /// if the buffer is shorter than that.
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        let Ok(len) = usize::try_from(self.payload_len()) else {
            return &[];
        };
        start
            .checked_add(len)
            .and_then(|end| self.buffer.as_ref().get(start..end))
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let Ok(len) = usize::try_from(self.payload_len()) else {
            return &mut [];
        };
        match start.checked_add(len) {
            Some(end) => self.buffer.as_mut().get_mut(start..end).unwrap_or(&mut []),
            None => &mut [],
        }
    }
}

/// A parsed SPEAD packet header: the standard items, and every other item
/// pointer in packet order. Allocates (the item list): for tools, tests
/// and the sender, not the receive path, which reads the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// Flavour: 40 for SPEAD-64-40, 48 for SPEAD-64-48; a multiple of 8 in 8..=56.
    pub heap_address_bits: u8,
    pub heap_cnt: u64,
    pub heap_size: Option<u64>,
    pub heap_offset: u64,
    pub payload_len: u64,
    /// Items other than the four standard ones, in order.
    pub items: Vec<Item>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check()?;
        let s = p.standard()?;
        Ok(Repr {
            heap_address_bits: p.heap_address_bits(),
            heap_cnt: s.heap_cnt,
            heap_size: s.heap_size,
            heap_offset: s.heap_offset,
            payload_len: s.payload_len,
            items: p
                .items()
                .filter(|i| !(HEAP_CNT..=PAYLOAD_LEN).contains(&i.id))
                .collect(),
        })
    }

    pub fn n_items(&self) -> usize {
        3 + self.heap_size.is_some() as usize + self.items.len()
    }

    /// Header and pointer bytes: where the payload starts.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + ITEM_LEN * self.n_items()
    }

    /// The whole packet length: header, pointers and payload.
    pub fn packet_len(&self) -> usize {
        self.header_len()
            .saturating_add(usize::try_from(self.payload_len).unwrap_or(usize::MAX))
    }

    /// Everything that must hold for the emitted packet to pass `new_checked`.
    pub fn check(&self) -> Result<(), WireError> {
        let bits = self.heap_address_bits as u32;
        let standard = [
            Some(Item::immediate(HEAP_CNT, self.heap_cnt)),
            self.heap_size.map(|s| Item::immediate(HEAP_SIZE, s)),
            Some(Item::immediate(HEAP_OFFSET, self.heap_offset)),
            Some(Item::immediate(PAYLOAD_LEN, self.payload_len)),
        ];
        let ok = bits % 8 == 0
            && (8..=56).contains(&bits)
            && self.n_items() <= u16::MAX as usize
            && standard.iter().flatten().all(|i| i.encode(bits).is_some())
            && self
                .items
                .iter()
                .all(|i| !(HEAP_CNT..=PAYLOAD_LEN).contains(&i.id) && i.encode(bits).is_some())
            && fits(self.heap_offset, self.payload_len, self.heap_size);
        if ok {
            Ok(())
        } else {
            Err(WireError::Malformed)
        }
    }

    /// Writes the header and item pointers (standard items first: heap
    /// counter, heap size if any, heap offset, payload length; then
    /// `items`). The payload bytes are left alone; `p` must hold the whole
    /// packet (`Truncated` otherwise) so that the result passes `new_checked`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), WireError> {
        self.check()?;
        if p.buffer.as_ref().len() < self.packet_len() {
            return Err(WireError::Truncated);
        }
        let bits = self.heap_address_bits as u32;
        let b = p.buffer.as_mut();
        b[field::MAGIC] = MAGIC;
        b[field::VERSION] = VERSION;
        b[field::ADDR_WIDTH] = (bits / 8) as u8;
        b[field::ID_WIDTH] = ITEM_LEN as u8 - (bits / 8) as u8;
        b[field::RESERVED].fill(0);
        b[field::N_ITEMS].copy_from_slice(&(self.n_items() as u16).to_be_bytes());
        let standard = [
            Some(Item::immediate(HEAP_CNT, self.heap_cnt)),
            self.heap_size.map(|s| Item::immediate(HEAP_SIZE, s)),
            Some(Item::immediate(HEAP_OFFSET, self.heap_offset)),
            Some(Item::immediate(PAYLOAD_LEN, self.payload_len)),
        ];
        let all = standard
            .into_iter()
            .flatten()
            .chain(self.items.iter().copied());
        for (i, it) in all.enumerate() {
            let raw = it.encode(bits).ok_or(WireError::Malformed)?;
            let at = HEADER_LEN + ITEM_LEN * i;
            b[at..at + ITEM_LEN].copy_from_slice(&raw.to_be_bytes());
        }
        Ok(())
    }
}

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

/// Bytes that `samples` packed samples of `bits` bits occupy, if whole.
pub fn packed_len(samples: usize, bits: u8) -> Option<usize> {
    let total = samples.checked_mul(bits as usize)?;
    (total % 8 == 0).then_some(total / 8)
}

/// Unpacks signed two's-complement samples of `bits` (2..=16) bits packed as
/// one big-endian bit stream (the first sample in the most significant bits
/// of byte 0), as MeerKAT digitisers send them. Decodes `out.len()` samples;
/// `Truncated` if `packed` is too short, `Malformed` for other widths.
/// Allocation-free.
pub fn unpack_signed(packed: &[u8], bits: u8, out: &mut [i16]) -> Result<(), WireError> {
    if !(2..=16).contains(&bits) {
        return Err(WireError::Malformed);
    }
    let bits = bits as u32;
    let need = out
        .len()
        .checked_mul(bits as usize)
        .ok_or(WireError::Truncated)?
        .div_ceil(8);
    let packed = packed.get(..need).ok_or(WireError::Truncated)?;
    if bits == 8 {
        for (o, &b) in out.iter_mut().zip(packed) {
            *o = b as i8 as i16;
        }
        return Ok(());
    }
    let (mut acc, mut have, mut bytes) = (0u32, 0u32, packed.iter());
    for o in out.iter_mut() {
        while have < bits {
            acc = (acc << 8) | *bytes.next().unwrap_or(&0) as u32;
            have += 8;
        }
        have -= bits;
        let code = (acc >> have) & ((1 << bits) - 1);
        // Sign-extend from `bits` bits.
        *o = ((code << (32 - bits)) as i32 >> (32 - bits)) as i16;
        acc &= (1 << have) - 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::testutil::XorShift;

    fn dig_repr(timestamp: u64, id: u64, len: u64) -> Repr {
        Repr {
            heap_address_bits: 48,
            heap_cnt: timestamp / 4096,
            heap_size: Some(len),
            heap_offset: 0,
            payload_len: len,
            items: vec![
                Item::immediate(DIG_TIMESTAMP, timestamp),
                Item::immediate(DIG_ID, id),
                Item::immediate(DIG_STATUS, 0),
                Item::address(DIG_RAW_DATA, 0),
            ],
        }
    }

    fn packet(r: &Repr) -> Vec<u8> {
        let mut b: Vec<u8> = (0..r.packet_len()).map(|i| (i * 7) as u8).collect();
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        b
    }

    #[test]
    fn round_trip_and_known_bytes() {
        let r = dig_repr(0x0000_1234_5678_9000, 3, 5120);
        let b = packet(&r);
        assert_eq!(b.len(), 8 + 8 * 8 + 5120);
        // Independent expectation: the header and two pointers spelled out.
        assert_eq!(&b[..8], &[0x53, 4, 2, 6, 0, 0, 0, 8]);
        let heap_cnt = 0x8000_0000_0000_0000u64 | (1 << 48) | (0x1234_5678_9000 / 4096);
        assert_eq!(&b[8..16], &heap_cnt.to_be_bytes());
        let ts = 0x8000_0000_0000_0000u64 | (0x1600 << 48) | 0x1234_5678_9000;
        assert_eq!(&b[40..48], &ts.to_be_bytes());
        let raw = 0x3300u64 << 48; // an address item: immediate bit clear
        assert_eq!(&b[64..72], &raw.to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(p.payload(), &b[72..]);
        assert_eq!(p.find(DIG_ID), Some(Item::immediate(DIG_ID, 3)));
        assert_eq!((p.heap_size(), p.heap_offset()), (Some(5120), 0));
        // Other flavours and a multi-packet heap's middle packet.
        for bits in [40u8, 56, 16] {
            let r = Repr {
                heap_address_bits: bits,
                heap_cnt: 77,
                heap_size: Some(1000),
                heap_offset: 600,
                payload_len: 400,
                items: vec![Item::address(0x20, 5)],
            };
            let b = packet(&r);
            assert_eq!(b[2] as u32 + b[3] as u32, 8);
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(Repr::parse(&p).unwrap(), r);
            assert_eq!(p.payload().len(), 400);
        }
        // Heap size is optional.
        let r = Repr {
            heap_size: None,
            ..dig_repr(0, 0, 16)
        };
        assert_eq!(
            Repr::parse(&Packet::new_checked(&packet(&r)[..]).unwrap()),
            Ok(r)
        );
    }

    #[test]
    fn malformed_and_truncated() {
        let r = dig_repr(8192, 1, 64);
        let b = packet(&r);
        let err = |v: &[u8]| Packet::new_checked(v).err();
        for n in [0, 7, 8, 71, b.len() - 1] {
            assert_eq!(err(&b[..n]), Some(WireError::Truncated), "length {n}");
        }
        let set = |i: usize, v: u8| {
            let mut c = b.clone();
            c[i] = v;
            c
        };
        assert_eq!(err(&set(0, 0x54)), Some(WireError::Malformed)); // magic
        assert_eq!(err(&set(1, 3)), Some(WireError::Malformed)); // version
        assert_eq!(err(&set(2, 3)), Some(WireError::Malformed)); // 72-bit pointers
        assert_eq!(err(&set(3, 8)), Some(WireError::Malformed)); // no id bits
        let mut zero_addr = set(3, 0);
        zero_addr[2] = 8;
        assert_eq!(err(&zero_addr), Some(WireError::Malformed));
        // Item count beyond the buffer: truncated.
        assert_eq!(err(&set(6, 1)), Some(WireError::Truncated));
        // Standard items missing, repeated, or not immediate.
        let with = |items: Vec<Item>| {
            let mut c = b.clone();
            c[7] = items.len() as u8;
            for (i, it) in items.iter().enumerate() {
                let raw = it.encode(48).unwrap().to_be_bytes();
                c[8 + 8 * i..16 + 8 * i].copy_from_slice(&raw);
            }
            c
        };
        let std4 = [
            Item::immediate(HEAP_CNT, 1),
            Item::immediate(HEAP_SIZE, 64),
            Item::immediate(HEAP_OFFSET, 0),
            Item::immediate(PAYLOAD_LEN, 16),
        ];
        assert!(err(&with(std4.to_vec())).is_none());
        for drop in [0, 2, 3] {
            let mut v = std4.to_vec();
            v.remove(drop);
            assert_eq!(err(&with(v)), Some(WireError::Malformed), "without {drop}");
        }
        let mut v = std4.to_vec();
        v.remove(1);
        assert!(err(&with(v)).is_none(), "heap size is optional");
        let mut v = std4.to_vec();
        v[0] = Item::immediate(HEAP_SIZE, 64);
        assert_eq!(err(&with(v)), Some(WireError::Malformed)); // repeated
        let mut v = std4.to_vec();
        v[2].immediate = false;
        assert_eq!(err(&with(v)), Some(WireError::Malformed)); // offset as address
                                                               // Slice outside the heap.
        let mut v = std4.to_vec();
        v[2] = Item::immediate(HEAP_OFFSET, 49);
        assert_eq!(err(&with(v)), Some(WireError::Malformed));
        let mut v = std4.to_vec();
        v[3] = Item::immediate(PAYLOAD_LEN, 10_000);
        v[1] = Item::immediate(HEAP_SIZE, 20_000);
        assert_eq!(err(&with(v)), Some(WireError::Truncated));
        // Emit refuses what cannot be encoded or would not parse.
        let bad = [
            Repr {
                heap_address_bits: 44,
                ..r.clone()
            },
            Repr {
                heap_address_bits: 64,
                ..r.clone()
            },
            Repr {
                heap_cnt: 1 << 48,
                ..r.clone()
            },
            Repr {
                heap_offset: 1,
                ..r.clone()
            },
            Repr {
                items: vec![Item::immediate(1 << 15, 0)],
                ..r.clone()
            },
            Repr {
                items: vec![Item::immediate(HEAP_CNT, 0)],
                ..r.clone()
            },
        ];
        for x in bad {
            let mut out = vec![0u8; 4096];
            assert_eq!(
                x.emit(&mut Packet::new_unchecked(&mut out[..])),
                Err(WireError::Malformed),
                "{x:?}"
            );
        }
        let mut short = vec![0u8; r.packet_len() - 1];
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut short[..])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn digitiser_heaps() {
        let b = packet(&dig_repr(4096 * 9, 0x42, 5120));
        let d = digitiser(&b, 48, DIG_TIMESTAMP, DIG_ID).unwrap();
        assert_eq!((d.timestamp, d.digitiser_id), (4096 * 9, 0x42));
        assert_eq!(d.payload, &b[72..]);
        assert_eq!(
            digitiser(&b, 40, DIG_TIMESTAMP, DIG_ID),
            Err(WireError::Malformed)
        );
        assert_eq!(digitiser(&b, 48, 0x1601, DIG_ID), Err(WireError::Malformed));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(
            digitiser(&long, 48, DIG_TIMESTAMP, DIG_ID),
            Err(WireError::Malformed)
        );
        let multi = Repr {
            heap_size: Some(10_240),
            ..dig_repr(0, 1, 5120)
        };
        let m = packet(&multi);
        assert!(
            Packet::new_checked(&m[..]).is_ok(),
            "valid multi-packet heap"
        );
        assert_eq!(
            digitiser(&m, 48, DIG_TIMESTAMP, DIG_ID),
            Err(WireError::Malformed)
        );
        let mut as_addr = dig_repr(0, 1, 64);
        as_addr.items[0].immediate = false;
        let a = packet(&as_addr);
        assert_eq!(
            digitiser(&a, 48, DIG_TIMESTAMP, DIG_ID),
            Err(WireError::Malformed)
        );
    }

    #[test]
    fn heap_packets_of_several_packet_heaps() {
        fn read(b: &[u8]) -> Result<HeapPacket<'_>, WireError> {
            heap_packet(b, 48, DIG_TIMESTAMP, DIG_ID)
        }
        // The middle packet of a heap, items of the first packet absent.
        let middle = Repr {
            heap_address_bits: 48,
            heap_cnt: 12,
            heap_size: Some(3000),
            heap_offset: 1000,
            payload_len: 1000,
            items: vec![],
        };
        let b = packet(&middle);
        let h = read(&b).unwrap();
        assert_eq!(
            (
                h.heap_cnt,
                h.heap_size,
                h.heap_offset,
                h.timestamp,
                h.stream_id
            ),
            (12, Some(3000), 1000, None, None)
        );
        assert_eq!(h.payload, &b[40..]);
        // The first packet with the items; the first of a repeated item counts.
        let first = Repr {
            heap_offset: 0,
            items: vec![
                Item::immediate(DIG_TIMESTAMP, 77),
                Item::immediate(DIG_ID, 3),
                Item::immediate(DIG_ID, 4),
            ],
            ..middle.clone()
        };
        let fb = packet(&first);
        let h = read(&fb).unwrap();
        assert_eq!((h.timestamp, h.stream_id), (Some(77), Some(3)));
        let mut as_addr = first.clone();
        as_addr.items[1].immediate = false;
        assert_eq!(read(&packet(&as_addr)), Err(WireError::Malformed));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(read(&long), Err(WireError::Malformed));
        assert_eq!(read(&b[..b.len() - 1]), Err(WireError::Truncated));
        assert_eq!(
            heap_packet(&b, 40, DIG_TIMESTAMP, DIG_ID),
            Err(WireError::Malformed)
        );
        let crowded = Repr {
            items: vec![Item::immediate(0x20, 0); MAX_DIGITISER_ITEMS - 3],
            ..middle
        };
        assert_eq!(read(&packet(&crowded)), Err(WireError::Malformed));
    }

    /// Packs with a bit-by-bit reference, independent of `unpack_signed`.
    fn pack_reference(samples: &[i16], bits: u8) -> Vec<u8> {
        let mut out = vec![0u8; (samples.len() * bits as usize).div_ceil(8)];
        let mut pos = 0;
        for &s in samples {
            for k in (0..bits).rev() {
                if (s as u16 >> k) & 1 == 1 {
                    out[pos / 8] |= 0x80 >> (pos % 8);
                }
                pos += 1;
            }
        }
        out
    }

    #[test]
    fn unpack_every_width() {
        // 10-bit known bytes: -1, 0, 511, -512 -> 0x3ff 0x000 0x1ff 0x200.
        let mut out = [0i16; 4];
        unpack_signed(&[0xff, 0xc0, 0x07, 0xfe, 0x00], 10, &mut out).unwrap();
        assert_eq!(out, [-1, 0, 511, -512]);
        let mut rng = XorShift(0x005e_ed0f_5eed);
        for bits in 2..=16u8 {
            let n = 64 + rng.below(64);
            let lo = -(1i32 << (bits - 1));
            let samples: Vec<i16> = (0..n)
                .map(|_| (lo + rng.below(1 << bits) as i32) as i16)
                .collect();
            let packed = pack_reference(&samples, bits);
            let mut got = vec![0x5555i16; n];
            unpack_signed(&packed, bits, &mut got).unwrap();
            assert_eq!(got, samples, "{bits} bits");
            assert_eq!(
                unpack_signed(&packed[..packed.len() - 1], bits, &mut got),
                Err(WireError::Truncated)
            );
        }
        assert_eq!(
            unpack_signed(&[0; 8], 1, &mut out),
            Err(WireError::Malformed)
        );
        assert_eq!(
            unpack_signed(&[0; 8], 17, &mut out),
            Err(WireError::Malformed)
        );
        assert_eq!(packed_len(4096, 10), Some(5120));
        assert_eq!(packed_len(3, 10), None);
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = XorShift(0x0bad_5eed_d00d_f00d);
        let valid = packet(&dig_repr(4096 * 3, 2, 96));
        let mut accepted = 0;
        let mut bytes = Vec::new();
        let mut out = [0i16; 128];
        for i in 0..200_000 {
            rng.fill_like(&mut bytes, &valid, i);
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                accepted += 1;
                let r = Repr::parse(&p).unwrap();
                assert_eq!(p.payload().len() as u64, r.payload_len);
                let mut again = vec![0u8; r.packet_len()];
                r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
                let q = Packet::new_checked(&again[..]).unwrap();
                assert_eq!(Repr::parse(&q).unwrap(), r);
                let _ = unpack_signed(p.payload(), 2 + (i % 15) as u8, &mut out);
            }
            if let Ok(d) = digitiser(&bytes, 48, DIG_TIMESTAMP, DIG_ID) {
                let header = Packet::new_unchecked(&bytes[..]).header_len();
                assert_eq!(d.payload.len() + header, bytes.len());
                assert_eq!(
                    d.payload.len() as u64,
                    Packet::new_unchecked(&bytes[..]).payload_len()
                );
            }
            if let Ok(h) = heap_packet(&bytes, 48, DIG_TIMESTAMP, DIG_ID) {
                let header = Packet::new_unchecked(&bytes[..]).header_len();
                assert_eq!(h.payload.len() + header, bytes.len());
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.heap_cnt(), p.heap_size(), p.item(usize::MAX));
        }
        assert!(accepted > 1000, "mutations should keep many packets valid");
    }
}
