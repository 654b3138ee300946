//! VDIF data frames (VDIF specification v1.0, EDV 0), as zero-copy views.
//!
//! A frame is a header of eight little-endian 32-bit words (four when the
//! legacy bit is set) followed by the data array. The header's frame length
//! counts the header too, in 8-byte units. No function here panics on any
//! input; `docs/formats.md` gives the exact bit layout and the sample mapping.
//!
//! Owns the header view ([`Packet`], [`Repr`]), the sample decoder
//! ([`decode`]) and the capture rules ([`Locator`]).

use super::field::{check_frame, fields, view, Field};
use super::{IndexKey, Locate, Located, StreamKey, StreamKeyed, WireError};
use crate::Error;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Bytes in a standard header.
pub const HEADER_LEN: usize = 32;
/// Bytes in a legacy header.
pub const LEGACY_HEADER_LEN: usize = 16;
/// The four 2-bit levels of the standard VDIF offset-binary mapping, indexed
/// by the 2-bit code (00, 01, 10, 11).
pub const LEVELS_2BIT: [f32; 4] = [-3.3359, -1.0, 1.0, 3.3359];
/// Largest thread id the 10-bit field can hold, plus one.
pub const MAX_THREADS: usize = 1024;

/// Bits `lo..lo + width` of little-endian 32-bit word `w`.
const fn bits(w: usize, lo: u8, width: u8) -> Field {
    Field::le(4 * w, 4).part(lo, width)
}

/// Only standard headers have word 4: written apart from [`Stored`], so
/// that emitting a legacy header leaves the data array alone.
const EDV: Field = bits(4, 24, 8);

view! {
    /// A read/write view of one VDIF frame held in `T`.
    checked by check_len
}

fields! {
    pub invalid: bool bits(0, 31, 1),
    pub legacy: bool bits(0, 30, 1),
    /// Seconds since the reference epoch.
    pub seconds: u32 bits(0, 0, 30),
    /// Reference epoch in half-years since 2000-01-01.
    pub ref_epoch: u8 bits(1, 24, 6),
    /// Frame number within the second.
    pub frame: u32 bits(1, 0, 24),
    pub version: u8 bits(2, 29, 3),
    pub log2_nchan: u8 bits(2, 24, 5),
    frame_len8: usize bits(2, 0, 24),
    pub complex: bool bits(3, 31, 1),
    bits_m1: u8 bits(3, 26, 5),
    /// Also where capture steering finds the stream (see [`Locator`]).
    pub thread: u16 bits(3, 16, 10),
    pub station: u16 bits(3, 0, 16),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The checks of [`Self::new_checked`]: the header must be complete, its
    /// frame length at least the header and no longer than the buffer. Extra
    /// bytes after the frame are allowed (a file holds many frames); see
    /// [`Self::frame_len`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_frame(
            self.buffer.as_ref().len(),
            self.header_len(),
            self.frame_len(),
        )
    }

    /// Channels per sample; saturates for the (nonsensical) log2 values >= 32.
    pub fn nchan(&self) -> u32 {
        1u32.checked_shl(self.log2_nchan() as u32)
            .unwrap_or(u32::MAX)
    }
    /// Frame length in bytes, header included.
    pub fn frame_len(&self) -> usize {
        self.frame_len8() * 8
    }
    /// Bits per sample (per real or imaginary part), 1..=32.
    pub fn bits_per_sample(&self) -> u8 {
        self.bits_m1() + 1
    }
    /// Extended data version; 0 for legacy headers, which have no word 4.
    pub fn edv(&self) -> u8 {
        if self.legacy() {
            0
        } else {
            EDV.get(self.buffer.as_ref()) as u8
        }
    }
    pub fn header_len(&self) -> usize {
        header_len(self.legacy())
    }
    /// The data array; empty if the view is shorter than its frame length.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(self.header_len()..self.frame_len())
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The data array, writable; empty if the view is too short.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, f) = (self.header_len(), self.frame_len());
        self.buffer.as_mut().get_mut(h..f).unwrap_or(&mut [])
    }
}

