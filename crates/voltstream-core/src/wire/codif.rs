//! CODIF data frames (CSIRO Oversampled Data Interchange Format), as
//! zero-copy views.
//!
//! A frame is a 64-byte header of eight little-endian 64-bit words followed
//! by the data array. Unlike VDIF, the length field counts the data array
//! only (in 8-byte units), the frame number restarts every `period` seconds,
//! and the channel count is stored minus one. The layout follows the CSIRO
//! reference implementation (DiFX `codifio`), as `docs/formats.md` explains:
//! the draft specification itself was not available to us. No function here
//! panics on any input.
//!
//! Owns the header view ([`Packet`], [`Repr`]) and the capture rules
//! ([`Locator`]).

use super::field::{check_frame, fields, view, Field};
use super::{Locate, Located, StreamKey, StreamKeyed, WireError};
use crate::Error;

/// Bytes in the header.
pub const HEADER_LEN: usize = 64;
/// The sync word the reference implementation writes into word 5.
pub const SYNC: u32 = 0xABAD_DEED;

/// Bits `lo..lo + width` of little-endian 64-bit word `w`.
const fn bits(w: usize, lo: u8, width: u8) -> Field {
    Field::le(8 * w, 8).part(lo, width)
}

view! {
    /// A read/write view of one CODIF frame held in `T`.
    checked by check_len
}

fields! {
    /// Frame number within the current period.
    pub frame: u32 bits(0, 0, 32),
    /// Seconds since the reference epoch (a multiple of `period` at frame 0).
    pub seconds: u32 bits(0, 32, 30),
    pub complex: bool bits(0, 62, 1),
    pub invalid: bool bits(0, 63, 1),
    pub station: u16 bits(1, 0, 16),
    /// Sample representation code (0: offset binary in the reference code).
    pub representation: u8 bits(1, 22, 4),
    /// Reference epoch in half-years since 2000-01-01.
    pub epoch: u8 bits(1, 26, 6),
    data_len8: usize bits(1, 32, 24),
    /// Bits per sample (per real or imaginary part), as stored.
    pub bits_per_sample: u8 bits(1, 56, 5),
    pub version: u8 bits(1, 61, 3),
    pub group: u16 bits(2, 0, 16),
    /// Also where capture steering finds the stream (see [`Locator`]).
    pub thread: u16 bits(2, 16, 16),
    nchan_m1: u32 bits(2, 32, 16),
    /// Sample block length, as stored.
    pub block_len: u16 bits(2, 48, 16),
    /// Seconds after which the frame number restarts.
    pub period: u16 bits(3, 32, 16),
    /// Samples per channel in one period.
    pub total_samples: u64 bits(4, 0, 64),
    pub sync: u32 bits(5, 32, 32),
    /// Extended data version; 0 = no extended data.
    pub edv: u8 bits(6, 32, 8),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The checks of [`Self::new_checked`]: the 64-byte header, a non-empty
    /// data array, and the buffer at least header plus data array
    /// (`Truncated` if not). Extra bytes after the frame are allowed (a file
    /// holds many frames).
    pub fn check_len(&self) -> Result<(), WireError> {
        check_frame(self.buffer.as_ref().len(), HEADER_LEN, self.frame_len())
    }

    /// Data array bytes, header excluded.
    pub fn data_len(&self) -> usize {
        self.data_len8() * 8
    }
    /// Whole frame: header plus data array.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.data_len()
    }
    /// Channels, 1..=65536 (stored minus one).
    pub fn nchan(&self) -> u32 {
        self.nchan_m1() + 1
    }
    /// The data array; empty if the view is shorter than the frame.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.frame_len())
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.frame_len();
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..end)
            .unwrap_or(&mut [])
    }
}

/// A parsed CODIF header. Extended user data (beyond the EDV byte) is
/// neither read nor kept; emit writes it as zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub invalid: bool,
    pub complex: bool,
    pub seconds: u32,
    pub frame: u32,
    pub epoch: u8,
    pub representation: u8,
    pub station: u16,
    pub version: u8,
    pub bits_per_sample: u8,
    /// Data array bytes, header excluded; a positive multiple of 8.
    pub data_len: usize,
    pub group: u16,
    pub thread: u16,
    /// 1..=65536.
    pub nchan: u32,
    pub block_len: u16,
    pub period: u16,
    pub total_samples: u64,
    pub sync: u32,
    pub edv: u8,
}

