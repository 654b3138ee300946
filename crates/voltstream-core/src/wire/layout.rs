//! Declarative packet formats: a new FPGA design described by a table in the
//! config instead of code.
//!
//! A [`Layout`] says where the packet index (a sequence counter or a time
//! stamp) and the stream id are, which constant fields (magic numbers,
//! versions) must hold which values, and where the payload is. Each field is
//! an unsigned integer of 1 to 8 bytes at a byte offset, big- or
//! little-endian, optionally narrowed to a bit range. Validated once with
//! messages that say what to change; [`Layout::locate`] then reads a few
//! integers per packet, allocation-free. No function here panics on any input.

use super::{Locate, Located, StreamKey, StreamKeyed, WireError};
use crate::{Error, Result};

pub use super::field::{Endian, Field};

/// Layout-only: a table's fields come from the user, so they are checked once
/// with messages (the built-in formats' fields are constants).
impl Field {
    fn validate(&self, what: &str, packet_len: usize) -> Result<()> {
        if !(1..=8).contains(&self.bytes) {
            return Err(Error::Config(format!(
                "layout field '{what}' is {} bytes wide; use 1 to 8 bytes",
                self.bytes
            )));
        }
        if self.end() > packet_len {
            return Err(Error::Config(format!(
                "layout field '{what}' (bytes {}..{}) runs past the {packet_len}-byte packet; \
                 fix its offset or the packet length",
                self.offset,
                self.end()
            )));
        }
        let total = self.bytes as u32 * 8;
        if self.shift as u32 >= total || self.shift as u32 + self.width() > total {
            return Err(Error::Config(format!(
                "layout field '{what}': shift {} and bits {} do not fit in {} bits",
                self.shift, self.bits, total
            )));
        }
        Ok(())
    }
}

/// A field that must hold one value, such as a magic number or version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub field: Field,
    pub value: u64,
    /// A mismatch counts as foreign (another format or sender sharing the
    /// port) instead of malformed (a damaged packet of ours).
    pub foreign: bool,
}

/// A declarative packet format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Exact UDP payload length: longer is malformed, shorter truncated.
    pub packet_len: usize,
    /// The sequence counter or time stamp.
    pub index: Field,
    /// index = field value / `index_step` (e.g. a time stamp in samples
    /// divided by samples per packet); a value that is not a multiple is
    /// malformed. 1 for a plain counter.
    pub index_step: u64,
    /// Where the stream id is; `None` for a single-stream format.
    pub stream: Option<Field>,
    /// Stream ids in stream order: stream n is the packet whose id is
    /// `stream_ids[n]`; any other id is foreign. Empty iff `stream` is `None`.
    pub stream_ids: Vec<u64>,
    pub checks: Vec<Check>,
    pub payload_offset: usize,
    pub payload_len: usize,
}

impl Layout {
    /// Checks the table, saying what is wrong and what to use instead.
    pub fn validate(&self) -> Result<()> {
        let n = self.packet_len;
        let end = self.payload_offset.checked_add(self.payload_len);
        if self.payload_len == 0 || !end.is_some_and(|end| end <= n) {
            return Err(Error::Config(format!(
                "layout payload (offset {}, {} bytes) must be non-empty and inside the \
                 {n}-byte packet",
                self.payload_offset, self.payload_len
            )));
        }
        self.index.validate("index", n)?;
        if self.index_step == 0 {
            return Err(Error::Config(
                "layout index_step is 0; use 1 for a counter or the samples per packet \
                 for a time stamp"
                    .into(),
            ));
        }
        match (&self.stream, self.stream_ids.is_empty()) {
            (None, true) => {}
            (Some(f), false) => {
                f.validate("stream", n)?;
                for (i, &id) in self.stream_ids.iter().enumerate() {
                    if id > f.max() {
                        return Err(Error::Config(format!(
                            "layout stream id {id} does not fit the stream field (max {})",
                            f.max()
                        )));
                    }
                    if self.stream_ids[..i].contains(&id) {
                        return Err(Error::Config(format!(
                            "layout stream id {id} is listed twice; list each stream once"
                        )));
                    }
                }
            }
            (None, false) => {
                return Err(Error::Config(
                    "layout lists stream_ids but no stream field; give the field's \
                     offset and width, or drop the ids for a single stream"
                        .into(),
                ))
            }
            (Some(_), true) => {
                return Err(Error::Config(
                    "layout has a stream field but no stream_ids; list the ids to accept \
                     (e.g. stream_ids = [0, 1])"
                        .into(),
                ))
            }
        }
        for (i, c) in self.checks.iter().enumerate() {
            c.field.validate(&format!("checks[{i}]"), n)?;
            if c.value > c.field.max() {
                return Err(Error::Config(format!(
                    "layout checks[{i}] value {:#x} does not fit its field (max {:#x})",
                    c.value,
                    c.field.max()
                )));
            }
        }
        Ok(())
    }

