//! One header field, and the plumbing every header view shares.
//!
//! [`Field`] is an unsigned integer of 1 to 8 bytes at a byte offset, big- or
//! little-endian, optionally narrowed to a bit range: the unit both the
//! built-in formats (their `mod field` tables) and the declarative
//! [`crate::wire::Layout`] are made of. Two macros turn a format file's
//! statement of its fields into code: `view!` declares the `Packet<T>` view
//! (constructors and buffer access), `fields!` its getters. The payload
//! formats and the network headers of `wire::net` use both alike. Reads past the
//! buffer give zero and writes past it do nothing, so a view built with
//! `new_unchecked` over short bytes still never panics. No function here
//! panics on any input.

use super::WireError;

/// Byte order of a multi-byte field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    Big,
    Little,
}

/// An unsigned integer field: `bytes` bytes at `offset`, in `endian` order,
/// then `(value >> shift)` keeping the low `bits` bits (`bits == 0`: all
/// bits above `shift`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub bytes: u8,
    pub endian: Endian,
    pub shift: u8,
    pub bits: u8,
}

impl Field {
    /// A whole big-endian field, the common case.
    pub const fn be(offset: usize, bytes: u8) -> Field {
        Field {
            offset,
            bytes,
            endian: Endian::Big,
            shift: 0,
            bits: 0,
        }
    }

    /// A whole little-endian field.
    pub const fn le(offset: usize, bytes: u8) -> Field {
        Field {
            endian: Endian::Little,
            ..Field::be(offset, bytes)
        }
    }

    /// This field narrowed to `bits` bits from bit `shift` (VDIF and CODIF
    /// pack several fields into one word).
    pub const fn part(self, shift: u8, bits: u8) -> Field {
        Field {
            shift,
            bits,
            ..self
        }
    }

    #[inline(always)]
    pub(super) fn width(&self) -> u32 {
        if self.bits == 0 {
            (self.bytes as u32 * 8).saturating_sub(self.shift as u32)
        } else {
            self.bits as u32
        }
    }

    /// Largest value the field can hold.
    #[inline(always)]
    pub fn max(&self) -> u64 {
        u64::MAX >> (64 - self.width().clamp(1, 64))
    }

    #[inline(always)]
    pub(super) fn end(&self) -> usize {
        self.offset.saturating_add(self.bytes as usize)
    }

    /// The whole bytes holding the field, as one integer (of a field wider
    /// than 8 bytes, which only an unvalidated layout has: its first 8
    /// bytes big-endian, its last 8 little-endian). Through a padded array,
    /// so that a constant width compiles to one load.
    #[inline(always)]
    fn raw(&self, src: &[u8]) -> u64 {
        let mut b = [0u8; 8];
        match self.endian {
            Endian::Big => {
                let s = &src[..src.len().min(8)];
                b[8 - s.len()..].copy_from_slice(s);
                u64::from_be_bytes(b)
            }
            Endian::Little => {
                let s = &src[src.len().saturating_sub(8)..];
                b[..s.len()].copy_from_slice(s);
                u64::from_le_bytes(b)
            }
        }
    }

    // Always inlined, here and above: with a constant field (every format's
    // `mod field`) a read folds into one load (and a byte swap where the
    // order differs from the machine's), as a hand-written accessor would.

    /// Reads the field; `None` if the packet is too short. Meaningful only
    /// for a validated field, but never panics.
    #[inline(always)]
    pub fn read(&self, packet: &[u8]) -> Option<u64> {
        let src = packet.get(self.offset..self.end())?;
        Some(self.raw(src).checked_shr(self.shift as u32).unwrap_or(0) & self.max())
    }

    /// Reads the field, or 0 where the packet is too short (what a view
    /// built with `new_unchecked` over short bytes reads).
    #[inline(always)]
    pub fn get(&self, packet: &[u8]) -> u64 {
        self.read(packet).unwrap_or(0)
    }

    /// Writes the low bits of `value` into the field, keeping the other bits
    /// of its bytes; does nothing where the packet is too short.
    #[inline(always)]
    pub fn set(&self, packet: &mut [u8], value: u64) {
        let Some(dst) = packet.get_mut(self.offset..self.end()) else {
            return;
        };
        let shift = self.shift as u32;
        let mask = self.max().checked_shl(shift).unwrap_or(0);
        let new = (self.raw(dst) & !mask) | (value.checked_shl(shift).unwrap_or(0) & mask);
        match self.endian {
            Endian::Big => {
                let n = dst.len().min(8);
                dst[..n].copy_from_slice(&new.to_be_bytes()[8 - n..]);
            }
            Endian::Little => {
                let at = dst.len().saturating_sub(8);
                let n = dst.len() - at;
                dst[at..].copy_from_slice(&new.to_le_bytes()[..n]);
            }
        }
    }
}

/// The length checks of a frame that states its own length: `Truncated`
/// where the buffer is shorter than the header, `Malformed` where the frame
/// stated is no longer than the header, `Truncated` where the buffer is
/// shorter than that frame. Extra bytes after the frame are allowed (a file
/// holds many frames).
#[inline]
pub(crate) fn check_frame(len: usize, header: usize, frame: usize) -> Result<(), WireError> {
    if len < header {
        Err(WireError::Truncated)
    } else if frame <= header {
        Err(WireError::Malformed)
    } else if len < frame {
        Err(WireError::Truncated)
    } else {
        Ok(())
    }
}