/// The smallest frame `emit` accepts: version 1, one channel, an 8-byte
/// data array, the reference sync word, everything else zero. Set the fields
/// that matter and take the rest from here.
impl Default for Repr {
    fn default() -> Repr {
        Repr {
            invalid: false,
            complex: false,
            seconds: 0,
            frame: 0,
            epoch: 0,
            representation: 0,
            station: 0,
            version: 1,
            bits_per_sample: 0,
            data_len: 8,
            group: 0,
            thread: 0,
            nchan: 1,
            block_len: 0,
            period: 0,
            total_samples: 0,
            sync: SYNC,
            edv: 0,
        }
    }
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check_len()?;
        Ok(Repr {
            frame: p.frame(),
            seconds: p.seconds(),
            complex: p.complex(),
            invalid: p.invalid(),
            epoch: p.epoch(),
            representation: p.representation(),
            station: p.station(),
            version: p.version(),
            bits_per_sample: p.bits_per_sample(),
            data_len: p.data_len(),
            group: p.group(),
            thread: p.thread(),
            nchan: p.nchan(),
            block_len: p.block_len(),
            period: p.period(),
            total_samples: p.total_samples(),
            sync: p.sync(),
            edv: p.edv(),
        })
    }

    pub fn frame_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.data_len)
    }

    /// Every field fits its bits, and the data array is a positive multiple of 8.
    pub fn check(&self) -> Result<(), WireError> {
        let ok = self.seconds < 1 << 30
            && self.epoch < 64
            && self.representation < 16
            && self.version < 8
            && self.bits_per_sample < 32
            && self.data_len % 8 == 0
            && self.data_len > 0
            && self.data_len / 8 < 1 << 24
            && (1..=1 << 16).contains(&self.nchan);
        ok.then_some(()).ok_or(WireError::Malformed)
    }

    /// Writes the header (data array untouched); `p` must hold the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), WireError> {
        self.check()?;
        let h = p
            .buffer
            .as_mut()
            .get_mut(..HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        h.fill(0);
        p.store(Stored {
            frame: self.frame,
            seconds: self.seconds,
            complex: self.complex,
            invalid: self.invalid,
            station: self.station,
            representation: self.representation,
            epoch: self.epoch,
            data_len8: self.data_len / 8,
            bits_per_sample: self.bits_per_sample,
            version: self.version,
            group: self.group,
            thread: self.thread,
            nchan_m1: self.nchan - 1,
            block_len: self.block_len,
            period: self.period,
            total_samples: self.total_samples,
            sync: self.sync,
            edv: self.edv,
        });
        Ok(())
    }
}

/// The capture rules for CODIF frames: one stream per configured thread, the
/// index (seconds / period) * frames per period + frame number.
#[derive(Debug, Clone)]
pub struct Locator {
    threads: Box<[u16]>,
    frame_len: usize,
    fpp: u32,
    station: Option<u16>,
    group: Option<u16>,
}

impl Locator {
    /// Validates the values (`Error::Config` says what to change).
    pub fn new(
        threads: &[u16],
        frame_len: usize,
        frames_per_period: u32,
        station: Option<u16>,
        group: Option<u16>,
    ) -> crate::Result<Locator> {
        if threads.is_empty() {
            return Err(Error::Config(
                "CODIF format needs at least one thread id (e.g. threads = [0, 1])".into(),
            ));
        }
        for (i, &t) in threads.iter().enumerate() {
            if threads[..i].contains(&t) {
                return Err(Error::Config(format!(
                    "CODIF thread id {t} is listed twice; list each thread once"
                )));
            }
        }
        let data = frame_len.saturating_sub(HEADER_LEN);
        if data == 0 || data % 8 != 0 || data / 8 >= 1 << 24 {
            return Err(Error::Config(format!(
                "CODIF frame length {frame_len} bytes is invalid: it must be the \
                 64-byte header plus a data array of a positive multiple of 8 bytes \
                 (below 134217728)"
            )));
        }
        if frames_per_period == 0 {
            return Err(Error::Config(
                "CODIF frames per period is 0; use the number of frames each thread \
                 sends per period"
                    .into(),
            ));
        }
        Ok(Locator {
            threads: threads.into(),
            frame_len,
            fpp: frames_per_period,
            station,
            group,
        })
    }
}

impl Locate for Locator {
    fn streams(&self) -> usize {
        self.threads.len()
    }

    fn payload_len(&self) -> usize {
        self.frame_len - HEADER_LEN
    }