    pub fn streams(&self) -> usize {
        self.stream_ids.len().max(1)
    }

    /// Classifies one packet (the layout must have been validated).
    pub fn locate<'a>(&self, packet: &'a [u8]) -> core::result::Result<Located<'a>, WireError> {
        if packet.len() < self.packet_len {
            return Err(WireError::Truncated);
        }
        if packet.len() > self.packet_len {
            return Err(WireError::Malformed);
        }
        for c in &self.checks {
            if c.field.read(packet) != Some(c.value) {
                return Err(if c.foreign {
                    WireError::Foreign
                } else {
                    WireError::Malformed
                });
            }
        }
        let raw = self.index.read(packet).ok_or(WireError::Truncated)?;
        let step = self.index_step.max(1);
        if raw % step != 0 {
            return Err(WireError::Malformed);
        }
        let stream = match &self.stream {
            None => 0,
            Some(f) => {
                let id = f.read(packet).ok_or(WireError::Truncated)?;
                self.stream_ids
                    .iter()
                    .position(|&s| s == id)
                    .ok_or(WireError::Foreign)?
            }
        };
        let payload = self
            .payload_offset
            .checked_add(self.payload_len)
            .and_then(|end| packet.get(self.payload_offset..end))
            .ok_or(WireError::Truncated)?;
        Ok(Located {
            stream,
            index: raw / step,
            payload,
        })
    }
}

impl Locate for Layout {
    fn streams(&self) -> usize {
        Layout::streams(self)
    }

    fn payload_len(&self) -> usize {
        self.payload_len
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> core::result::Result<Located<'a>, WireError> {
        Layout::locate(self, packet)
    }
}

