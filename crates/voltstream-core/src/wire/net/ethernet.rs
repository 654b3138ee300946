//! Ethernet II frames with up to two VLAN tags (802.1Q, and 802.1ad outer tags
//! for Q-in-Q), as zero-copy views. The frame check sequence is not part of
//! what a capture sees; bytes after the IP datagram (padding of short frames)
//! belong to the payload and are left to the IP layer to cut off.

use super::{at_least, be16, fields, set_be16, view, Field, Reason};

/// Bytes of the header without tags.
pub const HEADER_LEN: usize = 14;
/// Bytes one VLAN tag adds.
pub const TAG_LEN: usize = 4;
/// Tags a view walks; a third tag's frame is reported [`Reason::NotIp`].
pub const MAX_TAGS: usize = 2;

/// Ethertypes the capture cares about.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service (outer) tag.
    pub const QINQ: u16 = 0x88a8;
}

view! {
    /// A read/write view of one Ethernet frame held in `T`.
    checked by check_len, error Reason, payload
}

fields! {
    dst_mac: u64 Field::be(0, 6),
    src_mac: u64 Field::be(6, 6),
    /// The ethertype, or the first tag's TPID; each tag moves the ethertype
    /// on by [`TAG_LEN`].
    first_type: u16 Field::be(12, 2),
}

/// A MAC address from the 6 low bytes of a field's value.
fn mac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// A MAC address as a field's value.
fn mac_value(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]])
}

fn is_tag(t: u16) -> bool {
    t == ethertype::VLAN || t == ethertype::QINQ
}

impl<'a> Packet<&'a [u8]> {
    /// The ethertype and the payload of a frame whose header and tags are
    /// complete, the tags walked once: what the classifier needs per packet.
    #[inline]
    pub fn split_checked(self) -> Result<(u16, &'a [u8]), Reason> {
        let h = self.header_len();
        match self.buffer.get(h..) {
            Some(payload) => Ok((be16(self.buffer, h - 2), payload)),
            None => Err(Reason::Truncated),
        }
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks untrusted bytes ([`Self::new_checked`]): the header and its tags
    /// must be complete.
    #[inline]
    pub fn check_len(&self) -> Result<(), Reason> {
        at_least(self.buffer.as_ref(), self.header_len()).map(|_| ())
    }

    pub fn dst(&self) -> [u8; 6] {
        mac(self.dst_mac())
    }

    pub fn src(&self) -> [u8; 6] {
        mac(self.src_mac())
    }

    /// How many VLAN tags precede the ethertype (0 to [`MAX_TAGS`]).
    #[inline]
    pub fn tags(&self) -> usize {
        let b = self.buffer.as_ref();
        let mut n = 0;
        while n < MAX_TAGS && is_tag(be16(b, field::first_type.offset + n * TAG_LEN)) {
            n += 1;
        }
        n
    }

    /// Tag `i` (outermost first) as (TPID, TCI), if the frame has it.
    pub fn tag(&self, i: usize) -> Option<(u16, u16)> {
        let b = self.buffer.as_ref();
        (i < self.tags()).then(|| {
            let at = field::first_type.offset + i * TAG_LEN;
            (be16(b, at), be16(b, at + 2))
        })
    }

    /// Bytes from the start of the frame to its payload, tags included.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.tags() * TAG_LEN
    }

    /// The ethertype after the tags (a third tag's TPID when there is one).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), self.header_len() - 2)
    }

    /// Everything after the header and its tags (IP trims the padding).
    #[inline]
    fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..self.buffer.as_ref().len()
    }
}

/// A parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// VLAN tags as (TPID, TCI), outermost first; `None` after the last one.
    pub tags: [Option<(u16, u16)>; MAX_TAGS],
    pub ethertype: u16,
}

impl Repr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Reason> {
        p.check_len()?;
        Ok(Repr {
            dst: p.dst(),
            src: p.src(),
            tags: [p.tag(0), p.tag(1)],
            ethertype: p.ethertype(),
        })
    }

    /// Bytes the header takes, tags included.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.tags.iter().flatten().count() * TAG_LEN
    }

    /// Writes the header at the start of `p`. A tag after an absent one, or a
    /// TPID that is not a tag's, would not read back: [`Reason::BadLength`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Reason> {
        let tags = self.tags.iter().take_while(|t| t.is_some()).flatten();
        if tags.clone().count() != self.tags.iter().flatten().count()
            || tags.clone().any(|&(tpid, _)| !is_tag(tpid))
        {
            return Err(Reason::BadLength);
        }
        if p.buffer.as_ref().len() < self.header_len() {
            return Err(Reason::Truncated);
        }
        p.store(Stored {
            dst_mac: mac_value(self.dst),
            src_mac: mac_value(self.src),
            first_type: self.ethertype, // a tag's TPID, when tagged: below
        });
        let b = p.buffer.as_mut();
        let mut at = field::first_type.offset;
        for &(tpid, tci) in tags {
            set_be16(b, at, tpid);
            set_be16(b, at + 2, tci);
            at += TAG_LEN;
        }
        set_be16(b, at, self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_move_the_ethertype_and_the_payload() {
        for n in 0..=MAX_TAGS {
            let r = Repr {
                dst: [1, 2, 3, 4, 5, 6],
                src: [7, 8, 9, 10, 11, 12],
                tags: [
                    (n > 0).then_some((ethertype::QINQ, 0x0123)),
                    (n > 1).then_some((ethertype::VLAN, 0x0456)),
                ],
                ethertype: ethertype::IPV6,
            };
            let mut b = vec![0xee; r.header_len() + 3];
            r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!((p.tags(), p.header_len()), (n, 14 + 4 * n));
            assert_eq!(p.payload(), &[0xee; 3]);
            assert_eq!(Repr::parse(&p).unwrap(), r);
            for cut in 0..r.header_len() {
                assert_eq!(
                    Packet::new_checked(&b[..cut]).err(),
                    Some(Reason::Truncated)
                );
            }
        }
        let bad = Repr {
            dst: [0; 6],
            src: [0; 6],
            tags: [None, Some((ethertype::VLAN, 1))],
            ethertype: ethertype::IPV4,
        };
        let mut b = [0u8; 32];
        assert!(bad.emit(&mut Packet::new_unchecked(&mut b[..])).is_err());
    }
}
