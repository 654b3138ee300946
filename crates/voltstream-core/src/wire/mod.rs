//! Packet formats as zero-copy views.
//!
//! Contract: every `new_checked` accepts any byte slice and returns either a
//! view whose accessors cannot panic, or a [`WireError`]. No function in this
//! module panics on any input; the fuzz targets in `fuzz/` check it, and each
//! parser's unit tests feed it 200k random and mutated frames on stable.
//! Each format follows the same shape (after smoltcp's `wire`): a `Packet<T>`
//! view with `new_checked`/`new_unchecked`, field offsets in a private
//! `mod field`, and a parsed `Repr` with `parse` and `emit`; the view and its
//! fields are stated through the `view!` and `fields!` macros of `field.rs`.
//!
//! [`Locate`] is what the assembler needs from a format: which stream a packet
//! belongs to, its position on that stream's packet timeline, and its payload.
//! Each format's file holds its own locator beside its view (`vdif::Locator`,
//! `spead::HeapMap`, ...). [`FormatSpec`] describes a capture's format and
//! builds its [`Locator`], which dispatches each packet to the format's code.
#![deny(unsafe_code)]

pub mod codif;
pub mod counter;
mod error;
mod field;
mod format;
pub mod layout;
mod locate;
mod locator;
pub mod net;
pub mod spead;
pub mod vdif;
pub mod ynao;

pub use codif::{Packet as CodifPacket, Repr as CodifRepr};
pub use counter::{Packet as CounterPacket, Repr as CounterRepr};
pub use error::WireError;
pub use format::FormatSpec;
pub use layout::{Check as LayoutCheck, Endian, Field as LayoutField, Layout};
pub use locate::{IndexKey, Locate, Located, StreamKey, StreamKeyed};
pub use locator::Locator;
pub use spead::{HeapIndex as SpeadHeapIndex, HeapMap as SpeadHeapMap};
pub use spead::{Item as SpeadItem, Packet as SpeadPacket, Repr as SpeadRepr};
pub use vdif::{Packet as VdifPacket, Repr as VdifRepr};
pub use ynao::{Packet as YnaoPacket, Repr as YnaoRepr};

#[cfg(test)]
pub(crate) mod testutil {
    /// xorshift64: enough randomness to shake parsers, no dependency.
    pub struct XorShift(pub u64);

    impl XorShift {
        pub fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }

        /// `n` cases made by [`Self::fill_like`] from `valid`, with their
        /// iteration numbers: the input of every no-panic test.
        pub fn cases<'a>(
            &'a mut self,
            valid: &'a [u8],
            n: usize,
        ) -> impl Iterator<Item = (usize, Vec<u8>)> + 'a {
            (0..n).map(move |i| {
                let mut bytes = Vec::new();
                self.fill_like(&mut bytes, valid, i);
                (i, bytes)
            })
        }

        /// Fills `out` with a case for iteration `i`: alternately pure noise
        /// of random length, and `valid` with a few bytes changed, often in
        /// the header, and its length cut or grown.
        pub fn fill_like(&mut self, out: &mut Vec<u8>, valid: &[u8], i: usize) {
            out.clear();
            if i % 4 == 0 {
                let n = self.below(valid.len() + 64);
                out.extend((0..n).map(|_| self.next() as u8));
                return;
            }
            out.extend_from_slice(valid);
            for _ in 0..1 + self.below(4) {
                let at = if self.next() & 1 == 0 {
                    self.below(32.min(out.len()))
                } else {
                    self.below(out.len())
                };
                if let Some(b) = out.get_mut(at) {
                    *b ^= 1 << self.below(8);
                    if self.next() % 8 == 0 {
                        *b = self.next() as u8;
                    }
                }
            }
            match self.below(8) {
                0 => out.truncate(self.below(valid.len())),
                1 => out.extend((0..self.below(16)).map(|_| self.next() as u8)),
                _ => {}
            }
        }
    }
}