impl StreamKeyed for Layout {
    fn stream_key(&self) -> Option<StreamKey> {
        Some(StreamKey {
            field: self.stream?,
            ids: self.stream_ids.clone(),
            min_packet_len: self.packet_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::testutil::XorShift;

    /// A made-up FPGA design: magic 0xCAFE (LE, 2 bytes), 4-bit version in
    /// the high nibble of byte 2, 6-byte BE time stamp in samples at 4,
    /// stream id in bits 4..10 of a LE u16 at 10, 8 payload bytes at 16.
    fn layout() -> Layout {
        Layout {
            packet_len: 24,
            index: Field::be(4, 6),
            index_step: 256,
            stream: Some(Field {
                shift: 4,
                bits: 6,
                ..Field::le(10, 2)
            }),
            stream_ids: vec![9, 3],
            checks: vec![
                Check {
                    field: Field::le(0, 2),
                    value: 0xcafe,
                    foreign: true,
                },
                Check {
                    field: Field {
                        shift: 4,
                        ..Field::be(2, 1)
                    },
                    value: 2,
                    foreign: false,
                },
            ],
            payload_offset: 16,
            payload_len: 8,
        }
    }

    fn packet(ts: u64, id: u16) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        b[0..2].copy_from_slice(&0xcafeu16.to_le_bytes());
        b[2] = 0x2f;
        b[4..10].copy_from_slice(&ts.to_be_bytes()[2..]);
        b[10..12].copy_from_slice(&((id << 4) | 0xf00f).to_le_bytes());
        for (i, x) in b[16..].iter_mut().enumerate() {
            *x = 100 + i as u8;
        }
        b
    }

    #[test]
    fn locates_by_table() {
        let l = layout();
        l.validate().unwrap();
        assert_eq!(l.streams(), 2);
        let p = packet(256 * 0x12_3456, 3);
        let loc = l.locate(&p).unwrap();
        assert_eq!((loc.stream, loc.index), (1, 0x12_3456));
        assert_eq!(loc.payload, &p[16..]);
        assert_eq!(l.locate(&packet(0, 9)).unwrap().stream, 0);
        assert_eq!(l.locate(&packet(0, 4)), Err(WireError::Foreign));
        assert_eq!(l.locate(&packet(255, 9)), Err(WireError::Malformed));
        let mut magic = packet(0, 9);
        magic[0] ^= 1;
        assert_eq!(l.locate(&magic), Err(WireError::Foreign));
        let mut version = packet(0, 9);
        version[2] = 0x3f;
        assert_eq!(l.locate(&version), Err(WireError::Malformed));
        version[2] = 0x20; // low nibble is not part of the check
        assert!(l.locate(&version).is_ok());
        let p = packet(0, 9);
        for n in 0..24 {
            assert_eq!(l.locate(&p[..n]), Err(WireError::Truncated));
        }
        let mut long = p.clone();
        long.push(0);
        assert_eq!(l.locate(&long), Err(WireError::Malformed));
        // Single stream, plain 8-byte LE counter.
        let one = Layout {
            packet_len: 16,
            index: Field::le(0, 8),
            index_step: 1,
            stream: None,
            stream_ids: vec![],
            checks: vec![],
            payload_offset: 8,
            payload_len: 8,
        };
        one.validate().unwrap();
        let mut q = u64::MAX.to_le_bytes().to_vec();
        q.extend_from_slice(&[1; 8]);
        assert_eq!(one.locate(&q).unwrap().index, u64::MAX);
    }

    #[test]
    fn field_reads_known_values() {
        let b = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11];
        assert_eq!(Field::be(0, 8).read(&b), Some(0x1234_5678_9abc_def0));
        assert_eq!(Field::le(0, 8).read(&b), Some(0xf0de_bc9a_7856_3412));
        assert_eq!(Field::be(1, 3).read(&b), Some(0x34_5678));
        assert_eq!(Field::le(1, 3).read(&b), Some(0x78_5634));
        let f = Field {
            shift: 4,
            bits: 8,
            ..Field::be(0, 2)
        };
        assert_eq!(f.read(&b), Some(0x23));
        assert_eq!(Field::be(8, 2).read(&b), None);
    }

    #[test]
    fn validation_messages() {
        let mut bad = Vec::new();
        let mut push = |f: &dyn Fn(&mut Layout)| {
            let mut l = layout();
            f(&mut l);
            bad.push(l);
        };
        push(&|l| l.payload_len = 0);
        push(&|l| l.payload_offset = 17);
        push(&|l| l.payload_offset = usize::MAX);
        push(&|l| l.index = Field::be(20, 6));
        push(&|l| l.index = Field::be(0, 9));
        push(&|l| l.index = Field::be(0, 0));
        push(&|l| l.index_step = 0);
        push(&|l| l.stream_ids = vec![]);
        push(&|l| l.stream = None);
        push(&|l| l.stream_ids = vec![64]);
        push(&|l| l.stream_ids = vec![3, 3]);
        push(&|l| {
            l.stream = Some(Field {
                shift: 12,
                bits: 6,
                ..Field::le(10, 2)
            })
        });
        push(&|l| {
            l.stream = Some(Field {
                shift: 16,
                ..Field::le(10, 2)
            })
        });
        push(&|l| l.checks[1].value = 16);
        push(&|l| l.checks[0].field.offset = 23);
        for l in bad {
            assert!(matches!(l.validate(), Err(Error::Config(_))), "{l:?}");
        }
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = XorShift(0x1a40_07f0_44a7_0001);
        let l = layout();
        let valid = packet(256 * 77, 3);
        let mut accepted = 0;
        let mut bytes = Vec::new();
        for i in 0..100_000 {
            rng.fill_like(&mut bytes, &valid, i);
            if let Ok(loc) = l.locate(&bytes) {
                accepted += 1;
                assert_eq!(loc.payload.len(), 8);
                assert!(loc.stream < 2);
            }
            // Random (possibly invalid) fields must not panic either.
            let f = Field {
                offset: rng.below(40),
                bytes: rng.below(12) as u8,
                endian: if i % 2 == 0 {
                    Endian::Big
                } else {
                    Endian::Little
                },
                shift: rng.below(80) as u8,
                bits: rng.below(80) as u8,
            };
            let _ = (f.read(&bytes), f.max());
        }
        assert!(accepted > 1000);
    }
}