/// A getter's type, to and from a field's (already narrowed) value; a field
/// is declared no wider than its type, so the casts keep every bit.
pub(crate) trait FieldValue {
    fn from_field(v: u64) -> Self;
    fn into_field(self) -> u64;
}

macro_rules! field_value {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline(always)]
            fn from_field(v: u64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn into_field(self) -> u64 {
                self as u64
            }
        }
    )*};
}
field_value!(u8, u16, u32, u64, usize);

impl FieldValue for bool {
    #[inline(always)]
    fn from_field(v: u64) -> Self {
        v != 0
    }
    #[inline(always)]
    fn into_field(self) -> u64 {
        self as u64
    }
}

/// Declares a header's `Packet<T>` view: the struct, `new_unchecked`,
/// `new_checked` (which runs the named check method the file writes) and
/// `into_inner`. Payload formats fail with [`WireError`]; the network headers
/// of `wire::net` name their own error (`error Reason`) and add `payload`:
/// `payload`, `into_payload` and `payload_mut` over the file's
/// `payload_range` (where the header says its payload is).
macro_rules! view {
    ($(#[$doc:meta])* checked by $check:ident) => {
        $crate::wire::field::view!($(#[$doc])* checked by $check, error $crate::wire::WireError);
    };
    ($(#[$doc:meta])* checked by $check:ident, error $err:ty, payload) => {
        $crate::wire::field::view!($(#[$doc])* checked by $check, error $err);

        impl<T: AsRef<[u8]>> Packet<T> {
            /// The payload; empty when the buffer is shorter than the header
            /// says (possible only unchecked).
            #[inline]
            pub fn payload(&self) -> &[u8] {
                let r = self.payload_range();
                self.buffer.as_ref().get(r).unwrap_or(&[])
            }
        }

        impl<'a> Packet<&'a [u8]> {
            /// The payload, borrowed from the buffer rather than the view (a
            /// view made on the stack can hand it on).
            #[inline]
            pub fn into_payload(self) -> &'a [u8] {
                let r = self.payload_range();
                self.buffer.get(r).unwrap_or(&[])
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// The payload, writable; empty if the view is too short.
            pub fn payload_mut(&mut self) -> &mut [u8] {
                let r = self.payload_range();
                self.buffer.as_mut().get_mut(r).unwrap_or(&mut [])
            }
        }
    };
    ($(#[$doc:meta])* checked by $check:ident, error $err:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checks; accessors may then read garbage
            /// but never panic (reads past the end give zero).
            #[inline]
            pub fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// Wraps untrusted bytes: `Ok` only when
            #[doc = concat!("[`Self::", stringify!($check), "`]")]
            /// passes, and then no accessor can read past the frame.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, $err> {
                let p = Packet { buffer };
                p.$check()?;
                Ok(p)
            }

            /// Consumes the view, returning the buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// A format's header fields, one a line: `name: type location`, where the
/// location is a [`Field`] expression (the file's own shorthand, such as
/// VDIF's `bits(word, lo, width)`). From that one list it makes:
/// - `mod field`, a [`Field`] constant per field under the field's name
///   (where `Repr::emit` writes it and capture steering finds it);
/// - a getter per field on `Packet<T>`: `pub` ones are the view's API,
///   private ones hold a stored form (length in 8-byte units, count minus
///   one) that a hand-written getter turns into the meaning;
/// - `Stored`, every field as stored, and `Packet::store`, which writes them
///   all, so `Repr::emit` states values, not offsets.
macro_rules! fields {
    ($($(#[$doc:meta])* $vis:vis $name:ident: $ty:ident $at:expr,)*) => {
        /// Where each header field is, named as its getter.
        #[allow(non_upper_case_globals, unused_imports)]
        mod field {
            use super::*;
            $(pub const $name: $crate::wire::field::Field = $at;)*
        }

        /// Every header field as stored (see [`Packet::store`]).
        #[derive(Debug, Clone, Copy)]
        struct Stored {
            $($name: $ty,)*
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                $(#[$doc])*
                #[inline]
                #[allow(dead_code)]
                $vis fn $name(&self) -> $ty {
                    $crate::wire::field::FieldValue::from_field(field::$name.get(self.buffer.as_ref()))
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// Writes every header field (other bits of their bytes kept);
            /// fields past the end of the buffer are not written.
            fn store(&mut self, s: Stored) {
                let b = self.buffer.as_mut();
                $(field::$name.set(b, $crate::wire::field::FieldValue::into_field(s.$name));)*
            }
        }
    };
}

pub(crate) use {fields, view};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_other_bits_and_round_trips() {
        let mut b = [0xffu8; 9];
        let f = Field::le(1, 4).part(16, 10);
        f.set(&mut b, 0x2a5);
        assert_eq!(f.get(&b), 0x2a5);
        assert_eq!(b, [0xff, 0xff, 0xff, 0xa5, 0xfe, 0xff, 0xff, 0xff, 0xff]);
        let g = Field::be(1, 8);
        g.set(&mut b, 0x0102_0304_0506_0708);
        assert_eq!(&b[1..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Field::le(1, 8).part(0, 64).get(&b), 0x0807_0605_0403_0201);
        // Past the end: reads zero, writes nothing.
        Field::be(8, 2).set(&mut b, 0);
        assert_eq!((Field::be(8, 2).get(&b), b[8]), (0, 8));
    }
}
