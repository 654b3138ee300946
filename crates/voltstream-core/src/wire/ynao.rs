//! The YNAO frame: the ROACH2 packet of the YNAO 40 m coherent-dedispersion
//! backend, with the byte layout voltstream fixes for it (`docs/formats.md`).
//!
//! 8216 bytes: a 24-byte big-endian header (sequence counter, MJD day, second
//! of day, nanoseconds, version, subband, nchan) then 64 spectra x 32 channels
//! x 2 polarisations x (re, im) int8, time-major (TFP). No function here
//! panics on any input.
//!
//! Owns the header view ([`Packet`], [`Repr`]) and the capture rules
//! ([`Locator`]).

use super::field::{fields, view, Field};
use super::{IndexKey, Locate, Located, StreamKey, StreamKeyed, WireError};

pub const HEADER_LEN: usize = 24;
pub const DATA_LEN: usize = 8192;
pub const FRAME_LEN: usize = HEADER_LEN + DATA_LEN;
/// Spectra (time samples) per frame.
pub const NSPEC: usize = 64;
pub const NCHAN: usize = 32;
pub const NPOL: usize = 2;
pub const VERSION: u8 = 1;

/// Where the data array is.
const DATA: core::ops::Range<usize> = HEADER_LEN..FRAME_LEN;

view! {
    /// A read/write view of one YNAO frame held in `T`.
    checked by check
}

fields! {
    /// Frame number since the stream started.
    pub sequence: u64 Field::be(0, 8),
    pub mjd: u32 Field::be(8, 4),
    /// Second of the UTC day of the first sample.
    pub second: u32 Field::be(12, 4),
    pub nanosecond: u32 Field::be(16, 4),
    pub version: u8 Field::be(20, 1),
    pub subband: u8 Field::be(21, 1),
    pub nchan: u16 Field::be(22, 2),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The checks of [`Self::new_checked`]: at least one whole frame,
    /// version 1, 32 channels, second < 86400, nanoseconds < 1e9. Extra
    /// trailing bytes are allowed here; [`crate::wire::FormatSpec`] refuses
    /// them for capture.
    pub fn check(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < FRAME_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != VERSION
            || self.nchan() as usize != NCHAN
            || self.second() >= 86_400
            || self.nanosecond() >= 1_000_000_000
        {
            return Err(WireError::Malformed);
        }
        Ok(())
    }

    /// The 8192 data bytes; empty if the view is short.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(DATA).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut().get_mut(DATA).unwrap_or(&mut [])
    }
}

/// A parsed YNAO header (version and nchan are fixed and not carried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub sequence: u64,
    pub mjd: u32,
    pub second: u32,
    pub nanosecond: u32,
    pub subband: u8,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check()?;
        Ok(Repr {
            sequence: p.sequence(),
            mjd: p.mjd(),
            second: p.second(),
            nanosecond: p.nanosecond(),
            subband: p.subband(),
        })
    }

    /// Writes the header (data bytes untouched). `p` must hold a whole frame
    /// so the result passes `new_checked`; time fields must be in range.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), WireError> {
        if self.second >= 86_400 || self.nanosecond >= 1_000_000_000 {
            return Err(WireError::Malformed);
        }
        if p.buffer.as_ref().len() < FRAME_LEN {
            return Err(WireError::Truncated);
        }
        p.store(Stored {
            sequence: self.sequence,
            mjd: self.mjd,
            second: self.second,
            nanosecond: self.nanosecond,
            version: VERSION,
            subband: self.subband,
            nchan: NCHAN as u16,
        });
        Ok(())
    }
}

/// Byte offset of sample (time `t`, channel `c`, polarisation `p`) in the
/// data array; the real part is there, the imaginary part one byte later.
pub const fn data_offset(t: usize, c: usize, p: usize) -> usize {
    ((t * NCHAN + c) * NPOL + p) * 2
}

/// The capture rules for YNAO frames: one stream, the index the sequence
/// counter, exactly one frame per packet.
#[derive(Debug, Clone)]
pub struct Locator {
    /// Accept only this subband id; `None` accepts any.
    pub subband: Option<u8>,
}

