#![deny(unsafe_code)]
//! The plain sequence-counter packet (as in the 400GbE capture paper): a test and
//! bring-up format. It belongs with the other formats in `wire/` and moves there
//! when that module adopts it; it lives here because the capture tests need it.

use crate::wire::{Locate, Located, WireError};

/// Bytes before the payload: u64 big-endian packet index, u16 big-endian stream.
pub const COUNTER_HEADER_LEN: usize = 10;

/// Locates counter packets: `index: u64 BE | stream: u16 BE | payload`.
///
/// Packets of the wrong length are malformed, stream ids `>= streams` foreign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub streams: usize,
    pub payload_len: usize,
}

impl Locate for Counter {
    fn streams(&self) -> usize {
        self.streams
    }

    fn payload_len(&self) -> usize {
        self.payload_len
    }

    fn locate<'a>(&self, packet: &'a [u8]) -> Result<Located<'a>, WireError> {
        let (Some(index), Some(stream), Some(payload)) = (
            packet.get(..8),
            packet.get(8..COUNTER_HEADER_LEN),
            packet.get(COUNTER_HEADER_LEN..),
        ) else {
            return Err(WireError::Truncated);
        };
        if payload.len() < self.payload_len {
            return Err(WireError::Truncated);
        }
        if payload.len() > self.payload_len {
            return Err(WireError::Malformed);
        }
        let mut i = [0u8; 8];
        i.copy_from_slice(index);
        let stream = u16::from_be_bytes([stream[0], stream[1]]) as usize;
        if stream >= self.streams {
            return Err(WireError::Foreign);
        }
        Ok(Located {
            stream,
            index: u64::from_be_bytes(i),
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_length_and_stream() {
        let c = Counter {
            streams: 2,
            payload_len: 4,
        };
        let mut p = 0x0102_0304_0506_0708u64.to_be_bytes().to_vec();
        p.extend_from_slice(&1u16.to_be_bytes());
        p.extend_from_slice(&[9, 8, 7, 6]);
        let l = c.locate(&p).unwrap();
        assert_eq!(
            (l.stream, l.index, l.payload),
            (1, 0x0102_0304_0506_0708, &[9, 8, 7, 6][..])
        );
        for n in 0..p.len() {
            assert_eq!(c.locate(&p[..n]), Err(WireError::Truncated), "length {n}");
        }
        p.push(0);
        assert_eq!(c.locate(&p), Err(WireError::Malformed));
        p.pop();
        p[9] = 2;
        assert_eq!(c.locate(&p), Err(WireError::Foreign));
    }
}
