//! IPv6 headers (RFC 8200) as zero-copy views: the fixed header, and a walk
//! over the extension headers a UDP datagram may carry before its own
//! (hop-by-hop options, routing, destination options, fragment).

use std::net::Ipv6Addr;

use super::{array, be16, fields, set_bytes, view, Field, Reason};

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Extension headers [`Packet::upper`] walks before it gives up ([`Reason::NotUdp`]):
/// more than any sender of ours uses, and a bound on the work per frame.
pub const MAX_EXTENSIONS: usize = 8;

/// Next-header values this module knows.
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DST_OPTIONS: u8 = 60;
}

ip_view!("IPv6 packet", version 6);

fields! {
    /// Traffic class and flow label: written 0, not interpreted.
    class_flow: u32 Field::be(0, 4).part(0, 28),
    /// Bytes after the fixed header, extension headers included.
    pub payload_len: usize Field::be(4, 2),
    pub next_header: u8 Field::be(6, 1),
    pub hop_limit: u8 Field::be(7, 1),
}

/// Where the addresses are: 16 bytes each, wider than a [`Field`].
mod addr {
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// Offsets inside an extension header.
mod ext {
    /// Its next header, and its length in 8-byte units beyond the first 8.
    pub const NEXT: usize = 0;
    pub const LEN: usize = 1;
    /// In a fragment header: offset (13 bits, 8-byte units), 2 reserved bits, M.
    pub const FRAG_WORD: usize = 2;
    pub const FRAG_LEN: usize = 8;
}

/// The header after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upper {
    /// Its protocol (next-header value).
    pub protocol: u8,
    /// Where it starts, from the start of the IPv6 header.
    pub offset: usize,
    /// The fragment header's offset (bytes) when there is one: a non-zero
    /// offset means `offset` points into the middle of the upper payload.
    pub fragment: Option<usize>,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks untrusted bytes ([`Self::new_checked`]): version 6, the fixed
    /// header complete, and the payload length within the buffer (bytes after
    /// it are allowed). A payload length of 0 (a jumbogram's) is
    /// [`Reason::BadLength`].
    #[inline]
    pub fn check_len(&self) -> Result<(), Reason> {
        let len = self.fixed_header()?;
        if self.payload_len() == 0 {
            return Err(Reason::BadLength);
        }
        if len < HEADER_LEN + self.payload_len() {
            return Err(Reason::Truncated);
        }
        Ok(())
    }

    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(array::<16>(self.buffer.as_ref(), addr::SRC))
    }

    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(array::<16>(self.buffer.as_ref(), addr::DST))
    }

    /// The payload: after the fixed header, up to the payload length.
    #[inline]
    fn payload_range(&self) -> core::ops::Range<usize> {
        HEADER_LEN..HEADER_LEN + self.payload_len()
    }

    /// Walks the extension headers, as far as the buffer goes (the payload
    /// length is not needed: a cut packet still shows its ports). Stops at the
    /// first header that is not hop-by-hop, routing, destination options or a
    /// fragment header, or after a fragment header with a non-zero offset
    /// (what follows is the middle of a payload). An extension header that
    /// runs past the buffer is [`Reason::Truncated`]; more than
    /// [`MAX_EXTENSIONS`] of them, [`Reason::NotUdp`].
    #[inline]
    pub fn upper(&self) -> Result<Upper, Reason> {
        let b = self.buffer.as_ref();
        let mut up = Upper {
            protocol: self.next_header(),
            offset: HEADER_LEN,
            fragment: None,
        };
        for _ in 0..MAX_EXTENSIONS {
            let (len, next) = match up.protocol {
                next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DST_OPTIONS => {
                    let Some(&n) = b.get(up.offset + ext::LEN) else {
                        return Err(Reason::Truncated);
                    };
                    (8 * (n as usize + 1), b.get(up.offset + ext::NEXT))
                }
                next_header::FRAGMENT => {
                    let word = be16(b, up.offset + ext::FRAG_WORD);
                    up.fragment = Some((word & !7) as usize);
                    (ext::FRAG_LEN, b.get(up.offset + ext::NEXT))
                }
                _ => return Ok(up),
            };
            if b.len() < up.offset + len {
                return Err(Reason::Truncated);
            }
            up.offset += len;
            up.protocol = next.copied().unwrap_or(next_header::NO_NEXT);
            if matches!(up.fragment, Some(off) if off != 0) {
                return Ok(up);
            }
        }
        match up.protocol {
            next_header::HOP_BY_HOP
            | next_header::ROUTING
            | next_header::DST_OPTIONS
            | next_header::FRAGMENT => Err(Reason::NotUdp),
            _ => Ok(up),
        }
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub hop_limit: u8,
    pub payload_len: usize,
}

