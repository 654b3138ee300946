//! IPv4 multicast: which address a capture binds when it receives groups, and
//! the IGMP join.
//!
//! A capture names its groups (or binds to a group address, which then is the
//! one group). Its UDP socket is bound to `0.0.0.0:port`, so that several groups
//! on one port (say one per polarisation) reach the one socket and assemble onto
//! one timeline, and joins every group with `IP_ADD_MEMBERSHIP` on the chosen
//! interface: the kernel then sends the IGMP membership report that makes
//! switches (IGMP snooping) and the NIC's multicast filter pass the groups, and
//! answers the router's queries while the socket lives. Closing the socket
//! leaves the groups (the kernel sends the leave).
//!
//! `IP_MULTICAST_ALL` is switched off: by default Linux delivers a multicast
//! datagram to *every* socket bound to `0.0.0.0` and its port when *any* socket
//! of the host joined the group, so another program's group would land in our
//! capture. With it off, only the groups this socket joined (and unicast to the
//! port) arrive.
//!
//! The packet-ring and AF_XDP engines read frames before the IP layer's
//! membership check, so their guard socket joins (for the IGMP report and the
//! NIC filter) and their filters accept exactly the joined groups, plus unicast
//! to the port as the socket engine would. Frames to other groups never reach
//! the ring or the AF_XDP socket: they are not ours and are not counted.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use super::packet_ring::{if_index, setsockopt};
use crate::{Error, Result};

/// Most groups one capture joins: Linux's default `net.ipv4.igmp_max_memberships`
/// is 20 per socket, and the AF_XDP program has room for this many.
pub const MAX_GROUPS: usize = 16;

/// What a capture that receives multicast binds and joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastPlan {
    /// `0.0.0.0:port`.
    pub bind: SocketAddr,
    /// The groups, each once, in the order given.
    pub groups: Vec<Ipv4Addr>,
}

/// Decides the bind address and groups of a capture asked to bind `bind` and
/// join `groups`: `None` for a plain unicast capture. A group as the bind host
/// is one more group; with groups the host must be 0.0.0.0 or a group (a
/// socket bound to a unicast address never receives multicast).
pub fn plan(bind: SocketAddr, groups: &[Ipv4Addr]) -> Result<Option<MulticastPlan>> {
    let host = match bind.ip() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) if groups.is_empty() => return Ok(None),
        IpAddr::V6(a) => {
            return Err(Error::Config(format!(
                "multicast groups are IPv4 only; bind to 0.0.0.0:{} instead of [{a}]",
                bind.port()
            )))
        }
    };
    let mut all = Vec::new();
    if host.is_multicast() {
        all.push(host);
    } else if groups.is_empty() {
        return Ok(None);
    } else if !host.is_unspecified() {
        return Err(Error::Config(format!(
            "with multicast groups bind to 0.0.0.0:{port} or to a group address (GROUP:{port}), \
             not to the unicast address {host}: its socket would never receive them",
            port = bind.port()
        )));
    }
    for &g in groups {
        if !g.is_multicast() {
            return Err(Error::Config(format!(
                "{g} is not an IPv4 multicast group (224.0.0.0 to 239.255.255.255)"
            )));
        }
        if !all.contains(&g) {
            all.push(g);
        }
    }
    if all.len() > MAX_GROUPS {
        return Err(Error::Config(format!(
            "{} multicast groups asked for; one capture joins at most {MAX_GROUPS}",
            all.len()
        )));
    }
    if bind.port() == 0 {
        return Err(Error::Config(
            "a multicast capture needs the port the groups are sent to (not port 0)".into(),
        ));
    }
    Ok(Some(MulticastPlan {
        bind: SocketAddr::from((Ipv4Addr::UNSPECIFIED, bind.port())),
        groups: all,
    }))
}

/// Joins `groups` on `sock` through `interface` (`None`: the interface the
/// routing table picks for each group), with `IP_MULTICAST_ALL` off.
pub fn join(sock: &UdpSocket, groups: &[Ipv4Addr], interface: Option<&str>) -> Result<()> {
    let fd = sock.as_raw_fd();
    let ifindex = interface.map(if_index).transpose()?.unwrap_or(0);
    setsockopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_ALL,
        &0 as &libc::c_int,
    )
    .map_err(|e| {
        Error::io(
            "cannot switch IP_MULTICAST_ALL off on the capture socket",
            e,
        )
    })?;
    for g in groups {
        let req = libc::ip_mreqn {
            imr_multiaddr: libc::in_addr {
                s_addr: u32::from(*g).to_be(),
            },
            imr_address: libc::in_addr { s_addr: 0 },
            imr_ifindex: ifindex,
        };
        setsockopt(fd, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &req).map_err(|e| {
            let on = interface.map_or(String::new(), |i| format!(" on {i}"));
            let hint = match e.raw_os_error() {
                Some(libc::ENODEV) => {
                    " (no route for the group: pass the interface to receive it on)"
                }
                Some(libc::ENOBUFS) => {
                    " (too many memberships: raise sysctl net.ipv4.igmp_max_memberships)"
                }
                _ => "",
            };
            Error::io(format!("cannot join multicast group {g}{on}{hint}"), e)
        })?;
    }
    Ok(())
}