/// Bytes before the data array of a standard or legacy frame.
pub const fn header_len(legacy: bool) -> usize {
    if legacy {
        LEGACY_HEADER_LEN
    } else {
        HEADER_LEN
    }
}

/// A parsed VDIF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub invalid: bool,
    pub legacy: bool,
    pub seconds: u32,
    pub ref_epoch: u8,
    pub frame: u32,
    pub version: u8,
    pub log2_nchan: u8,
    /// Frame length in bytes, header included; a multiple of 8.
    pub frame_len: usize,
    pub complex: bool,
    pub bits_per_sample: u8,
    pub thread: u16,
    pub station: u16,
    /// Only EDV 0 is interpreted; other values are carried, their extended
    /// user data (words 4..8 after the EDV byte) is neither read nor kept.
    pub edv: u8,
}

impl Repr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check_len()?;
        Ok(Repr {
            invalid: p.invalid(),
            legacy: p.legacy(),
            seconds: p.seconds(),
            ref_epoch: p.ref_epoch(),
            frame: p.frame(),
            version: p.version(),
            log2_nchan: p.log2_nchan(),
            frame_len: p.frame_len(),
            complex: p.complex(),
            bits_per_sample: p.bits_per_sample(),
            thread: p.thread(),
            station: p.station(),
            edv: p.edv(),
        })
    }

    pub fn header_len(&self) -> usize {
        header_len(self.legacy)
    }

    /// Checks that every field fits its bit width and the frame length is a
    /// whole number of 8-byte units longer than the header.
    pub fn check(&self) -> Result<(), WireError> {
        let ok = self.seconds < 1 << 30
            && self.ref_epoch < 64
            && self.frame < 1 << 24
            && self.version < 8
            && self.log2_nchan < 32
            && self.frame_len % 8 == 0
            && self.frame_len > self.header_len()
            && self.frame_len / 8 < 1 << 24
            && (1..=32).contains(&self.bits_per_sample)
            && (self.thread as usize) < MAX_THREADS;
        ok.then_some(()).ok_or(WireError::Malformed)
    }

    /// Writes the header into `p`, whose buffer must hold at least the header.
    /// The data array is left alone. Fails if a field does not fit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), WireError> {
        self.check()?;
        p.buffer
            .as_mut()
            .get_mut(..self.header_len())
            .ok_or(WireError::Truncated)?
            .fill(0);
        p.store(Stored {
            invalid: self.invalid,
            legacy: self.legacy,
            seconds: self.seconds,
            ref_epoch: self.ref_epoch,
            frame: self.frame,
            version: self.version,
            log2_nchan: self.log2_nchan,
            frame_len8: self.frame_len / 8,
            complex: self.complex,
            bits_m1: self.bits_per_sample - 1,
            thread: self.thread,
            station: self.station,
        });
        if !self.legacy {
            EDV.set(p.buffer.as_mut(), self.edv as u64);
        }
        Ok(())
    }
}

/// Number of real values (parts) a data array of `payload_len` bytes holds
/// at `bits` bits per part, if the width is one we decode (2 or 8).
pub fn parts_in(payload_len: usize, bits: u8) -> Option<usize> {
    match bits {
        2 => Some(payload_len * 4),
        8 => Some(payload_len),
        _ => None,
    }
}

