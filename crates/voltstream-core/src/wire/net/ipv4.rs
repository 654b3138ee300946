//! IPv4 headers (RFC 791) as zero-copy views. Options are skipped (the header
//! length comes from IHL), never interpreted. The checksum is written by
//! [`Repr::emit`] but not verified on receipt: the NIC or the kernel has.

use std::net::Ipv4Addr;

use super::{fields, view, Field, Reason};

/// Bytes of a header without options.
pub const HEADER_LEN: usize = 20;

ip_view!("IPv4 datagram", version 4);

fields! {
    /// IHL: the header's length in 4-byte words ([`Packet::header_len`]).
    ihl: u8 Field::be(0, 1).part(0, 4),
    /// Header and payload, in bytes.
    pub total_len: usize Field::be(2, 2),
    pub ident: u16 Field::be(4, 2),
    pub dont_frag: bool Field::be(6, 2).part(14, 1),
    /// More fragments follow.
    pub more_frags: bool Field::be(6, 2).part(13, 1),
    /// The fragment offset in 8-byte units ([`Packet::frag_offset`]).
    frag_units: u16 Field::be(6, 2).part(0, 13),
    pub ttl: u8 Field::be(8, 1),
    pub protocol: u8 Field::be(9, 1),
    pub checksum: u16 Field::be(10, 2),
    src_bits: u32 Field::be(12, 4),
    dst_bits: u32 Field::be(16, 4),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks untrusted bytes ([`Self::new_checked`]): version 4, a header of
    /// 20 to 60 bytes that is complete, and a total length between the header's
    /// and the buffer's (bytes after it, such as Ethernet padding, are
    /// allowed).
    #[inline]
    pub fn check_len(&self) -> Result<(), Reason> {
        let len = self.fixed_header()?;
        let (h, total) = (self.header_len(), self.total_len());
        if h < HEADER_LEN || total < h {
            return Err(Reason::BadLength);
        }
        if len < total {
            return Err(Reason::Truncated);
        }
        Ok(())
    }

    /// Header length in bytes, options included (from IHL).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.ihl() as usize * 4
    }

    /// Where this fragment's payload goes in the datagram, in bytes.
    #[inline]
    pub fn frag_offset(&self) -> usize {
        self.frag_units() as usize * 8
    }

    /// Part of a fragmented datagram: more follow, or it is not the first.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_units() != 0
    }

    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src_bits())
    }

    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst_bits())
    }

    /// The payload: after the header and its options, up to the total length.
    #[inline]
    fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..self.total_len()
    }

    /// The bytes after the header, as far as the buffer goes: what can be read
    /// of a datagram the frame cut short.
    #[inline]
    pub fn payload_read(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

/// The internet checksum of `b` (ones' complement of the ones' complement sum).
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A parsed IPv4 header (fragmentation and options are not represented: what
/// the capture receives and the tests send are whole datagrams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub payload_len: usize,
}

impl Repr {
    /// Reads a checked view; a fragment is [`Reason::Fragment`].
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Reason> {
        p.check_len()?;
        if p.is_fragment() {
            return Err(Reason::Fragment);
        }
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            payload_len: p.total_len() - p.header_len(),
        })
    }

    /// Writes a 20-byte header (DF set, checksum filled) at the start of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Reason> {
        let total = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Reason::BadLength)?;
        let Some(h) = p.buffer.as_mut().get_mut(..HEADER_LEN) else {
            return Err(Reason::Truncated);
        };
        h.fill(0);
        p.store_version();
        p.store(Stored {
            ihl: (HEADER_LEN / 4) as u8,
            total_len: total.into(),
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_units: 0,
            ttl: self.ttl,
            protocol: self.protocol,
            checksum: 0,
            src_bits: self.src.into(),
            dst_bits: self.dst.into(),
        });
        let h = &mut p.buffer.as_mut()[..HEADER_LEN];
        let sum = checksum(h);
        field::checksum.set(h, sum.into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(payload: &[u8]) -> Vec<u8> {
        let r = Repr {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(239, 1, 2, 3),
            protocol: 17,
            ttl: 64,
            payload_len: payload.len(),
        };
        let mut b = vec![0; HEADER_LEN];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn emits_and_parses_back_with_a_valid_checksum() {
        let b = datagram(&[1, 2, 3]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(checksum(&b[..HEADER_LEN]), 0);
        assert_eq!(p.payload(), &[1, 2, 3]);
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            (r.dst, r.protocol, r.payload_len),
            ("239.1.2.3".parse().unwrap(), 17, 3)
        );
        assert!(p.dont_frag() && !p.is_fragment());
    }

    #[test]
    fn options_padding_and_lengths() {
        let mut b = datagram(&[9; 5]);
        // Four bytes of options: IHL 6, total length +4.
        b.splice(20..20, [1, 1, 1, 0]);
        b[0] = 0x46;
        let n = b.len() as u16;
        b[2..4].copy_from_slice(&n.to_be_bytes());
        b.extend_from_slice(&[0; 7]); // Ethernet padding
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.header_len(), p.payload()), (24, &[9u8; 5][..]));
        let mut short = b.clone();
        short[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&short[..]).err(),
            Some(Reason::BadLength)
        );
        short[0] = 0x65;
        assert_eq!(
            Packet::new_checked(&short[..]).err(),
            Some(Reason::BadVersion)
        );
        let mut long = b.clone();
        long[2..4].copy_from_slice(&(b.len() as u16 + 1).to_be_bytes());
        assert_eq!(
            Packet::new_checked(&long[..]).err(),
            Some(Reason::Truncated)
        );
        long[2..4].copy_from_slice(&23u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&long[..]).err(),
            Some(Reason::BadLength)
        );
        for cut in 0..29 {
            assert!(Packet::new_checked(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn fragments_are_recognised() {
        for (word, first) in [(0x2000u16, true), (0x0001, false), (0x2010, false)] {
            let mut b = datagram(&[0; 8]);
            b[6..8].copy_from_slice(&word.to_be_bytes());
            let p = Packet::new_checked(&b[..]).unwrap();
            assert!(p.is_fragment());
            assert_eq!(p.frag_offset() == 0, first);
            assert_eq!(Repr::parse(&p).err(), Some(Reason::Fragment));
        }
    }
}
