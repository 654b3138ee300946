//! One SPEAD item pointer: an immediate value or an address into the heap.

use super::IMMEDIATE_BIT;

/// Standard item ids (SPEAD specification, section "reserved items").
pub const HEAP_CNT: u64 = 0x1;
pub const HEAP_SIZE: u64 = 0x2;
pub const HEAP_OFFSET: u64 = 0x3;
pub const PAYLOAD_LEN: u64 = 0x4;

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

    pub(super) fn decode(raw: u64, addr_bits: u32) -> Item {
        let value_mask = mask(addr_bits);
        Item {
            immediate: raw >> IMMEDIATE_BIT != 0,
            id: (raw >> addr_bits) & mask(IMMEDIATE_BIT - addr_bits),
            value: raw & value_mask,
        }
    }

    /// The 64-bit pointer, or `None` if the id or value does not fit.
    pub(super) fn encode(&self, addr_bits: u32) -> Option<u64> {
        let id_bits = IMMEDIATE_BIT - addr_bits;
        if self.id > mask(id_bits) || self.value > mask(addr_bits) {
            return None;
        }
        Some(((self.immediate as u64) << IMMEDIATE_BIT) | (self.id << addr_bits) | self.value)
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