/// Decodes a data array into real values, in stored order (time, channel,
/// and for complex data re then im). 8-bit parts map to `code - 128`, 2-bit
/// parts to [`LEVELS_2BIT`], lowest bits first. Returns the number written;
/// `Malformed` for widths other than 2 and 8, `Truncated` if `out` is short.
/// Allocation-free.
pub fn decode(payload: &[u8], bits: u8, out: &mut [f32]) -> Result<usize, WireError> {
    let n = parts_in(payload.len(), bits).ok_or(WireError::Malformed)?;
    let out = out.get_mut(..n).ok_or(WireError::Truncated)?;
    match bits {
        8 => {
            for (o, &b) in out.iter_mut().zip(payload) {
                *o = b as f32 - 128.0;
            }
        }
        _ => {
            for (o4, &b) in out.chunks_exact_mut(4).zip(payload) {
                for (k, o) in o4.iter_mut().enumerate() {
                    *o = LEVELS_2BIT[((b >> (2 * k)) & 3) as usize];
                }
            }
        }
    }
    Ok(n)
}

/// `Locator::table` entry of a thread that is not one of ours.
const NO_STREAM: u16 = u16::MAX;
/// `Locator::learned` before any frame fixed the station (station ids are 16 bits).
const NO_STATION: u32 = u32::MAX;

/// The capture rules for VDIF frames: one stream per configured thread, the
/// index seconds * frames per second + frame number, one station.
#[derive(Debug, Clone)]
pub struct Locator {
    /// Stream of each thread id ([`NO_STREAM`] where not ours): one lookup
    /// per frame, whatever the number of threads.
    table: Box<[u16]>,
    streams: usize,
    frame_len: usize,
    fps: u32,
    /// The station given; with none, the first valid frame of a configured
    /// thread fixes it in `learned` (shared by the clones of this locator),
    /// and frames of any other station are foreign from then on.
    station: Option<u16>,
    learned: Arc<AtomicU32>,
    legacy: bool,
}

impl Locator {
    /// Validates the values (`Error::Config` says what to change) and builds
    /// the thread table, the one allocation.
    pub fn new(
        threads: &[u16],
        frame_len: usize,
        frames_per_second: u32,
        station: Option<u16>,
        legacy: bool,
    ) -> crate::Result<Locator> {
        let header = header_len(legacy);
        if threads.is_empty() {
            return Err(Error::Config(
                "VDIF format needs at least one thread id (e.g. threads = [0, 1])".into(),
            ));
        }
        for (i, &t) in threads.iter().enumerate() {
            if t as usize >= MAX_THREADS {
                return Err(Error::Config(format!(
                    "VDIF thread id {t} does not fit the 10-bit field; use 0..=1023"
                )));
            }
            if threads[..i].contains(&t) {
                return Err(Error::Config(format!(
                    "VDIF thread id {t} is listed twice; list each thread once"
                )));
            }
        }
        if frame_len <= header || frame_len % 8 != 0 || frame_len / 8 >= 1 << 24 {
            return Err(Error::Config(format!(
                "VDIF frame length {frame_len} bytes is invalid: it must include the \
                 {header}-byte header, be a multiple of 8 and below 134217728"
            )));
        }
        if frames_per_second == 0 || frames_per_second >= 1 << 24 {
            return Err(Error::Config(format!(
                "VDIF frames per second {frames_per_second} is invalid: use 1..=16777215"
            )));
        }
        let mut table = vec![NO_STREAM; MAX_THREADS].into_boxed_slice();
        for (i, &t) in threads.iter().enumerate() {
            table[t as usize] = i as u16;
        }
        Ok(Locator {
            table,
            streams: threads.len(),
            frame_len,
            fps: frames_per_second,
            station,
            learned: Arc::new(AtomicU32::new(NO_STATION)),
            legacy,
        })
    }

    fn learned_station(&self) -> Option<u16> {
        let v = self.learned.load(Ordering::Relaxed);
        (v != NO_STATION).then_some(v as u16)
    }
}

impl Locate for Locator {
    fn streams(&self) -> usize {
        self.streams
    }

    fn payload_len(&self) -> usize {
        self.frame_len - header_len(self.legacy)
    }

