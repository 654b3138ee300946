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

use super::WireError;

/// Bytes in the header.
pub const HEADER_LEN: usize = 64;
/// The sync word the reference implementation writes into word 5.
pub const SYNC: u32 = 0xABAD_DEED;

mod field {
    // Each entry: (64-bit word index, lowest bit, width in bits).
    pub type Bits = (usize, u32, u32);
    pub const FRAME: Bits = (0, 0, 32);
    pub const SECONDS: Bits = (0, 32, 30);
    pub const COMPLEX: Bits = (0, 62, 1);
    pub const INVALID: Bits = (0, 63, 1);
    pub const STATION: Bits = (1, 0, 16);
    pub const REPRESENTATION: Bits = (1, 22, 4);
    pub const EPOCH: Bits = (1, 26, 6);
    pub const DATA_LEN8: Bits = (1, 32, 24);
    pub const BITS: Bits = (1, 56, 5);
    pub const VERSION: Bits = (1, 61, 3);
    pub const GROUP: Bits = (2, 0, 16);
    pub const THREAD: Bits = (2, 16, 16);
    pub const NCHAN_M1: Bits = (2, 32, 16);
    pub const BLOCK_LEN: Bits = (2, 48, 16);
    pub const PERIOD: Bits = (3, 32, 16);
    pub const TOTAL_SAMPLES: Bits = (4, 0, 64);
    pub const SYNC: Bits = (5, 32, 32);
    pub const EDV: Bits = (6, 32, 8);
}

/// A read/write view of one CODIF frame held in `T`.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checks; accessors read zeros where it is short.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps untrusted bytes: the 64-byte header, a non-empty data array,
    /// and the buffer at least header plus data array (`Truncated` if not).
    /// Extra bytes after the frame are allowed (a file holds many frames).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.data_len() == 0 {
            return Err(WireError::Malformed);
        }
        if len < self.frame_len() {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word(&self, i: usize) -> u64 {
        match self.buffer.as_ref().get(8 * i..8 * i + 8) {
            Some(w) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                u64::from_le_bytes(b)
            }
            None => 0,
        }
    }

    fn get(&self, (w, lo, width): field::Bits) -> u64 {
        (self.word(w) >> lo) & (u64::MAX >> (64 - width))
    }

    /// Frame number within the current period.
    pub fn frame(&self) -> u32 {
        self.get(field::FRAME) as u32
    }
    /// Seconds since the reference epoch (a multiple of `period` at frame 0).
    pub fn seconds(&self) -> u32 {
        self.get(field::SECONDS) as u32
    }
    pub fn complex(&self) -> bool {
        self.get(field::COMPLEX) != 0
    }
    pub fn invalid(&self) -> bool {
        self.get(field::INVALID) != 0
    }
    pub fn station(&self) -> u16 {
        self.get(field::STATION) as u16
    }
    /// Sample representation code (0: offset binary in the reference code).
    pub fn representation(&self) -> u8 {
        self.get(field::REPRESENTATION) as u8
    }
    /// Reference epoch in half-years since 2000-01-01.
    pub fn epoch(&self) -> u8 {
        self.get(field::EPOCH) as u8
    }
    /// Data array bytes, header excluded.
    pub fn data_len(&self) -> usize {
        self.get(field::DATA_LEN8) as usize * 8
    }
    /// Whole frame: header plus data array.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.data_len()
    }
    /// Bits per sample (per real or imaginary part), as stored.
    pub fn bits_per_sample(&self) -> u8 {
        self.get(field::BITS) as u8
    }
    pub fn version(&self) -> u8 {
        self.get(field::VERSION) as u8
    }
    pub fn group(&self) -> u16 {
        self.get(field::GROUP) as u16
    }
    pub fn thread(&self) -> u16 {
        self.get(field::THREAD) as u16
    }
    /// Channels, 1..=65536 (stored minus one).
    pub fn nchan(&self) -> u32 {
        self.get(field::NCHAN_M1) as u32 + 1
    }
    /// Sample block length, as stored.
    pub fn block_len(&self) -> u16 {
        self.get(field::BLOCK_LEN) as u16
    }
    /// Seconds after which the frame number restarts.
    pub fn period(&self) -> u16 {
        self.get(field::PERIOD) as u16
    }
    /// Samples per channel in one period.
    pub fn total_samples(&self) -> u64 {
        self.get(field::TOTAL_SAMPLES)
    }
    pub fn sync(&self) -> u32 {
        self.get(field::SYNC) as u32
    }
    /// Extended data version; 0 = no extended data.
    pub fn edv(&self) -> u8 {
        self.get(field::EDV) as u8
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
    fn set(&mut self, (w, lo, width): field::Bits, v: u64) {
        let mask = (u64::MAX >> (64 - width)) << lo;
        let new = (self.word(w) & !mask) | ((v << lo) & mask);
        if let Some(s) = self.buffer.as_mut().get_mut(8 * w..8 * w + 8) {
            s.copy_from_slice(&new.to_le_bytes());
        }
    }

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

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, WireError> {
        p.check_len()?;
        Ok(Repr {
            invalid: p.invalid(),
            complex: p.complex(),
            seconds: p.seconds(),
            frame: p.frame(),
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
        if ok {
            Ok(())
        } else {
            Err(WireError::Malformed)
        }
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
        p.set(field::FRAME, self.frame as u64);
        p.set(field::SECONDS, self.seconds as u64);
        p.set(field::COMPLEX, self.complex as u64);
        p.set(field::INVALID, self.invalid as u64);
        p.set(field::STATION, self.station as u64);
        p.set(field::REPRESENTATION, self.representation as u64);
        p.set(field::EPOCH, self.epoch as u64);
        p.set(field::DATA_LEN8, (self.data_len / 8) as u64);
        p.set(field::BITS, self.bits_per_sample as u64);
        p.set(field::VERSION, self.version as u64);
        p.set(field::GROUP, self.group as u64);
        p.set(field::THREAD, self.thread as u64);
        p.set(field::NCHAN_M1, (self.nchan - 1) as u64);
        p.set(field::BLOCK_LEN, self.block_len as u64);
        p.set(field::PERIOD, self.period as u64);
        p.set(field::TOTAL_SAMPLES, self.total_samples);
        p.set(field::SYNC, self.sync as u64);
        p.set(field::EDV, self.edv as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_repr() -> Repr {
        Repr {
            invalid: false,
            complex: true,
            seconds: 0x2345_6789,
            frame: 0xfedc_ba98,
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
        let bad = [
            Repr {
                seconds: 1 << 30,
                ..r
            },
            Repr { epoch: 64, ..r },
            Repr {
                representation: 16,
                ..r
            },
            Repr { version: 8, ..r },
            Repr {
                bits_per_sample: 32,
                ..r
            },
            Repr { data_len: 0, ..r },
            Repr { data_len: 12, ..r },
            Repr {
                data_len: 8 << 24,
                ..r
            },
            Repr { nchan: 0, ..r },
            Repr { nchan: 65537, ..r },
        ];
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
        let mut bytes = Vec::new();
        for i in 0..200_000 {
            rng.fill_like(&mut bytes, &valid, i);
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
