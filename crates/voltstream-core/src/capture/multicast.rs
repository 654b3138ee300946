//! Multicast, IPv4 and IPv6: which address a capture binds when it receives
//! groups, and the join (IGMP for IPv4, MLD for IPv6).
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
//! IPv6 groups work the same way: the socket binds `[::]:port`, joins with
//! `IPV6_ADD_MEMBERSHIP` (the kernel sends the MLD report) and switches
//! `IPV6_MULTICAST_ALL` off. One capture's groups are all of one family, that of
//! its bind address (a socket bound to `0.0.0.0` never receives IPv6).
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
//! the ring or the AF_XDP socket: they are not ours and are not counted. Their
//! filters hold IPv4 groups only: IPv6 groups are for the socket engine.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use super::host::{if_index, setsockopt};
use crate::{Error, Result};

/// Most groups one capture joins: Linux's default `net.ipv4.igmp_max_memberships`
/// is 20 per socket, and the AF_XDP program has room for this many.
pub const MAX_GROUPS: usize = 16;

/// What a capture that receives multicast binds and joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastPlan {
    /// `0.0.0.0:port`, or `[::]:port` for IPv6 groups.
    pub bind: SocketAddr,
    /// The groups, each once, in the order given; all of the bind's family.
    pub groups: Vec<IpAddr>,
}

impl MulticastPlan {
    /// The IPv4 groups (what the packet-ring and AF_XDP filters can hold).
    pub fn groups_v4(&self) -> Vec<Ipv4Addr> {
        self.groups
            .iter()
            .filter_map(|g| match g {
                IpAddr::V4(a) => Some(*a),
                IpAddr::V6(_) => None,
            })
            .collect()
    }
}

/// Decides the bind address and groups of a capture asked to bind `bind` and
/// join `groups`: `None` for a plain unicast capture. A group as the bind host
/// is one more group; with groups the host must be the unspecified address
/// (`0.0.0.0`, `[::]`) or a group (a socket bound to a unicast address never
/// receives multicast), and every group must be of the bind's family.
pub fn plan(bind: SocketAddr, groups: &[Ipv4Addr]) -> Result<Option<MulticastPlan>> {
    let groups: Vec<IpAddr> = groups.iter().map(|&g| g.into()).collect();
    plan_ip(bind, &groups)
}

