//! Whole frames written from their headers' `Repr`s: for tests, fuzz seeds
//! and benchmarks, never the receive path (it allocates).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::ethernet::{self, ethertype};
use super::{ipv4, ipv6, udp, Reason};

/// An Ethernet frame (with `tags` VLAN tags, 0 to 2: an 802.1ad outer tag,
/// then 802.1Q) carrying one UDP datagram from `src` to `dst`. Both addresses
/// must be of one family; a mixed pair is written as `dst`'s family with the
/// unspecified source.
pub fn udp_frame(src: SocketAddr, dst: SocketAddr, tags: usize, payload: &[u8]) -> Vec<u8> {
    let v6 = dst.is_ipv6();
    let tag = |i: usize, tpid| (tags > i).then_some((tpid, 7 + i as u16));
    let eth = ethernet::Repr {
        dst: [0x02, 0, 0, 0, 0, 1],
        src: [0x02, 0, 0, 0, 0, 2],
        tags: if tags > 1 {
            [tag(0, ethertype::QINQ), tag(1, ethertype::VLAN)]
        } else {
            [tag(0, ethertype::VLAN), None]
        },
        ethertype: if v6 { ethertype::IPV6 } else { ethertype::IPV4 },
    };
    let l3 = eth.header_len();
    let l4 = l3
        + if v6 {
            ipv6::HEADER_LEN
        } else {
            ipv4::HEADER_LEN
        };
    let udp_len = udp::HEADER_LEN + payload.len();
    let mut f = vec![0u8; l4 + udp_len];
    // Every emit below writes into a buffer sized for it: they cannot fail.
    let _ = eth.emit(&mut ethernet::Packet::new_unchecked(&mut f[..]));
    let ip = &mut f[l3..];
    let _ = match (src.ip(), dst.ip()) {
        (IpAddr::V6(s), IpAddr::V6(d)) => emit_v6(s, d, udp_len, ip),
        (IpAddr::V4(_), IpAddr::V6(d)) => emit_v6(Ipv6Addr::UNSPECIFIED, d, udp_len, ip),
        (IpAddr::V4(s), IpAddr::V4(d)) => emit_v4(s, d, udp_len, ip),
        (IpAddr::V6(_), IpAddr::V4(d)) => emit_v4(Ipv4Addr::UNSPECIFIED, d, udp_len, ip),
    };
    let r = udp::Repr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: payload.len(),
    };
    let _ = r.emit(&mut udp::Packet::new_unchecked(&mut f[l4..]));
    f[l4 + udp::HEADER_LEN..].copy_from_slice(payload);
    f
}

fn emit_v4(src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize, b: &mut [u8]) -> Result<(), Reason> {
    let (protocol, ttl) = (17, 64);
    let r = ipv4::Repr {
        src,
        dst,
        protocol,
        ttl,
        payload_len,
    };
    r.emit(&mut ipv4::Packet::new_unchecked(b))
}

fn emit_v6(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, b: &mut [u8]) -> Result<(), Reason> {
    let (next_header, hop_limit) = (ipv6::next_header::UDP, 64);
    let r = ipv6::Repr {
        src,
        dst,
        next_header,
        hop_limit,
        payload_len,
    };
    r.emit(&mut ipv6::Packet::new_unchecked(b))
}