impl Repr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Reason> {
        p.check_len()?;
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            payload_len: p.payload_len(),
        })
    }

    /// Writes the fixed header (traffic class and flow label 0) at the start of `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Reason> {
        let len = u16::try_from(self.payload_len).map_err(|_| Reason::BadLength)?;
        let Some(h) = p.buffer.as_mut().get_mut(..HEADER_LEN) else {
            return Err(Reason::Truncated);
        };
        set_bytes(h, addr::SRC, &self.src.octets());
        set_bytes(h, addr::DST, &self.dst.octets());
        p.store_version();
        p.store(Stored {
            class_flow: 0,
            payload_len: len.into(),
            next_header: self.next_header,
            hop_limit: self.hop_limit,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet with `ext` (next header, bytes) chained before a UDP-ish payload.
    fn packet(ext: &[(u8, Vec<u8>)], payload: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, (_, bytes)) in ext.iter().enumerate() {
            let mut h = bytes.clone();
            h[0] = ext.get(i + 1).map_or(next_header::UDP, |e| e.0);
            body.extend_from_slice(&h);
        }
        body.extend_from_slice(payload);
        let r = Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: "ff15::1".parse().unwrap(),
            next_header: ext.first().map_or(next_header::UDP, |e| e.0),
            hop_limit: 1,
            payload_len: body.len(),
        };
        let mut b = vec![0; HEADER_LEN];
        r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
        b.extend_from_slice(&body);
        b
    }

    #[test]
    fn extension_headers_are_skipped() {
        let hop = (next_header::HOP_BY_HOP, vec![0, 0, 1, 4, 0, 0, 0, 0]);
        let dst = (next_header::DST_OPTIONS, {
            let mut v = vec![0u8; 16];
            v[1] = 1;
            v
        });
        let routing = (next_header::ROUTING, vec![0, 0, 0, 0, 0, 0, 0, 0]);
        let b = packet(&[hop.clone(), routing, dst], &[0xaa; 8]);
        let p = Packet::new_checked(&b[..]).unwrap();
        let up = p.upper().unwrap();
        assert_eq!((up.protocol, up.offset, up.fragment), (17, 72, None));
        assert_eq!(Repr::parse(&p).unwrap().payload_len, 40);
        // Cut inside an extension header.
        for cut in 40..72 {
            let p = Packet::new_unchecked(&b[..cut]);
            assert_eq!(p.upper().err(), Some(Reason::Truncated), "cut at {cut}");
            assert!(Packet::new_checked(&b[..cut]).is_err());
        }
        let many = vec![hop; MAX_EXTENSIONS + 1];
        let b = packet(&many, &[0; 8]);
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap().upper().err(),
            Some(Reason::NotUdp)
        );
    }

    #[test]
    fn fragment_headers_are_seen_first_or_not() {
        for (word, off) in [(0x0001u16, 0usize), (0x0008, 8), (0x0000, 0)] {
            let mut frag = vec![0u8; 8];
            frag[2..4].copy_from_slice(&word.to_be_bytes());
            let b = packet(&[(next_header::FRAGMENT, frag)], &[0; 8]);
            let up = Packet::new_checked(&b[..]).unwrap().upper().unwrap();
            assert_eq!((up.protocol, up.offset, up.fragment), (17, 48, Some(off)));
        }
    }

    #[test]
    fn fixed_header_checks() {
        let b = packet(&[], &[1; 8]);
        assert!(Packet::new_checked(&b[..]).is_ok());
        assert_eq!(Packet::new_checked(&b[..47]).err(), Some(Reason::Truncated));
        let mut v4 = b.clone();
        v4[0] = 0x45;
        assert_eq!(Packet::new_checked(&v4[..]).err(), Some(Reason::BadVersion));
        let mut jumbo = b.clone();
        jumbo[4..6].copy_from_slice(&[0, 0]);
        assert_eq!(
            Packet::new_checked(&jumbo[..]).err(),
            Some(Reason::BadLength)
        );
    }
}