    fn station(&self) -> Option<u16> {
        self.station.or_else(|| self.learned_station())
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let p = Packet::new_checked(packet)?;
        // A header of the other kind would shift the payload: not this layout.
        if p.legacy() != self.legacy
            || p.frame_len() != self.frame_len
            || packet.len() != self.frame_len
        {
            return Err(WireError::Malformed);
        }
        let want = self.station();
        if want.is_some_and(|s| s != p.station()) {
            return Err(WireError::Foreign);
        }
        let stream = match self.table.get(p.thread() as usize) {
            Some(&s) if s != NO_STREAM => s as usize,
            _ => return Err(WireError::Foreign),
        };
        if p.invalid() {
            return Err(WireError::Invalid { stream });
        }
        if p.frame() >= self.fps {
            return Err(WireError::Malformed);
        }
        if want.is_none() {
            // The first valid frame of ours fixes the station; a frame of
            // another station that raced it here is foreign.
            let this = p.station() as u32;
            if let Err(won) = self.learned.compare_exchange(
                NO_STATION,
                this,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                if won != this {
                    return Err(WireError::Foreign);
                }
            }
        }
        Ok(Located {
            stream,
            index: p.seconds() as u64 * self.fps as u64 + p.frame() as u64,
            payload: packet
                .get(header_len(self.legacy)..)
                .ok_or(WireError::Truncated)?,
        })
    }
}

impl StreamKeyed for Locator {
    fn stream_key(&self) -> Option<StreamKey> {
        let mut ids = vec![0u64; self.streams];
        for (thread, &s) in self.table.iter().enumerate() {
            if let Some(id) = ids.get_mut(s as usize) {
                *id = thread as u64;
            }
        }
        Some(StreamKey {
            field: field::thread,
            ids,
            min_packet_len: self.frame_len,
        })
    }

    fn index_key(&self) -> Option<IndexKey> {
        Some(IndexKey::SecondsFrames {
            seconds: field::seconds,
            frame: field::frame,
            per_second: self.fps,
        })
    }

    fn min_packet_len(&self) -> usize {
        self.frame_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_repr() -> Repr {
        Repr {
            invalid: false,
            legacy: false,
            seconds: 0x2abc_def1 & ((1 << 30) - 1),
            ref_epoch: 47,
            frame: 0x00ab_cdef,
            version: 1,
            log2_nchan: 5,
            frame_len: 8032,
            complex: true,
            bits_per_sample: 8,
            thread: 0x2a5,
            station: 0xbeef,
            edv: 0,
        }
    }

    #[test]
    fn round_trip_standard_and_legacy() {
        for legacy in [false, true] {
            let mut r = sample_repr();
            r.legacy = legacy;
            r.invalid = legacy;
            let mut buf = vec![0xa5u8; r.frame_len];
            let mut p = Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut p).unwrap();
            let p = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(Repr::parse(&p).unwrap(), r);
            assert_eq!(p.header_len(), if legacy { 16 } else { 32 });
            assert_eq!(p.payload().len(), r.frame_len - p.header_len());
            assert_eq!(p.nchan(), 32);
        }
    }

