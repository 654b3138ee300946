//! The ring's classic BPF filter: only our UDP frames enter the ring; other
//! traffic is dropped in the kernel and never counted, exactly as the socket
//! engine never sees other ports.

use std::net::{IpAddr, Ipv4Addr};

use super::ring::PACKET_OUTGOING;
use crate::capture::cbpf::*;

/// Snap length the filter grants: more than any frame (64 KiB GSO + headers).
const SNAP: u32 = 0x0004_0000;

/// Which destination addresses the ring's filter accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DstMatch<'a> {
    /// Any IPv4 address (bound to 0.0.0.0).
    Any,
    /// Any IPv4 or IPv6 address (bound to `[::]`, which holds both).
    Dual,
    /// Exactly this address.
    One(IpAddr),
    /// These IPv4 multicast groups, and any unicast address (as a socket bound
    /// to 0.0.0.0 that joined them receives); other groups are refused.
    Groups(&'a [Ipv4Addr]),
}

impl DstMatch<'_> {
    fn v4(&self) -> bool {
        !matches!(self, DstMatch::One(IpAddr::V6(_)))
    }

    fn v6(&self) -> bool {
        matches!(self, DstMatch::Dual | DstMatch::One(IpAddr::V6(_)))
    }
}

/// A jump target while the filter is written; resolved to offsets at the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Port,
    V6,
    Accept,
    Drop,
}

