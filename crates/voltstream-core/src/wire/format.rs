//! Which packet format a capture expects, and the [`Locate`] it builds.
//!
//! [`FormatSpec`] is the user-facing description (validated once, with
//! messages that say what to change); [`FormatSpec::locator`] turns it into a
//! [`Locator`], the allocation-free per-packet classifier the assembler calls.

use super::{roach2, vdif, Locate, Located, WireError};
use crate::{Error, Result};

/// A capture's packet format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatSpec {
    /// VDIF frames with standard 32-byte headers. One stream per thread id,
    /// numbered by position in `threads`.
    Vdif {
        threads: Vec<u16>,
        /// Whole frame in bytes, header included (the UDP payload length).
        frame_len: usize,
        /// Frames per second per thread: the index is seconds * this + frame.
        frames_per_second: u32,
        /// Accept only this station id; `None` accepts any.
        station: Option<u16>,
    },
    /// YNAO frames (8216 bytes); one stream.
    Ynao {
        /// Accept only this subband id; `None` accepts any.
        subband: Option<u8>,
    },
}

impl FormatSpec {
    /// Checks the values, saying what is wrong and what to use instead.
    pub fn validate(&self) -> Result<()> {
        match self {
            FormatSpec::Ynao { .. } => Ok(()),
            FormatSpec::Vdif {
                threads,
                frame_len,
                frames_per_second,
                ..
            } => {
                if threads.is_empty() {
                    return Err(Error::Config(
                        "VDIF format needs at least one thread id (e.g. threads = [0, 1])".into(),
                    ));
                }
                for (i, &t) in threads.iter().enumerate() {
                    if t as usize >= vdif::MAX_THREADS {
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
                if *frame_len <= vdif::HEADER_LEN || frame_len % 8 != 0 || frame_len / 8 >= 1 << 24
                {
                    return Err(Error::Config(format!(
                        "VDIF frame length {frame_len} bytes is invalid: it must include the \
                         32-byte header, be a multiple of 8 and below 134217728"
                    )));
                }
                if *frames_per_second == 0 || *frames_per_second >= 1 << 24 {
                    return Err(Error::Config(format!(
                        "VDIF frames per second {frames_per_second} is invalid: use 1..=16777215"
                    )));
                }
                Ok(())
            }
        }
    }

    /// Number of streams a capture with this format has.
    pub fn streams(&self) -> usize {
        match self {
            FormatSpec::Vdif { threads, .. } => threads.len(),
            FormatSpec::Ynao { .. } => 1,
        }
    }

    /// UDP payload bytes of one packet.
    pub fn packet_len(&self) -> usize {
        match self {
            FormatSpec::Vdif { frame_len, .. } => *frame_len,
            FormatSpec::Ynao { .. } => roach2::FRAME_LEN,
        }
    }

    /// Sample bytes per packet (the packet minus its header).
    pub fn payload_len(&self) -> usize {
        match self {
            FormatSpec::Vdif { frame_len, .. } => frame_len.saturating_sub(vdif::HEADER_LEN),
            FormatSpec::Ynao { .. } => roach2::DATA_LEN,
        }
    }

    /// Validates and builds the per-packet classifier. Allocates once (a
    /// thread-id table); `locate` itself never allocates.
    pub fn locator(&self) -> Result<Locator> {
        self.validate()?;
        let kind = match self {
            FormatSpec::Vdif {
                threads,
                frame_len,
                frames_per_second,
                station,
            } => {
                let mut table = vec![NO_STREAM; vdif::MAX_THREADS].into_boxed_slice();
                for (i, &t) in threads.iter().enumerate() {
                    table[t as usize] = i as u16;
                }
                Kind::Vdif {
                    table,
                    streams: threads.len(),
                    frame_len: *frame_len,
                    fps: *frames_per_second,
                    station: *station,
                }
            }
            FormatSpec::Ynao { subband } => Kind::Ynao { subband: *subband },
        };
        Ok(Locator { kind })
    }
}

const NO_STREAM: u16 = u16::MAX;

/// The [`Locate`] implementation for a validated [`FormatSpec`].
#[derive(Debug, Clone)]
pub struct Locator {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Vdif {
        table: Box<[u16]>,
        streams: usize,
        frame_len: usize,
        fps: u32,
        station: Option<u16>,
    },
    Ynao {
        subband: Option<u8>,
    },
}

impl Locate for Locator {
    fn streams(&self) -> usize {
        match &self.kind {
            Kind::Vdif { streams, .. } => *streams,
            Kind::Ynao { .. } => 1,
        }
    }

    fn payload_len(&self) -> usize {
        match &self.kind {
            Kind::Vdif { frame_len, .. } => frame_len - vdif::HEADER_LEN,
            Kind::Ynao { .. } => roach2::DATA_LEN,
        }
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> core::result::Result<Located<'a>, WireError> {
        match &self.kind {
            Kind::Vdif {
                table,
                frame_len,
                fps,
                station,
                ..
            } => {
                let p = vdif::Packet::new_checked(packet)?;
                // A legacy header would shift the payload: not this capture's layout.
                if p.legacy() || p.invalid() || p.frame_len() != *frame_len {
                    return Err(WireError::Malformed);
                }
                if packet.len() != *frame_len {
                    return Err(WireError::Malformed);
                }
                if p.frame() >= *fps {
                    return Err(WireError::Malformed);
                }
                if station.is_some_and(|s| s != p.station()) {
                    return Err(WireError::Foreign);
                }
                let stream = match table.get(p.thread() as usize) {
                    Some(&s) if s != NO_STREAM => s as usize,
                    _ => return Err(WireError::Foreign),
                };
                let index = p.seconds() as u64 * *fps as u64 + p.frame() as u64;
                let payload = packet.get(vdif::HEADER_LEN..).ok_or(WireError::Truncated)?;
                Ok(Located {
                    stream,
                    index,
                    payload,
                })
            }
            Kind::Ynao { subband } => {
                let p = roach2::Packet::new_checked(packet)?;
                if packet.len() != roach2::FRAME_LEN {
                    return Err(WireError::Malformed);
                }
                if subband.is_some_and(|s| s != p.subband()) {
                    return Err(WireError::Foreign);
                }
                Ok(Located {
                    stream: 0,
                    index: p.sequence(),
                    payload: packet
                        .get(roach2::HEADER_LEN..)
                        .ok_or(WireError::Truncated)?,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vdif_spec() -> FormatSpec {
        FormatSpec::Vdif {
            threads: vec![5, 2],
            frame_len: 1056,
            frames_per_second: 1000,
            station: Some(0x4142),
        }
    }

    fn vdif_frame(thread: u16, seconds: u32, frame: u32) -> Vec<u8> {
        let r = vdif::Repr {
            invalid: false,
            legacy: false,
            seconds,
            ref_epoch: 48,
            frame,
            version: 1,
            log2_nchan: 3,
            frame_len: 1056,
            complex: true,
            bits_per_sample: 8,
            thread,
            station: 0x4142,
            edv: 0,
        };
        let mut b = vec![0u8; 1056];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        r.emit(&mut vdif::Packet::new_unchecked(&mut b[..]))
            .unwrap();
        b
    }

    #[test]
    fn vdif_locate() {
        let l = vdif_spec().locator().unwrap();
        assert_eq!((l.streams(), l.payload_len()), (2, 1024));
        let f = vdif_frame(2, 7, 999);
        let loc = l.locate(&f).unwrap();
        assert_eq!((loc.stream, loc.index), (1, 7 * 1000 + 999));
        assert_eq!(loc.payload, &f[32..]);
        assert_eq!(l.locate(&vdif_frame(5, 0, 3)).unwrap().stream, 0);
        assert_eq!(l.locate(&vdif_frame(3, 0, 3)), Err(WireError::Foreign));
        assert_eq!(l.locate(&vdif_frame(2, 0, 1000)), Err(WireError::Malformed));
        assert_eq!(l.locate(&f[..1055]), Err(WireError::Truncated));
        let mut long = f.clone();
        long.push(0);
        assert_eq!(l.locate(&long), Err(WireError::Malformed));
        let mut inv = f.clone();
        inv[3] |= 0x80;
        assert_eq!(l.locate(&inv), Err(WireError::Malformed));
        let mut stn = f.clone();
        stn[12] ^= 1;
        assert_eq!(l.locate(&stn), Err(WireError::Foreign));
        let mut legacy = f.clone();
        legacy[3] |= 0x40;
        assert_eq!(l.locate(&legacy), Err(WireError::Malformed));
    }

    #[test]
    fn ynao_locate() {
        let mut b = vec![9u8; roach2::FRAME_LEN];
        let r = roach2::Repr {
            sequence: 1 << 40,
            mjd: 60000,
            second: 5,
            nanosecond: 16_000,
            subband: 3,
        };
        r.emit(&mut roach2::Packet::new_unchecked(&mut b[..]))
            .unwrap();
        let any = FormatSpec::Ynao { subband: None }.locator().unwrap();
        let loc = any.locate(&b).unwrap();
        assert_eq!(
            (loc.stream, loc.index, loc.payload.len()),
            (0, 1 << 40, 8192)
        );
        let three = FormatSpec::Ynao { subband: Some(3) }.locator().unwrap();
        assert!(three.locate(&b).is_ok());
        let four = FormatSpec::Ynao { subband: Some(4) }.locator().unwrap();
        assert_eq!(four.locate(&b), Err(WireError::Foreign));
        assert_eq!(any.locate(&b[..8000]), Err(WireError::Truncated));
        b.push(0);
        assert_eq!(any.locate(&b), Err(WireError::Malformed));
    }

    #[test]
    fn validation_messages() {
        let bad = [
            FormatSpec::Vdif {
                threads: vec![],
                frame_len: 1056,
                frames_per_second: 1,
                station: None,
            },
            FormatSpec::Vdif {
                threads: vec![1024],
                frame_len: 1056,
                frames_per_second: 1,
                station: None,
            },
            FormatSpec::Vdif {
                threads: vec![1, 1],
                frame_len: 1056,
                frames_per_second: 1,
                station: None,
            },
            FormatSpec::Vdif {
                threads: vec![0],
                frame_len: 1057,
                frames_per_second: 1,
                station: None,
            },
            FormatSpec::Vdif {
                threads: vec![0],
                frame_len: 32,
                frames_per_second: 1,
                station: None,
            },
            FormatSpec::Vdif {
                threads: vec![0],
                frame_len: 1056,
                frames_per_second: 0,
                station: None,
            },
        ];
        for s in bad {
            assert!(matches!(s.locator(), Err(Error::Config(_))), "{s:?}");
        }
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = super::super::testutil::XorShift(0xdead_beef_cafe_f00d);
        let valid = vdif_frame(5, 3, 10);
        let l = vdif_spec().locator().unwrap();
        let y = FormatSpec::Ynao { subband: Some(1) }.locator().unwrap();
        let mut bytes = Vec::new();
        for i in 0..50_000 {
            rng.fill_like(&mut bytes, &valid, i);
            if let Ok(loc) = l.locate(&bytes) {
                assert_eq!(loc.payload.len(), l.payload_len());
                assert!(loc.stream < 2);
            }
            let _ = y.locate(&bytes);
        }
    }
}
