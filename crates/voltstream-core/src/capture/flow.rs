//! The capture's flow: which received frames are ours. Every engine that sees
//! whole frames (packet ring, AF_XDP, DPDK) classifies them here, through
//! [`crate::wire::net::classify`], so they agree on what is counted where.

use std::net::{IpAddr, SocketAddr};

use crate::wire::net::{self, Reason, Seen};

/// A frame, as far as an engine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// Our UDP payload (for a GSO frame: every segment back to back).
    Udp(&'a [u8]),
    /// Ours, but cut short (by the ring, the driver or the sender).
    Cut,
    /// Ours, but unusable: a fragment, or lengths that do not add up.
    Malformed,
    /// Not ours (other traffic, which a socket would never have seen), or a
    /// later IP fragment (no UDP header, so no port to tell whose it is).
    Other,
}

/// The destination a capture receives: its address (unspecified: any address
/// of that family, and for IPv6 any IPv4 too, as a dual-stack socket bound to
/// `[::]`) and its UDP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flow {
    ip: IpAddr,
    port: u16,
    /// Any IPv4 / any IPv6 destination is ours (decided once, not per packet).
    any_v4: bool,
    any_v6: bool,
    /// Any destination address is ours: a filter in front of the engine (the
    /// ring's BPF program, the XDP program) already picked ours.
    any: bool,
}

impl Flow {
    pub(crate) fn new(local: SocketAddr) -> Flow {
        let ip = local.ip();
        Flow {
            ip,
            port: local.port(),
            any_v4: ip.is_unspecified(),
            any_v6: ip.is_unspecified() && ip.is_ipv6(),
            any: false,
        }
    }

    /// Any address (the filter in front of the engine chose them), this port.
    pub(crate) fn behind_filter(port: u16) -> Flow {
        Flow {
            any: true,
            ..Flow::new(SocketAddr::new(
                std::net::Ipv6Addr::UNSPECIFIED.into(),
                port,
            ))
        }
    }

    #[inline]
    fn accepts_ip(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(_) => self.any_v4 || self.ip == ip,
            IpAddr::V6(_) => self.any_v6 || self.ip == ip,
        }
    }

    #[inline]
    fn accepts(&self, dst: SocketAddr) -> bool {
        dst.port() == self.port && (self.any || self.accepts_ip(dst.ip()))
    }

    /// Classifies one whole frame. A rejected frame is ours when what could be
    /// read of its destination is ours: a frame cut inside its IP header
    /// counts against the capture (it most likely was its traffic), one cut
    /// before the ethertype does not.
    #[inline(always)]
    pub(crate) fn frame<'a>(&self, l2: &'a [u8]) -> Frame<'a> {
        let r = match net::classify(l2) {
            Ok(u) if self.accepts(u.dst) => return Frame::Udp(u.payload),
            Ok(_) => return Frame::Other,
            Err(r) => r,
        };
        let ours = match (r.reason, r.seen) {
            (Reason::NotIp | Reason::NotUdp, _) | (_, Seen::Link) => false,
            (Reason::Fragment, Seen::Addr(_)) => false,
            (_, Seen::Ip) => true,
            (_, Seen::Addr(a)) => self.accepts_ip(a),
            (_, Seen::Port(d)) => self.accepts(d),
        };
        match (ours, r.reason) {
            (false, _) => Frame::Other,
            (true, Reason::Truncated) => Frame::Cut,
            (true, _) => Frame::Malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::testutil::sa;
    use crate::wire::net::build::udp_frame;

    #[test]
    fn ours_by_address_family_and_port() {
        let p = [7u8; 20];
        let src = sa("10.0.0.9:1");
        let v4 = udp_frame(src, sa("10.0.0.1:7148"), 0, &p);
        let v6 = udp_frame(sa("[fd00::9]:1"), sa("[fd00::1]:7148"), 1, &p);
        let cases = [
            ("10.0.0.1:7148", &v4, true),
            ("0.0.0.0:7148", &v4, true),
            ("10.0.0.2:7148", &v4, false),
            ("10.0.0.1:7149", &v4, false),
            ("0.0.0.0:7148", &v6, false),
            ("[::]:7148", &v6, true),
            ("[::]:7148", &v4, true),
            ("[fd00::1]:7148", &v6, true),
            ("[fd00::1]:7148", &v4, false),
            ("[fd00::2]:7148", &v6, false),
        ];
        for (bind, f, ours) in cases {
            let got = Flow::new(sa(bind)).frame(f);
            assert_eq!(got == Frame::Udp(&p), ours, "{bind}");
            assert_eq!(got == Frame::Other, !ours, "{bind}");
            // Cut after the port: still told apart by its destination.
            let got = Flow::new(sa(bind)).frame(&f[..f.len() - 1]);
            assert_eq!(got, if ours { Frame::Cut } else { Frame::Other }, "{bind}");
        }
        let flow = Flow::new(sa("10.0.0.1:7148"));
        // Cut inside the IP header: ours; before the ethertype: not.
        assert_eq!(flow.frame(&v4[..20]), Frame::Cut);
        assert_eq!(flow.frame(&v4[..13]), Frame::Other);
        // A first fragment to us is malformed; a later one is no one's.
        let mut frag = v4.clone();
        frag[20] = 0x20;
        assert_eq!(flow.frame(&frag), Frame::Malformed);
        frag[21] = 0x01;
        assert_eq!(flow.frame(&frag), Frame::Other);
    }
}
