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
//!
//! Files: `packet.rs` the header view and its [`Repr`], `item.rs` one item
//! pointer, `heap.rs` the capture-time reading of a heap's packet,
//! `locator.rs` the capture rules ([`HeapMap`], the format's
//! [`crate::wire::Locate`]), `samples.rs` the packed sample words.

/// Bytes in the packet header.
pub const HEADER_LEN: usize = 8;
/// Bytes in one item pointer (all flavours we accept are SPEAD-64-XX).
pub const ITEM_LEN: usize = 8;
pub const MAGIC: u8 = 0x53;
pub const VERSION: u8 = 4;
/// Heap address bits of the usual flavour, SPEAD-64-48 (MeerKAT, spead2's default).
pub const DEFAULT_HEAP_ADDRESS_BITS: u8 = 48;

/// The item pointer bit that marks an immediate value.
const IMMEDIATE_BIT: u32 = 63;

mod heap;
mod item;
mod locator;
mod packet;
mod samples;

pub use heap::{digitiser, heap_packet, Digitiser, HeapPacket, MAX_DIGITISER_ITEMS};
pub use heap::{
    DIG_ID, DIG_RAW_DATA, DIG_SAMPLES_PER_HEAP, DIG_SAMPLE_BITS, DIG_STATUS, DIG_TIMESTAMP,
};
pub use item::{Item, HEAP_CNT, HEAP_OFFSET, HEAP_SIZE, PAYLOAD_LEN};
pub use locator::{HeapIndex, HeapMap};
pub use packet::{Packet, Repr};
pub use samples::{packed_len, unpack_signed};

#[cfg(test)]
mod tests;