/// Accepts UDP frames to `port` and a destination `dst` accepts that are not
/// outgoing and not non-first fragments, with or without one VLAN tag: IPv4
/// (the UDP header found through the IHL), and, when `dst` takes IPv6, IPv6
/// whose fixed header is followed by UDP directly. IPv6 extension headers are
/// not walked here (classic BPF has no loop; our senders use none): such frames
/// never reach the ring, as frames to other ports do not.
pub(super) fn udp_filter(port: u16, dst: DstMatch<'_>) -> Vec<libc::sock_filter> {
    // One body per header position (`l3`: where IP starts), each ending in
    // its own accept and drop; jumps are written symbolically, then resolved.
    let body = |l3: u32| {
        let v4 = if dst.v4() { To::Next } else { To::V6 };
        let mut b = vec![
            (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 - 2), // ethertype
            (BPF_JMP | BPF_JEQ | BPF_K, v4, To::V6, 0x0800),
            (BPF_LD | BPF_B | BPF_ABS, To::Next, To::Next, l3 + 9), // protocol
            (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 17),
            (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 + 6), // fragment offset
            (BPF_JMP | BPF_JSET | BPF_K, To::Drop, To::Next, 0x1fff),
        ];
        let load_dst = (BPF_LD | BPF_W | BPF_ABS, To::Next, To::Next, l3 + 16);
        match dst {
            DstMatch::Any | DstMatch::Dual | DstMatch::One(IpAddr::V6(_)) => {}
            DstMatch::One(IpAddr::V4(a)) => {
                b.push(load_dst);
                b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, u32::from(a)));
            }
            DstMatch::Groups(groups) => {
                b.push(load_dst);
                for g in groups {
                    b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Port, To::Next, u32::from(*g)));
                }
                // Not one of ours: unicast passes on, any other group is dropped.
                b.push((BPF_ALU | BPF_AND | BPF_K, To::Next, To::Next, 0xf000_0000));
                b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Drop, To::Next, 0xe000_0000));
            }
        }
        let port_at = b.len();
        b.extend([
            (BPF_LDX | BPF_B | BPF_MSH, To::Next, To::Next, l3), // X = IP header length
            (BPF_LD | BPF_H | BPF_IND, To::Next, To::Next, l3 + 2), // UDP destination port
            (BPF_JMP | BPF_JEQ | BPF_K, To::Accept, To::Drop, port as u32),
        ]);
        // IPv6: A still holds the ethertype.
        let v6_at = b.len();
        if dst.v6() {
            b.extend([
                (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 0x86dd),
                (BPF_LD | BPF_B | BPF_ABS, To::Next, To::Next, l3 + 6), // next header
                (BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, 17),
            ]);
            if let DstMatch::One(IpAddr::V6(a)) = dst {
                for (i, w) in a.octets().chunks(4).enumerate() {
                    let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    b.push((
                        BPF_LD | BPF_W | BPF_ABS,
                        To::Next,
                        To::Next,
                        l3 + 24 + 4 * i as u32,
                    ));
                    b.push((BPF_JMP | BPF_JEQ | BPF_K, To::Next, To::Drop, w));
                }
            }
            b.extend([
                (BPF_LD | BPF_H | BPF_ABS, To::Next, To::Next, l3 + 42), // UDP destination port
                (BPF_JMP | BPF_JEQ | BPF_K, To::Accept, To::Drop, port as u32),
            ]);
        }
        let accept_at = b.len();
        b.push((BPF_RET | BPF_K, To::Next, To::Next, SNAP));
        b.push((BPF_RET | BPF_K, To::Next, To::Next, 0));
        let v6_at = if dst.v6() { v6_at } else { accept_at + 1 };
        let off = |from: usize, to: To| -> u8 {
            let target = match to {
                To::Next => return 0,
                To::Port => port_at,
                To::V6 => v6_at,
                To::Accept => accept_at,
                To::Drop => accept_at + 1,
            };
            u8::try_from(target - from - 1).expect("the filter is short (MAX_GROUPS)")
        };
        b.iter()
            .enumerate()
            .map(|(i, &(code, jt, jf, k))| bpf(code, off(i, jt), off(i, jf), k))
            .collect::<Vec<_>>()
    };
    let (plain, tagged) = (body(14), body(18));
    let head = 5;
    let (to_plain_drop, to_tagged) = (head + plain.len() - 1, head + plain.len());
    let mut p = vec![
        bpf(BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_PKTTYPE),
        bpf(
            BPF_JMP | BPF_JEQ | BPF_K,
            (to_plain_drop - 2) as u8,
            0,
            PACKET_OUTGOING as u32,
        ),
        bpf(BPF_LD | BPF_H | BPF_ABS, 0, 0, 12),
        bpf(BPF_JMP | BPF_JEQ | BPF_K, (to_tagged - 4) as u8, 0, 0x8100),
        bpf(BPF_JMP | BPF_JEQ | BPF_K, (to_tagged - 5) as u8, 0, 0x88a8),
    ];
    p.extend(plain);
    p.extend(tagged);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::packet_ring::tests::frame;
    use std::net::SocketAddr;

    fn run_bpf(p: &[libc::sock_filter], pkt: &[u8], pkttype: u8) -> u32 {
        run(p, pkt, 0, pkttype)
    }

    #[test]
    fn filter_accepts_exactly_udp_to_our_address_and_port() {
        let payload = [1u8, 2, 3, 4, 5];
        let lo = DstMatch::One(Ipv4Addr::LOCALHOST.into());
        let any = DstMatch::Any;
        for vlan in [false, true] {
            let f = frame(7000, &payload, vlan, 0);
            let ip = if vlan { 18 } else { 14 };
            let run = |dst, f: &[u8], t| run_bpf(&udp_filter(7000, dst), f, t);
            assert_eq!(run(lo, &f, 0), SNAP);
            assert_eq!(run(any, &f, 0), SNAP);
            assert_eq!(run(lo, &f, PACKET_OUTGOING), 0);
            assert_eq!(run(lo, &frame(7001, &payload, vlan, 0), 0), 0);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x2000), 0), SNAP);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x0010), 0), 0);
            assert_eq!(run(lo, &frame(7000, &payload, vlan, 0x4000), 0), SNAP);
            let mut other_dst = f.clone();
            other_dst[ip + 16] = 10;
            assert_eq!(run(lo, &other_dst, 0), 0);
            assert_eq!(run(any, &other_dst, 0), SNAP);
            let mut tcp = f.clone();
            tcp[ip + 9] = 6;
            assert_eq!(run(lo, &tcp, 0), 0);
            let mut arp = f.clone();
            arp[ip - 2] = 0x06;
            assert_eq!(run(lo, &arp, 0), 0);
            // IP options move the UDP header; the filter follows the IHL.
            let mut opt = f[..ip].to_vec();
            opt.extend_from_slice(&f[ip..ip + 20]);
            opt[ip] = 0x46;
            opt.extend_from_slice(&[1, 1, 1, 0]);
            opt.extend_from_slice(&f[ip + 20..]);
            assert_eq!(run(lo, &opt, 0), SNAP);
            for n in 0..ip + 24 {
                assert_eq!(run(lo, &f[..n], 0), 0, "cut at {n}");
            }
        }
    }

    #[test]
    fn filter_with_groups_accepts_joined_groups_and_unicast_only() {
        let payload = [9u8; 12];
        let joined: Vec<Ipv4Addr> = (1..=multicast_max())
            .map(|i| Ipv4Addr::new(239, 1, 2, i))
            .collect();
        for n in [1, 2, multicast_max() as usize] {
            let groups = &joined[..n];
            let prog = udp_filter(7000, DstMatch::Groups(groups));
            for vlan in [false, true] {
                let ip = if vlan { 18 } else { 14 };
                let with_dst = |a: Ipv4Addr, port: u16| {
                    let mut f = frame(port, &payload, vlan, 0);
                    f[ip + 16..ip + 20].copy_from_slice(&a.octets());
                    f
                };
                for g in groups {
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7000), 0), SNAP, "{g}");
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7001), 0), 0, "{g} other port");
                    assert_eq!(run_bpf(&prog, &with_dst(*g, 7000), PACKET_OUTGOING), 0);
                }
                for other in [Ipv4Addr::new(239, 1, 2, 200), Ipv4Addr::new(224, 0, 0, 251)] {
                    assert_eq!(run_bpf(&prog, &with_dst(other, 7000), 0), 0, "{other}");
                }
                for unicast in [Ipv4Addr::new(10, 1, 1, 1), Ipv4Addr::new(192, 168, 0, 9)] {
                    assert_eq!(
                        run_bpf(&prog, &with_dst(unicast, 7000), 0),
                        SNAP,
                        "{unicast}"
                    );
                }
            }
        }
    }

    fn multicast_max() -> u8 {
        crate::capture::MAX_GROUPS as u8
    }

    #[test]
    fn filter_accepts_ipv6_udp_to_our_address_and_port() {
        use crate::wire::net::build::udp_frame;
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let p = [3u8; 40];
        let ours = DstMatch::One("fd00::1".parse().unwrap());
        for tags in [0, 1] {
            let f = |dst: &str| udp_frame(sa("[fd00::2]:99"), sa(dst), tags, &p);
            let run = |dst, f: &[u8]| run_bpf(&udp_filter(7000, dst), f, 0);
            assert_eq!(run(ours, &f("[fd00::1]:7000")), SNAP);
            assert_eq!(run(DstMatch::Dual, &f("[fd00::1]:7000")), SNAP);
            assert_eq!(run(DstMatch::Dual, &f("[fd00::9]:7000")), SNAP);
            assert_eq!(run(ours, &f("[fd00::9]:7000")), 0);
            assert_eq!(run(ours, &f("[fd00::1]:7001")), 0);
            // IPv4 binds take no IPv6; an IPv6 bind takes IPv4 only when it is [::].
            assert_eq!(run(DstMatch::Any, &f("[fd00::1]:7000")), 0);
            let v4 = udp_frame(sa("10.0.0.2:99"), sa("10.0.0.1:7000"), tags, &p);
            assert_eq!(run(DstMatch::Dual, &v4), SNAP);
            assert_eq!(run(ours, &v4), 0);
            // Extension headers are not walked in the kernel: refused there.
            let mut hop = f("[fd00::1]:7000");
            hop[14 + 4 * tags + 6] = 0;
            assert_eq!(run(ours, &hop), 0);
            let good = f("[fd00::1]:7000");
            for n in 0..14 + 4 * tags + 44 {
                assert_eq!(run(ours, &good[..n]), 0, "cut at {n}");
            }
        }
    }
}