/// [`plan`] for groups of either family (IPv6 groups with an IPv6 bind).
pub fn plan_ip(bind: SocketAddr, groups: &[IpAddr]) -> Result<Option<MulticastPlan>> {
    let host = bind.ip();
    let port = bind.port();
    let mut all = Vec::new();
    if host.is_multicast() {
        all.push(host);
    } else if groups.is_empty() {
        return Ok(None);
    } else if !host.is_unspecified() {
        return Err(Error::Config(format!(
            "with multicast groups bind to {any} or to a group address, not to the unicast \
             address {host}: its socket would never receive them",
            any = SocketAddr::new(unspecified(host), port)
        )));
    }
    for &g in groups {
        if g.is_ipv4() != host.is_ipv4() {
            return Err(Error::Config(format!(
                "the groups of one capture are IPv4 only or IPv6 only, as its bind address: \
                 bind to 0.0.0.0:{port} for IPv4 groups, [::]:{port} for IPv6 groups ({g} with {host})"
            )));
        }
        if !g.is_multicast() {
            return Err(Error::Config(match g {
                IpAddr::V4(_) => {
                    format!("{g} is not an IPv4 multicast group (224.0.0.0 to 239.255.255.255)")
                }
                IpAddr::V6(_) => format!("{g} is not an IPv6 multicast group (ff00::/8)"),
            }));
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
    if port == 0 {
        return Err(Error::Config(
            "a multicast capture needs the port the groups are sent to (not port 0)".into(),
        ));
    }
    Ok(Some(MulticastPlan {
        bind: SocketAddr::new(unspecified(host), port),
        groups: all,
    }))
}

fn unspecified(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// `IPV6_MULTICAST_ALL` (linux/in6.h), which the libc crate does not name.
const IPV6_MULTICAST_ALL: libc::c_int = 29;

/// Joins `groups` on `sock` through `interface` (`None`: the interface the
/// routing table picks for each group), with `IP_MULTICAST_ALL` (or
/// `IPV6_MULTICAST_ALL`) off.
pub fn join(sock: &UdpSocket, groups: &[IpAddr], interface: Option<&str>) -> Result<()> {
    let fd = sock.as_raw_fd();
    let ifindex = interface.map(if_index).transpose()?.unwrap_or(0);
    let v6 = groups.iter().any(IpAddr::is_ipv6);
    let (level, all) = if v6 {
        (libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL)
    } else {
        (libc::IPPROTO_IP, libc::IP_MULTICAST_ALL)
    };
    setsockopt(fd, level, all, &0 as &libc::c_int).map_err(|e| {
        Error::io(
            "cannot switch IP_MULTICAST_ALL off on the capture socket",
            e,
        )
    })?;
    for g in groups {
        let r = match g {
            IpAddr::V4(g) => {
                let req = libc::ip_mreqn {
                    imr_multiaddr: libc::in_addr {
                        s_addr: u32::from(*g).to_be(),
                    },
                    imr_address: libc::in_addr { s_addr: 0 },
                    imr_ifindex: ifindex,
                };
                setsockopt(fd, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &req)
            }
            IpAddr::V6(g) => {
                let req = libc::ipv6_mreq {
                    ipv6mr_multiaddr: libc::in6_addr {
                        s6_addr: g.octets(),
                    },
                    ipv6mr_interface: ifindex as libc::c_uint,
                };
                setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, &req)
            }
        };
        r.map_err(|e| {
            let on = interface.map_or(String::new(), |i| format!(" on {i}"));
            let hint = match e.raw_os_error() {
                Some(libc::ENODEV) => {
                    " (no route for the group: pass the interface to receive it on)"
                }
                Some(libc::ENOBUFS) => {
                    " (too many memberships: raise sysctl net.ipv4.igmp_max_memberships \
                     or net.ipv6.mld_max_msf)"
                }
                _ => "",
            };
            Error::io(format!("cannot join multicast group {g}{on}{hint}"), e)
        })?;
    }
    Ok(())
}

/// The IPv6 groups joined on `interface`, as `/proc/net/igmp6` of the calling
/// thread's network namespace lists them (for tests and diagnostics).
pub fn joined_groups_v6(interface: &str) -> io::Result<Vec<Ipv6Addr>> {
    // thread-self: the namespace of the calling thread (tests move threads).
    let text = std::fs::read_to_string("/proc/thread-self/net/igmp6")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex = (f.get(1) == Some(&interface)).then(|| f.get(2))??;
            u128::from_str_radix(hex, 16).ok().map(Ipv6Addr::from)
        })
        .collect())
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
    use crate::capture::testutil::sa;

    #[test]
    fn plan_binds_the_wildcard_and_collects_groups() {
        let g = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(plan(sa("10.0.0.1:7000"), &[]).unwrap(), None);
        assert_eq!(plan(sa("0.0.0.0:7000"), &[]).unwrap(), None);
        let p = plan(sa("239.1.2.3:7000"), &[g("239.1.2.4"), g("239.1.2.3")])
            .unwrap()
            .unwrap();
        assert_eq!(p.bind, sa("0.0.0.0:7000"));
        assert_eq!(p.groups, [g("239.1.2.3"), g("239.1.2.4")].map(IpAddr::V4));
        let p = plan(sa("0.0.0.0:7000"), &[g("239.9.9.9")])
            .unwrap()
            .unwrap();
        assert_eq!(p.groups, [IpAddr::V4(g("239.9.9.9"))]);
        let g6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let p = plan_ip(sa("[ff15::7]:7000"), &[g6("ff15::8")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.bind, p.groups),
            (sa("[::]:7000"), vec![g6("ff15::7"), g6("ff15::8")])
        );
        for (bind, group, says) in [
            ("[::]:7000", "fd00::1", "not an IPv6 multicast"),
            ("0.0.0.0:7000", "ff15::1", "IPv6 only"),
            ("[fd00::1]:7000", "ff15::1", "not to the unicast"),
        ] {
            let e = plan_ip(sa(bind), &[g6(group)]).unwrap_err().to_string();
            assert!(e.contains(says), "{bind}: {e}");
        }
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
    fn joining_on_loopback_shows_in_the_igmp_and_mld_tables_until_close() {
        // Loopback is multicast-capable in Linux; the membership is local only.
        for (bind, group) in [("0.0.0.0:0", "239.255.77.1"), ("[::]:0", "ff15::7:1")] {
            let group: IpAddr = group.parse().unwrap();
            let joined = || match group {
                IpAddr::V4(g) => joined_groups("lo").unwrap().contains(&g),
                IpAddr::V6(g) => joined_groups_v6("lo").unwrap().contains(&g),
            };
            let s = UdpSocket::bind(bind).unwrap();
            join(&s, &[group], Some("lo")).unwrap();
            assert!(joined(), "{group}");
            drop(s);
            assert!(!joined(), "{group}");
        }
        let group: Ipv4Addr = "239.255.77.1".parse().unwrap();
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let e = join(&s, &[group.into()], Some("vs-no-such-if")).unwrap_err();
        assert!(e.to_string().contains("vs-no-such-if"), "{e}");
    }
}