/// The groups joined on `interface`, as `/proc/net/igmp` of this network
/// namespace lists them (for tests and diagnostics).
pub fn joined_groups(interface: &str) -> io::Result<Vec<Ipv4Addr>> {
    let text = std::fs::read_to_string("/proc/net/igmp")?;
    Ok(parse_igmp(&text, interface))
}

/// Parses `/proc/net/igmp`: a device line (`idx name : count querier`) is
/// followed by one line per group, the address as the host-order hex of the
/// network-order word.
pub fn parse_igmp(text: &str, interface: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut current = false;
    for line in text.lines().skip(1) {
        if !line.starts_with(char::is_whitespace) {
            // "idx\tname: count ...": a 10-character name touches the colon.
            let head = line.split(':').next().unwrap_or("");
            current = head.split_whitespace().nth(1) == Some(interface);
            continue;
        }
        if !current {
            continue;
        }
        if let Some(Ok(word)) = line
            .split_whitespace()
            .next()
            .map(|h| u32::from_str_radix(h, 16))
        {
            out.push(Ipv4Addr::from(word.to_ne_bytes()));
        }
    }
    out
}

const _: () = assert!(size_of::<libc::ip_mreqn>() == 12);

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn plan_binds_the_wildcard_and_collects_groups() {
        let g = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(plan(sa("10.0.0.1:7000"), &[]).unwrap(), None);
        assert_eq!(plan(sa("0.0.0.0:7000"), &[]).unwrap(), None);
        let p = plan(sa("239.1.2.3:7000"), &[g("239.1.2.4"), g("239.1.2.3")])
            .unwrap()
            .unwrap();
        assert_eq!(p.bind, sa("0.0.0.0:7000"));
        assert_eq!(p.groups, [g("239.1.2.3"), g("239.1.2.4")]);
        let p = plan(sa("0.0.0.0:7000"), &[g("239.9.9.9")])
            .unwrap()
            .unwrap();
        assert_eq!(p.groups, [g("239.9.9.9")]);
        for (bind, groups, says) in [
            ("10.0.0.1:7000", vec![g("239.1.1.1")], "not to the unicast"),
            ("0.0.0.0:7000", vec![g("10.1.1.1")], "not an IPv4 multicast"),
            ("0.0.0.0:0", vec![g("239.1.1.1")], "not port 0"),
            ("[::]:7000", vec![g("239.1.1.1")], "IPv4 only"),
        ] {
            let e = plan(sa(bind), &groups).unwrap_err().to_string();
            assert!(e.contains(says), "{bind}: {e}");
        }
        let many: Vec<Ipv4Addr> = (0..=MAX_GROUPS as u8)
            .map(|i| Ipv4Addr::new(239, 0, 0, i))
            .collect();
        assert!(plan(sa("0.0.0.0:7000"), &many).is_err());
    }

    #[test]
    fn igmp_table_parses() {
        // /proc/net/igmp as a little-endian kernel writes it.
        let text = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
                    1\tlo        :     1      V3\n\
                    \t\t\t\t010000E0     1 0:00000000\t\t0\n\
                    7\tvsn3a     :     3      V3\n\
                    \t\t\t\t030201EF     1 0:00000000\t\t0\n\
                    \t\t\t\t040201EF     1 0:00000000\t\t0\n\
                    \t\t\t\t010000E0     1 0:00000000\t\t0\n";
        let want: Vec<Ipv4Addr> = if cfg!(target_endian = "little") {
            vec![
                "239.1.2.3".parse().unwrap(),
                "239.1.2.4".parse().unwrap(),
                "224.0.0.1".parse().unwrap(),
            ]
        } else {
            return; // the sample text is little-endian
        };
        assert_eq!(parse_igmp(text, "vsn3a"), want);
        assert_eq!(
            parse_igmp(text, "lo"),
            ["224.0.0.1".parse::<Ipv4Addr>().unwrap()]
        );
        assert!(parse_igmp(text, "eth9").is_empty());
        let long = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
                    9\tvsn123456a:     2      V3\n\
                    \t\t\t\t030201EF     1 0:00000000\t\t0\n";
        assert_eq!(parse_igmp(long, "vsn123456a"), [want[0]]);
        assert!(parse_igmp("", "lo").is_empty());
    }

    #[test]
    fn joining_on_loopback_shows_in_the_igmp_table_until_close() {
        // Loopback is multicast-capable in Linux; the membership is local only.
        let group: Ipv4Addr = "239.255.77.1".parse().unwrap();
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        join(&s, &[group], Some("lo")).unwrap();
        assert!(joined_groups("lo").unwrap().contains(&group));
        drop(s);
        assert!(!joined_groups("lo").unwrap().contains(&group));
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let e = join(&s, &[group], Some("vs-no-such-if")).unwrap_err();
        assert!(e.to_string().contains("vs-no-such-if"), "{e}");
    }
}
