//! The SPEAD packet header view and its parsed [`Repr`].

use super::{
    Item, HEADER_LEN, HEAP_CNT, HEAP_OFFSET, HEAP_SIZE, ITEM_LEN, MAGIC, PAYLOAD_LEN, VERSION,
};
use super::{DIG_ID, DIG_RAW_DATA, DIG_STATUS, DIG_TIMESTAMP};
use crate::wire::field::{fields, view, Field};
use crate::wire::WireError;

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

view! {
    /// A read/write view of one SPEAD packet held in `T`.
    checked by check
}

fields! {
    pub magic: u8 Field::be(0, 1),
    pub version: u8 Field::be(1, 1),
    /// Bytes of an item pointer that hold the immediate flag and the id.
    id_width: usize Field::be(2, 1),
    /// Bytes of an item pointer that hold the value or heap address.
    addr_width: usize Field::be(3, 1),
    reserved: u16 Field::be(4, 2),
    pub n_items: usize Field::be(6, 2),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The checks of [`Self::new_checked`]: magic 0x53, version 4, 64-bit
    /// item pointers (id width + address width = 8 bytes, address 1..=7
    /// bytes), all pointers present; heap counter, heap offset and payload
    /// length present, immediate and not repeated (heap size too, if
    /// present); the payload within the buffer (`Truncated` if not) and, when
    /// the heap size is given, `heap_offset + payload_len <= heap_size`.
    /// Bytes after the payload are allowed here; the capture locator refuses
    /// them.
    #[inline]
    pub fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let (idw, aw) = (self.id_width(), self.addr_width());
        if self.magic() != MAGIC
            || self.version() != VERSION
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
    #[inline]
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

    /// Bits of an item pointer that hold values and addresses (48 for 64-48);
    /// 0 if the header does not say.
    pub fn heap_address_bits(&self) -> u8 {
        (self.addr_width() * 8).min(56) as u8
    }
    /// Header and item pointers: where the payload starts.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + ITEM_LEN * self.n_items()
    }

    /// Item pointer `i`, if the buffer holds it.
    pub fn item(&self, i: usize) -> Option<Item> {
        let raw = self.raw_item(i)?;
        Some(Item::decode(raw, self.heap_address_bits() as u32))
    }

    /// The 64 bits of item pointer `i`, if the buffer holds them.
    #[inline]
    fn raw_item(&self, i: usize) -> Option<u64> {
        let at = HEADER_LEN.checked_add(i.checked_mul(ITEM_LEN)?)?;
        let w = self.buffer.as_ref().get(at..at.checked_add(ITEM_LEN)?)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(w);
        Some(u64::from_be_bytes(raw))
    }

    /// The item pointers in packet order (those the buffer holds).
    pub fn items(&self) -> impl Iterator<Item = Item> + '_ {
        // The flavour once per packet, not once per pointer: the capture
        // path walks every pointer twice.
        let bits = self.heap_address_bits() as u32;
        (0..self.n_items()).map_while(move |i| Some(Item::decode(self.raw_item(i)?, bits)))
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
    /// The header of a MeerKAT digitiser heap sent as one packet (SPEAD-64-48):
    /// `len` payload bytes, heap counter `timestamp / samples_per_heap`, and
    /// the time stamp, digitiser id, status (0) and raw data items, in the
    /// order the digitisers send them.
    pub fn digitiser(timestamp: u64, samples_per_heap: u64, digitiser_id: u64, len: u64) -> Repr {
        Repr {
            heap_address_bits: super::DEFAULT_HEAP_ADDRESS_BITS,
            heap_cnt: timestamp.checked_div(samples_per_heap).unwrap_or(0),
            heap_size: Some(len),
            heap_offset: 0,
            payload_len: len,
            items: vec![
                Item::immediate(DIG_TIMESTAMP, timestamp),
                Item::immediate(DIG_ID, digitiser_id),
                Item::immediate(DIG_STATUS, 0),
                Item::address(DIG_RAW_DATA, 0),
            ],
        }
    }

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
        ok.then_some(()).ok_or(WireError::Malformed)
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
        p.store(Stored {
            magic: MAGIC,
            version: VERSION,
            id_width: ITEM_LEN - bits as usize / 8,
            addr_width: bits as usize / 8,
            reserved: 0,
            n_items: self.n_items(),
        });
        let b = p.buffer.as_mut();
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