impl Locate for Locator {
    fn streams(&self) -> usize {
        1
    }

    fn payload_len(&self) -> usize {
        DATA_LEN
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let p = Packet::new_checked(packet)?;
        if packet.len() != FRAME_LEN {
            return Err(WireError::Malformed);
        }
        if self.subband.is_some_and(|s| s != p.subband()) {
            return Err(WireError::Foreign);
        }
        Ok(Located {
            stream: 0,
            index: p.sequence(),
            payload: packet.get(HEADER_LEN..).ok_or(WireError::Truncated)?,
        })
    }
}

impl StreamKeyed for Locator {
    /// One stream: nothing to steer by.
    fn stream_key(&self) -> Option<StreamKey> {
        None
    }

    fn index_key(&self) -> Option<IndexKey> {
        Some(IndexKey::Field(field::sequence))
    }

    fn min_packet_len(&self) -> usize {
        FRAME_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> Repr {
        Repr {
            sequence: 0x0123_4567_89ab_cdef,
            mjd: 60_123,
            second: 86_399,
            nanosecond: 999_999_999,
            subband: 7,
        }
    }

    #[test]
    fn round_trip_and_known_bytes() {
        let mut buf = vec![0u8; FRAME_LEN];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        let r = repr();
        r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        // Independent expectation: the header spelled out byte by byte.
        let mut want = vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
        want.extend_from_slice(&60_123u32.to_be_bytes());
        want.extend_from_slice(&[0x00, 0x01, 0x51, 0x7f]); // 86399
        want.extend_from_slice(&[0x3b, 0x9a, 0xc9, 0xff]); // 999999999
        want.extend_from_slice(&[1, 7, 0, 32]);
        assert_eq!(&buf[..24], &want[..]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(p.payload().len(), DATA_LEN);
        assert_eq!(p.payload()[0], (24 * 31 % 251) as u8);
        assert_eq!(data_offset(63, 31, 1) + 2, DATA_LEN);
    }

    #[test]
    fn malformed_and_truncated() {
        let mut buf = vec![3u8; FRAME_LEN];
        repr()
            .emit(&mut Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        for n in [0, 23, 24, FRAME_LEN - 1] {
            assert_eq!(
                Packet::new_checked(&buf[..n]).err(),
                Some(WireError::Truncated)
            );
        }
        let corrupt = |i: usize, v: u8| {
            let mut b = buf.clone();
            b[i] = v;
            Packet::new_checked(b).err()
        };
        assert_eq!(corrupt(20, 2), Some(WireError::Malformed)); // version
        assert_eq!(corrupt(23, 64), Some(WireError::Malformed)); // nchan
        assert_eq!(corrupt(14, 0xff), Some(WireError::Malformed)); // second
        assert_eq!(corrupt(16, 0xff), Some(WireError::Malformed)); // ns
        assert_eq!(corrupt(21, 0xff), None); // any subband is well-formed
        let bad = [
            Repr {
                second: 86_400,
                ..repr()
            },
            Repr {
                nanosecond: 1_000_000_000,
                ..repr()
            },
        ];
        for r in bad {
            let mut b = vec![0u8; FRAME_LEN];
            assert_eq!(
                r.emit(&mut Packet::new_unchecked(&mut b[..])),
                Err(WireError::Malformed)
            );
        }
        let mut short = [0u8; 100];
        assert_eq!(
            repr().emit(&mut Packet::new_unchecked(&mut short[..])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = crate::wire::testutil::XorShift(0x1234_5678_9abc_def1);
        let mut valid = vec![0u8; FRAME_LEN];
        repr()
            .emit(&mut Packet::new_unchecked(&mut valid[..]))
            .unwrap();
        let mut accepted = 0;
        for (_, bytes) in rng.cases(&valid, 200_000) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                accepted += 1;
                let r = Repr::parse(&p).unwrap();
                let mut again = vec![0u8; FRAME_LEN];
                r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
                assert_eq!(p.payload().len(), DATA_LEN);
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.sequence(), p.nchan(), p.subband());
        }
        assert!(accepted > 1000);
    }
}