    #[test]
    fn known_bytes() {
        // Independent expectation: words assembled by hand from the spec.
        let mut buf = [0u8; 40];
        let w0: u32 = (1 << 30) | 12345; // legacy=1, seconds
        let w1: u32 = (3 << 24) | 77;
        let w2: u32 = (1 << 29) | (2 << 24) | 5; // version 1, 4 chans, 40 bytes
        let w3: u32 = (1 << 31) | (1 << 26) | (9 << 16) | 4242; // complex, 2-bit
        for (i, w) in [w0, w1, w2, w3].iter().enumerate() {
            buf[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        let p = Packet::new_checked(&buf[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert!(r.legacy && !r.invalid && r.complex);
        assert_eq!((r.seconds, r.ref_epoch, r.frame), (12345, 3, 77));
        assert_eq!((r.version, r.log2_nchan, r.frame_len), (1, 2, 40));
        assert_eq!((r.bits_per_sample, r.thread, r.station), (2, 9, 4242));
        assert_eq!(p.payload().len(), 24);
    }

    #[test]
    fn malformed_and_truncated() {
        let r = sample_repr();
        let mut buf = vec![7u8; r.frame_len];
        r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        let short = |n: usize| Packet::new_checked(&buf[..n]).err();
        assert_eq!(short(0), Some(WireError::Truncated));
        assert_eq!(short(15), Some(WireError::Truncated));
        assert_eq!(short(31), Some(WireError::Truncated));
        assert_eq!(short(r.frame_len - 1), Some(WireError::Truncated));
        // Frame length 0 and equal to the header are impossible frames.
        for len8 in [0u32, 4] {
            let mut b = buf.clone();
            field::frame_len8.set(&mut b, len8 as u64);
            assert_eq!(
                Packet::new_checked(&b[..]).err(),
                Some(WireError::Malformed)
            );
        }
        // Fields that do not fit their width are refused on emit.
        let bad = [
            Repr {
                seconds: 1 << 30,
                ..r
            },
            Repr { ref_epoch: 64, ..r },
            Repr {
                frame: 1 << 24,
                ..r
            },
            Repr { version: 8, ..r },
            Repr {
                log2_nchan: 32,
                ..r
            },
            Repr {
                frame_len: 8033,
                ..r
            },
            Repr { frame_len: 32, ..r },
            Repr {
                frame_len: 8 << 24,
                ..r
            },
            Repr {
                bits_per_sample: 0,
                ..r
            },
            Repr {
                bits_per_sample: 33,
                ..r
            },
            Repr { thread: 1024, ..r },
        ];
        for b in bad {
            let mut out = [0u8; 64];
            let e = b.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(e, Err(WireError::Malformed), "{b:?}");
        }
        let mut tiny = [0u8; 20];
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut tiny[..])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn decode_levels() {
        let payload = [0b11_10_01_00u8, 0, 255, 128];
        let mut out = [0f32; 16];
        assert_eq!(decode(&payload, 2, &mut out), Ok(16));
        assert_eq!(&out[..4], &[-3.3359, -1.0, 1.0, 3.3359]);
        assert_eq!(&out[4..8], &[-3.3359; 4]);
        assert_eq!(&out[8..12], &[3.3359; 4]);
        assert_eq!(&out[12..16], &[-3.3359, -3.3359, -3.3359, 1.0]);
        assert_eq!(decode(&payload, 8, &mut out), Ok(4));
        assert_eq!(&out[..4], &[100.0, -128.0, 127.0, 0.0]);
        assert_eq!(decode(&payload, 4, &mut out), Err(WireError::Malformed));
        assert_eq!(
            decode(&payload, 2, &mut out[..15]),
            Err(WireError::Truncated)
        );
    }

    /// The no-panic property on stable: random and mutated-valid bytes
    /// through every entry point.
    #[test]
    fn no_panic_on_random_input() {
        let mut rng = crate::wire::testutil::XorShift(0x9e37_79b9_7f4a_7c15);
        let r = sample_repr();
        let mut valid = vec![0u8; 96];
        Repr { frame_len: 96, ..r }
            .emit(&mut Packet::new_unchecked(&mut valid[..]))
            .unwrap();
        let mut out = [0f32; 512];
        let mut accepted = 0;
        for (_, bytes) in rng.cases(&valid, 200_000) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                accepted += 1;
                let r = Repr::parse(&p).unwrap();
                assert!(p.payload().len() + p.header_len() == r.frame_len);
                let mut again = vec![0u8; r.frame_len];
                // Parsed fields always fit: emit must accept them.
                r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
                let _ = decode(p.payload(), r.bits_per_sample, &mut out);
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.nchan(), p.edv(), p.frame_len());
        }
        assert!(accepted > 1000, "mutations should keep many frames valid");
    }
}
