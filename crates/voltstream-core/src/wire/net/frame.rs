//! One received frame, classified: the UDP datagram it carries, or why none.

use std::net::{IpAddr, SocketAddr};

use super::ethernet::{self, ethertype};
use super::{ipv4, ipv6, udp, Reason};

const UDP: u8 = 17;

/// A whole UDP datagram found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The UDP payload (for a GSO super-frame: every segment back to back).
    pub payload: &'a [u8],
}

/// How much of a rejected frame's destination was read before it was
/// rejected: enough for an engine to tell its own broken packets (counted
/// malformed) from other traffic (not counted), as a socket would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not even that it is IP.
    Link,
    /// IP, but not its destination address.
    Ip,
    /// The destination address, not the port.
    Addr(IpAddr),
    /// Address and UDP port.
    Port(SocketAddr),
}

/// Why a frame holds no usable UDP datagram, and how far it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    pub reason: Reason,
    pub seen: Seen,
}

#[inline(always)]
fn reject<T>(reason: Reason, seen: Seen) -> Result<T, Rejected> {
    Err(Rejected { reason, seen })
}

/// Walks Ethernet (up to two VLAN tags), IPv4 (options skipped) or IPv6
/// (hop-by-hop, routing and destination options skipped) to a UDP datagram.
/// Checks, in the order an engine needs them: the frame holds every header
/// and the whole IP datagram ([`Reason::Truncated`]), the lengths agree (IHL
/// within the total length, the UDP length equal to the IP payload's:
/// [`Reason::BadLength`]), and the datagram is not fragmented
/// ([`Reason::Fragment`]). Bytes after the IP datagram (Ethernet padding) are
/// ignored. Never panics; allocates nothing.
#[inline(always)]
pub fn classify(frame: &[u8]) -> Result<Udp<'_>, Rejected> {
    match ethernet::Packet::new_unchecked(frame).split_checked() {
        Ok((ethertype::IPV4, l3)) => v4(l3),
        Ok((ethertype::IPV6, l3)) => v6(l3),
        Ok(_) => reject(Reason::NotIp, Seen::Link),
        Err(r) => reject(r, Seen::Link),
    }
}

/// The destination as far as the UDP header at `l4` can be read.
#[inline(always)]
fn seen_at(l4: &[u8], dst: IpAddr) -> Seen {
    if l4.len() >= 4 {
        Seen::Port(SocketAddr::new(
            dst,
            udp::Packet::new_unchecked(l4).dst_port(),
        ))
    } else {
        Seen::Addr(dst)
    }
}

/// The UDP datagram that must fill `l4` exactly (the IP payload).
#[inline(always)]
fn datagram(
    l4: &[u8],
    src: IpAddr,
    dst: IpAddr,
    seen: impl FnOnce() -> Seen,
) -> Result<Udp<'_>, Rejected> {
    let u = udp::Packet::new_unchecked(l4);
    // The UDP length must fill the IP payload exactly (a UDP header cut by the
    // IP length is the IP header's lie, not the frame's cut).
    if l4.len() < udp::HEADER_LEN || u.len() != l4.len() {
        return reject(Reason::BadLength, seen());
    }
    let (src, dst) = (
        SocketAddr::new(src, u.src_port()),
        SocketAddr::new(dst, u.dst_port()),
    );
    Ok(Udp {
        src,
        dst,
        payload: u.into_payload(),
    })
}

#[inline(always)]
fn v4(b: &[u8]) -> Result<Udp<'_>, Rejected> {
    if b.len() < ipv4::HEADER_LEN {
        return reject(Reason::Truncated, Seen::Ip);
    }
    // Each field read once: the checks of `ipv4::Packet::check_len`, in the
    // order that tells other traffic from ours first.
    let ip = ipv4::Packet::new_unchecked(b);
    if ip.protocol() != UDP {
        return reject(Reason::NotUdp, Seen::Ip);
    }
    let dst = IpAddr::V4(ip.dst());
    if ip.frag_offset() != 0 {
        // A later fragment: no UDP header, so no port to tell whose it is.
        return reject(Reason::Fragment, Seen::Addr(dst));
    }
    let (h, total) = (ip.header_len(), ip.total_len());
    // Built only for a rejection: the common path never reads it.
    let seen = || match b.get(h..) {
        Some(l4) if h >= ipv4::HEADER_LEN => seen_at(l4, dst),
        _ => Seen::Addr(dst),
    };
    let bad = match () {
        _ if ip.version() != 4 => Some(Reason::BadVersion),
        _ if h < ipv4::HEADER_LEN || total < h => Some(Reason::BadLength),
        _ if b.len() < total => Some(Reason::Truncated),
        _ if ip.more_frags() => Some(Reason::Fragment),
        _ => None,
    };
    if let Some(r) = bad {
        return reject(r, seen());
    }
    let l4 = b.get(h..total).unwrap_or(&[]); // in bounds: checked above
    datagram(l4, IpAddr::V4(ip.src()), dst, seen)
}

#[inline(always)]
fn v6(b: &[u8]) -> Result<Udp<'_>, Rejected> {
    let ip = ipv6::Packet::new_unchecked(b);
    if b.len() < ipv6::HEADER_LEN {
        return reject(Reason::Truncated, Seen::Ip);
    }
    if ip.version() != 6 {
        return reject(Reason::BadVersion, Seen::Ip);
    }
    let dst = IpAddr::V6(ip.dst());
    let up = match ip.upper() {
        Ok(up) => up,
        Err(r) => return reject(r, Seen::Addr(dst)),
    };
    if up.protocol != UDP {
        return reject(Reason::NotUdp, Seen::Addr(dst));
    }
    if matches!(up.fragment, Some(off) if off != 0) {
        return reject(Reason::Fragment, Seen::Addr(dst));
    }
    let seen = || seen_at(b.get(up.offset..).unwrap_or(&[]), dst);
    if let Err(r) = ip.check_len() {
        return reject(r, seen());
    }
    if up.fragment.is_some() {
        return reject(Reason::Fragment, seen());
    }
    let Some(l4) = b.get(up.offset..ipv6::HEADER_LEN + ip.payload_len()) else {
        // Extension headers longer than the payload length says.
        return reject(Reason::BadLength, seen());
    };
    datagram(l4, IpAddr::V6(ip.src()), dst, seen)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
