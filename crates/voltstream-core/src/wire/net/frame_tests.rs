use super::*;
use crate::wire::net::build::udp_frame;
use crate::wire::testutil::XorShift;

fn addrs(v6: bool) -> (SocketAddr, SocketAddr) {
    if v6 {
        (
            "[fd00::2]:1234".parse().unwrap(),
            "[ff15::7]:7148".parse().unwrap(),
        )
    } else {
        (
            "10.0.0.2:1234".parse().unwrap(),
            "239.1.2.3:7148".parse().unwrap(),
        )
    }
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// A UDP frame carrying `payload` for every case the walk tells apart: IPv4
/// and IPv6, zero to two VLAN tags. `check` gets each with its case (whether
/// IPv6, the tags, source and destination).
fn for_each_frame(
    payload: &[u8],
    mut check: impl FnMut(Vec<u8>, bool, usize, SocketAddr, SocketAddr),
) {
    for v6 in [false, true] {
        let (src, dst) = addrs(v6);
        for tags in 0..=2 {
            check(udp_frame(src, dst, tags, payload), v6, tags, src, dst);
        }
    }
}

/// Where the IP header starts in a frame with `tags` tags.
fn l3(tags: usize) -> usize {
    14 + 4 * tags
}

#[test]
fn udp_over_ipv4_and_ipv6_with_zero_one_or_two_tags() {
    let p = payload(100);
    for_each_frame(&p, |f, _, _, src, dst| {
        assert_eq!(
            classify(&f),
            Ok(Udp {
                src,
                dst,
                payload: &p
            })
        );
        // Ethernet padding after the IP datagram is ignored.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 9]);
        assert_eq!(classify(&padded).map(|u| u.payload), Ok(&p[..]));
    });
}

#[test]
fn every_cut_is_rejected_and_says_how_far_it_read() {
    for_each_frame(&payload(40), |f, v6, tags, _, dst| {
        let port_at = l3(tags) + if v6 { 40 } else { 20 } + 4;
        for n in 0..f.len() {
            let r = classify(&f[..n]).expect_err("a cut frame");
            assert_eq!(r.reason, Reason::Truncated, "cut at {n}");
            let seen = match n {
                n if n < l3(tags) => Seen::Link,
                n if n < port_at => Seen::Ip.max_with(n, l3(tags), v6, dst.ip()),
                _ => Seen::Port(dst),
            };
            assert_eq!(r.seen, seen, "cut at {n}");
        }
    });
}

impl Seen {
    /// What a cut inside the IP header (or before the port) shows.
    fn max_with(self, n: usize, l3: usize, v6: bool, dst: IpAddr) -> Seen {
        if n >= l3 + if v6 { 40 } else { 20 } {
            Seen::Addr(dst)
        } else {
            self
        }
    }
}

#[test]
fn other_traffic_is_not_ip_or_not_udp() {
    let p = payload(8);
    for v6 in [false, true] {
        let (src, dst) = addrs(v6);
        let mut arp = udp_frame(src, dst, 0, &p);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(classify(&arp).unwrap_err().reason, Reason::NotIp);
        let mut tcp = udp_frame(src, dst, 0, &p);
        tcp[14 + if v6 { 6 } else { 9 }] = 6;
        assert_eq!(classify(&tcp).unwrap_err().reason, Reason::NotUdp);
        // A third tag is not walked.
        let mut three = udp_frame(src, dst, 2, &p);
        three.splice(16..16, [0x81, 0x00, 0x00, 0x09]);
        assert_eq!(
            classify(&three).unwrap_err(),
            Rejected {
                reason: Reason::NotIp,
                seen: Seen::Link
            }
        );
        // The IP version must match the ethertype.
        let mut ver = udp_frame(src, dst, 0, &p);
        ver[14] = if v6 { 0x45 } else { 0x65 };
        assert_eq!(classify(&ver).unwrap_err().reason, Reason::BadVersion);
    }
}

#[test]
fn ipv4_options_are_skipped_and_lengths_checked() {
    let p = payload(30);
    let (src, dst) = addrs(false);
    let f = udp_frame(src, dst, 1, &p);
    let ip = l3(1);
    let mut opt = f.clone();
    opt.splice(ip + 20..ip + 20, [1, 1, 1, 0, 1, 1, 1, 0]);
    opt[ip] = 0x47;
    let total = (opt.len() - ip) as u16;
    opt[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
    assert_eq!(
        classify(&opt).map(|u| (u.dst, u.payload)),
        Ok((dst, &p[..]))
    );
    // A UDP length that disagrees with the IP payload, either way.
    for delta in [1i32, -1] {
        let mut bad = f.clone();
        let len = (8 + p.len()) as i32 + delta;
        bad[ip + 24..ip + 26].copy_from_slice(&(len as u16).to_be_bytes());
        assert_eq!(
            classify(&bad).unwrap_err(),
            Rejected {
                reason: Reason::BadLength,
                seen: Seen::Port(dst)
            }
        );
    }
    // IHL below 5, or pointing past the total length.
    for ihl in [0x44u8, 0x4f] {
        let mut bad = f.clone();
        bad[ip] = ihl;
        assert_eq!(
            classify(&bad).unwrap_err().reason,
            Reason::BadLength,
            "{ihl:#x}"
        );
    }
    // An IP total length below the UDP header.
    let mut bad = f.clone();
    bad[ip + 2..ip + 4].copy_from_slice(&24u16.to_be_bytes());
    assert_eq!(classify(&bad).unwrap_err().reason, Reason::BadLength);
}

/// `f` (IPv6, no tags) with extension headers `ext` (next header, bytes)
/// inserted before its UDP header.
fn with_ext(f: &[u8], ext: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = f[..54].to_vec();
    for (i, (_, h)) in ext.iter().enumerate() {
        let mut h = h.clone();
        h[0] = ext.get(i + 1).map_or(17, |e| e.0);
        out.extend_from_slice(&h);
    }
    out.extend_from_slice(&f[54..]);
    out[14 + 6] = ext.first().map_or(17, |e| e.0);
    let plen = (out.len() - 54) as u16;
    out[18..20].copy_from_slice(&plen.to_be_bytes());
    out
}

#[test]
fn ipv6_extension_headers_are_skipped() {
    let p = payload(50);
    let (src, dst) = addrs(true);
    let f = udp_frame(src, dst, 0, &p);
    let hop = (0u8, vec![0, 0, 1, 4, 0, 0, 0, 0]);
    let mut dopt = vec![0u8; 24];
    dopt[1] = 2;
    let routing = (43u8, vec![0, 0, 0, 0, 0, 0, 0, 0]);
    let g = with_ext(&f, &[hop.clone(), routing, (60, dopt)]);
    assert_eq!(
        classify(&g),
        Ok(Udp {
            src,
            dst,
            payload: &p
        })
    );
    for n in 0..g.len() {
        assert!(classify(&g[..n]).is_err(), "cut at {n}");
    }
    // Extension headers longer than the payload length says.
    let mut short = g.clone();
    short[18..20].copy_from_slice(&20u16.to_be_bytes());
    assert_eq!(classify(&short).unwrap_err().reason, Reason::BadLength);
    // A header after them that is not UDP.
    let mut icmp = with_ext(&f, &[hop]);
    icmp[54] = 58;
    assert_eq!(classify(&icmp).unwrap_err().reason, Reason::NotUdp);
}

#[test]
fn fragments_are_their_own_reason() {
    let p = payload(24);
    let (src, dst) = addrs(false);
    let ip = l3(0);
    for (word, seen) in [
        (0x2000u16, Seen::Port(dst)),
        (0x0003, Seen::Addr(dst.ip())),
        (0x2003, Seen::Addr(dst.ip())),
    ] {
        let mut f = udp_frame(src, dst, 0, &p);
        f[ip + 6..ip + 8].copy_from_slice(&word.to_be_bytes());
        assert_eq!(
            classify(&f).unwrap_err(),
            Rejected {
                reason: Reason::Fragment,
                seen
            }
        );
    }
    // DF alone is a whole datagram.
    let (src6, dst6) = addrs(true);
    let f = udp_frame(src6, dst6, 0, &p);
    for (word, seen) in [
        (0x0001u16, Seen::Port(dst6)),
        (0x0000, Seen::Port(dst6)),
        (0x0010, Seen::Addr(dst6.ip())),
    ] {
        let mut frag = vec![0u8; 8];
        frag[2..4].copy_from_slice(&word.to_be_bytes());
        let g = with_ext(&f, &[(44, frag)]);
        assert_eq!(
            classify(&g).unwrap_err(),
            Rejected {
                reason: Reason::Fragment,
                seen
            }
        );
    }
}

#[test]
fn random_and_mutated_frames_never_panic() {
    let mut rng = XorShift(0x5eed_0e7e);
    let valid: Vec<Vec<u8>> = [false, true]
        .iter()
        .flat_map(|&v6| {
            let (src, dst) = addrs(v6);
            (0..=2).map(move |tags| udp_frame(src, dst, tags, &payload(40)))
        })
        .collect();
    let mut bytes = Vec::new();
    let mut ok = 0;
    for i in 0..200_000 {
        rng.fill_like(&mut bytes, &valid[i % valid.len()], i);
        if let Ok(u) = classify(&bytes) {
            ok += 1;
            // The payload lies inside the frame, at its end or before padding.
            let start = u.payload.as_ptr() as usize - bytes.as_ptr() as usize;
            assert!(start + u.payload.len() <= bytes.len());
        }
        // Every view on every suffix: accessors never panic.
        for at in [0, 14, 18, 22, 34, 54] {
            let b = bytes.get(at..).unwrap_or(&[]);
            let _ = ethernet::Packet::new_unchecked(b).payload();
            let v4 = ipv4::Packet::new_unchecked(b);
            let _ = (v4.payload(), v4.payload_read(), v4.dst(), v4.is_fragment());
            let v6 = ipv6::Packet::new_unchecked(b);
            let _ = (v6.payload(), v6.upper(), v6.dst());
            let _ = udp::Packet::new_unchecked(b).payload();
        }
    }
    assert!(ok > 10_000, "only {ok} frames parsed");
}
