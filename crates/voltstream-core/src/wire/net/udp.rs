//! UDP headers (RFC 768) as zero-copy views. The checksum is neither verified
//! nor written (0, "none", for IPv4): the capture trusts the NIC and the kernel,
//! and the tests' frames never leave the process.

use super::{at_least, fields, view, Field, Reason};

/// Bytes of the header.
pub const HEADER_LEN: usize = 8;

view! {
    /// A read/write view of one UDP datagram held in `T`.
    checked by check_len, error Reason, payload
}

fields! {
    pub src_port: u16 Field::be(0, 2),
    pub dst_port: u16 Field::be(2, 2),
    /// The length field: header and payload, in bytes.
    #[allow(clippy::len_without_is_empty)] // a header field, not a collection
    pub len: usize Field::be(4, 2),
    pub checksum: u16 Field::be(6, 2),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks untrusted bytes ([`Self::new_checked`]): the header complete, and
    /// its length field at least the header and no longer than the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<(), Reason> {
        let len = at_least(self.buffer.as_ref(), HEADER_LEN)?;
        if self.len() < HEADER_LEN {
            return Err(Reason::BadLength);
        }
        if len < self.len() {
            return Err(Reason::Truncated);
        }
        Ok(())
    }

    /// The payload: after the header, up to the length field.
    #[inline]
    fn payload_range(&self) -> core::ops::Range<usize> {
        HEADER_LEN..self.len()
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl Repr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Reason> {
        p.check_len()?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() - HEADER_LEN,
        })
    }

    /// Writes the header (checksum 0) at the start of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Reason> {
        let len = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Reason::BadLength)?;
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Reason::Truncated);
        }
        p.store(Stored {
            src_port: self.src_port,
            dst_port: self.dst_port,
            len: len.into(),
            checksum: 0,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_field_bounds_the_payload() {
        let r = Repr {
            src_port: 1234,
            dst_port: 7148,
            payload_len: 3,
        };
        let mut b = vec![0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        b.extend_from_slice(&[1, 2, 3, 0xff]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.dst_port(), p.payload()), (7148, &[1u8, 2, 3][..]));
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(Packet::new_checked(&b[..10]).err(), Some(Reason::Truncated));
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Reason::BadLength));
    }
}
