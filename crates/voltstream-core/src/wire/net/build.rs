//! Whole frames written from their headers' `Repr`s: for tests, fuzz seeds
//! and benchmarks, never the receive path (it allocates).

use std::net::{IpAddr, SocketAddr};

use super::ethernet::{self, ethertype};
use super::{ipv4, ipv6, udp};

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
    match (src.ip(), dst.ip()) {
        (src_ip, IpAddr::V6(d)) => {
            let s = match src_ip {
                IpAddr::V6(s) => s,
                IpAddr::V4(_) => std::net::Ipv6Addr::UNSPECIFIED,
            };
            let r = ipv6::Repr {
                src: s,
                dst: d,
                next_header: ipv6::next_header::UDP,
                hop_limit: 64,
                payload_len: udp_len,
            };
            let _ = r.emit(&mut ipv6::Packet::new_unchecked(&mut f[l3..]));
        }
        (src_ip, IpAddr::V4(d)) => {
            let s = match src_ip {
                IpAddr::V4(s) => s,
                IpAddr::V6(_) => std::net::Ipv4Addr::UNSPECIFIED,
            };
            let r = ipv4::Repr {
                src: s,
                dst: d,
                protocol: 17,
                ttl: 64,
                payload_len: udp_len,
            };
            let _ = r.emit(&mut ipv4::Packet::new_unchecked(&mut f[l3..]));
        }
    }
    let r = udp::Repr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: payload.len(),
    };
    let _ = r.emit(&mut udp::Packet::new_unchecked(&mut f[l4..]));
    f[l4 + udp::HEADER_LEN..].copy_from_slice(payload);
    f
}
