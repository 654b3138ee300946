//! The sequence-counter packet: voltstream's fixed layout for the plain
//! test and bring-up stream of the 400GbE FPGA-to-GPU paper, where each packet
//! carries a counter that goes up by one per packet and loss is read from
//! its gaps.
//!
//! 10-byte big-endian header, then the payload:
//! `index: u64 | stream: u16 | payload`. The paper's FPGA generator used a
//! 16-bit counter; describe such a design with [`crate::wire::layout`]
//! instead (and see its note on narrow counters). No function here panics
//! on any input.
//!
//! Owns the header view ([`Packet`], [`Repr`]) and the capture rules
//! ([`Locator`]).

use super::field::{fields, view, Field};
use super::{IndexKey, Locate, Located, StreamKey, StreamKeyed, WireError};
use crate::Error;

/// Bytes before the payload.
pub const HEADER_LEN: usize = 10;

view! {
    /// A read/write view of one counter packet held in `T`.
    checked by check_len
}

fields! {
    /// Packet number on this stream's timeline.
    pub index: u64 Field::be(0, 8),
    /// Also where capture steering finds the stream (see [`Locator`]).
    pub stream: u16 Field::be(8, 2),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The checks of [`Self::new_checked`]: only the 10-byte header is
    /// required (the payload length is the capture's business, see
    /// [`crate::wire::FormatSpec`]).
    pub fn check_len(&self) -> Result<(), WireError> {
        let whole = self.buffer.as_ref().len() >= HEADER_LEN;
        whole.then_some(()).ok_or(WireError::Truncated)
    }

    /// Everything after the header; empty if the view is short.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
}

/// A parsed counter header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub index: u64,
    pub stream: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check_len()?;
        Ok(Repr {
            index: p.index(),
            stream: p.stream(),
        })
    }

    /// Writes the header; the payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), WireError> {
        p.check_len()?;
        p.store(Stored {
            index: self.index,
            stream: self.stream,
        });
        Ok(())
    }
}

/// The capture rules for counter packets: stream ids `0..streams`, the
/// index the counter itself, a fixed payload length.
#[derive(Debug, Clone)]
pub struct Locator {
    streams: usize,
    payload_len: usize,
}

impl Locator {
    /// Validates the values (`Error::Config` says what to change).
    pub fn new(streams: usize, payload_len: usize) -> crate::Result<Locator> {
        if streams == 0 || streams > u16::MAX as usize + 1 {
            return Err(Error::Config(format!(
                "counter format needs 1..=65536 streams, got {streams}"
            )));
        }
        if payload_len == 0 {
            return Err(Error::Config(
                "counter format needs payload_len > 0 (bytes after the 10-byte header)".into(),
            ));
        }
        Ok(Locator {
            streams,
            payload_len,
        })
    }
}

impl Locate for Locator {
    fn streams(&self) -> usize {
        self.streams
    }

    fn payload_len(&self) -> usize {
        self.payload_len
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let p = Packet::new_checked(packet)?;
        let payload = p.payload();
        if payload.len() < self.payload_len {
            return Err(WireError::Truncated);
        }
        if payload.len() > self.payload_len {
            return Err(WireError::Malformed);
        }
        let stream = p.stream() as usize;
        if stream >= self.streams {
            return Err(WireError::Foreign);
        }
        Ok(Located {
            stream,
            index: p.index(),
            payload: packet.get(HEADER_LEN..).ok_or(WireError::Truncated)?,
        })
    }
}

impl StreamKeyed for Locator {
    fn stream_key(&self) -> Option<StreamKey> {
        Some(StreamKey {
            field: field::stream,
            ids: (0..self.streams as u64).collect(),
            min_packet_len: HEADER_LEN.saturating_add(self.payload_len),
        })
    }

    fn index_key(&self) -> Option<IndexKey> {
        Some(IndexKey::Field(field::index))
    }

    fn min_packet_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.payload_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_known_bytes() {
        let r = Repr {
            index: 0x0102_0304_0506_0708,
            stream: 0xa1b2,
        };
        let mut b = vec![0xeeu8; 14];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0xa1, 0xb2, 0xee, 0xee, 0xee, 0xee]
        );
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(r));
        assert_eq!(p.payload(), &[0xee; 4]);
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&b[..n]).err(),
                Some(WireError::Truncated)
            );
            assert_eq!(
                r.emit(&mut Packet::new_unchecked(&mut b[..n])),
                Err(WireError::Truncated)
            );
        }
        assert!(Packet::new_checked(&b[..HEADER_LEN]).is_ok());
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = crate::wire::testutil::XorShift(0x0040_06be_00c0_u64);
        let mut valid = vec![0u8; 40];
        Repr {
            index: 12345,
            stream: 1,
        }
        .emit(&mut Packet::new_unchecked(&mut valid[..]))
        .unwrap();
        for (_, bytes) in rng.cases(&valid, 100_000) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let r = Repr::parse(&p).unwrap();
                let mut again = bytes.clone();
                r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
                assert_eq!(again, bytes);
                assert_eq!(p.payload().len() + HEADER_LEN, bytes.len());
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.index(), p.stream(), p.payload());
        }
    }
}