    fn station(&self) -> Option<u16> {
        self.station
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let p = Packet::new_checked(packet)?;
        if p.frame_len() != self.frame_len || packet.len() != self.frame_len || p.sync() != SYNC {
            return Err(WireError::Malformed);
        }
        if self.station.is_some_and(|s| s != p.station())
            || self.group.is_some_and(|g| g != p.group())
        {
            return Err(WireError::Foreign);
        }
        let stream = self
            .threads
            .iter()
            .position(|&t| t == p.thread())
            .ok_or(WireError::Foreign)?;
        if p.invalid() {
            return Err(WireError::Invalid { stream });
        }
        let period = p.period() as u32;
        if period == 0 || p.seconds() % period != 0 || p.frame() >= self.fpp {
            return Err(WireError::Malformed);
        }
        let index = (p.seconds() / period) as u64 * self.fpp as u64 + p.frame() as u64;
        let payload = packet.get(HEADER_LEN..).ok_or(WireError::Truncated)?;
        Ok(Located {
            stream,
            index,
            payload,
        })
    }
}

impl StreamKeyed for Locator {
    fn stream_key(&self) -> Option<StreamKey> {
        Some(StreamKey {
            field: field::thread,
            ids: self.threads.iter().map(|&t| t as u64).collect(),
            min_packet_len: self.frame_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_repr() -> Repr {
        Repr {
            frame: 0xfedc_ba98,
            seconds: 0x2345_6789,
            complex: true,
            invalid: false,
            epoch: 49,
            representation: 1,
            station: 0x4b41,
            version: 1,
            bits_per_sample: 16,
            data_len: 8192,
            group: 0x1234,
            thread: 0xabcd,
            nchan: 65536,
            block_len: 0x5678,
            period: 27,
            total_samples: 0x0123_4567_89ab_cdef,
            sync: SYNC,
            edv: 3,
        }
    }

    #[test]
    fn round_trip_and_known_bytes() {
        let r = sample_repr();
        let mut b = vec![0x77u8; r.frame_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        // Independent expectation: the words assembled by hand.
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        assert_eq!(w(0), (1 << 62) | (0x2345_6789u64 << 32) | 0xfedc_ba98);
        let w1 = (1u64 << 61) | (16 << 56) | (1024 << 32) | (49 << 26) | (1 << 22) | 0x4b41;
        assert_eq!(w(1), w1);
        assert_eq!(
            w(2),
            (0x5678u64 << 48) | (0xffff << 32) | (0xabcd << 16) | 0x1234
        );
        assert_eq!(w(3), 27 << 32);
        assert_eq!(w(4), 0x0123_4567_89ab_cdef);
        assert_eq!(w(5), 0xabad_deed << 32);
        assert_eq!((w(6), w(7)), (3 << 32, 0));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(r));
        assert_eq!(p.payload(), &[0x77; 8192][..]);
    }

    #[test]
    fn malformed_and_truncated() {
        let r = sample_repr();
        let mut b = vec![0u8; r.frame_len()];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        for n in [0, 63, 64, r.frame_len() - 1] {
            assert_eq!(
                Packet::new_checked(&b[..n]).err(),
                Some(WireError::Truncated)
            );
        }
        let mut empty = b.clone();
        empty[12..15].fill(0);
        assert_eq!(
            Packet::new_checked(&empty[..]).err(),
            Some(WireError::Malformed)
        );
        // Each a field that does not fit its bits, or an impossible length.
        let edits: [fn(&mut Repr); 10] = [
            |x| x.seconds = 1 << 30,
            |x| x.epoch = 64,
            |x| x.representation = 16,
            |x| x.version = 8,
            |x| x.bits_per_sample = 32,
            |x| x.data_len = 0,
            |x| x.data_len = 12,
            |x| x.data_len = 8 << 24,
            |x| x.nchan = 0,
            |x| x.nchan = 65537,
        ];
        let bad = edits.map(|edit| {
            let mut x = r;
            edit(&mut x);
            x
        });
        for x in bad {
            let mut out = [0u8; 128];
            assert_eq!(
                x.emit(&mut Packet::new_unchecked(&mut out[..])),
                Err(WireError::Malformed),
                "{x:?}"
            );
        }
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut [0u8; 63][..])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = crate::wire::testutil::XorShift(0xc0d1_f00d_5eed_0001);
        let r = Repr {
            data_len: 64,
            ..sample_repr()
        };
        let mut valid = vec![0u8; r.frame_len()];
        r.emit(&mut Packet::new_unchecked(&mut valid[..])).unwrap();
        let mut accepted = 0;
        for (_, bytes) in rng.cases(&valid, 200_000) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                accepted += 1;
                let r = Repr::parse(&p).unwrap();
                assert_eq!(p.payload().len(), r.data_len);
                let mut again = vec![0u8; r.frame_len()];
                r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
                assert_eq!(
                    Repr::parse(&Packet::new_checked(&again[..]).unwrap()),
                    Ok(r)
                );
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.nchan(), p.total_samples(), p.frame_len());
        }
        assert!(accepted > 1000);
    }
}
