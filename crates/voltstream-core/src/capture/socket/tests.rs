use super::*;
use crate::capture::test_collect as collect;
use crate::capture::testutil::{drops_add_up, second_on_same_port, send_all, varied_packets};

#[test]
fn receives_in_order_and_flags_oversized_packets() {
    let mut cfg = SocketConfig::new("127.0.0.1:0");
    cfg.max_packet = 1000;
    cfg.batch = 8;
    let mut e = SocketEngine::bind(&cfg).unwrap();
    let to = e.local_addr().unwrap();
    let sent = varied_packets(50);
    send_all(&UdpSocket::bind("127.0.0.1:0").unwrap(), to, &[], &sent);
    let (got, truncated) = collect(&mut e, 50);
    assert_eq!(truncated, 5);
    let expect: Vec<Vec<u8>> = sent.into_iter().filter(|p| p.len() <= 1000).collect();
    assert_eq!(got, expect);
    assert_eq!(e.kernel_drops(), 0);
    assert!(e.rcvbuf() > 0);
}

#[test]
fn kernel_drops_account_for_what_the_socket_lost() {
    let mut cfg = SocketConfig::new("127.0.0.1:0");
    cfg.net.queue_bytes = 1; // clamped by the kernel to its minimum: a few packets fit
    let mut e = SocketEngine::bind(&cfg).unwrap();
    drops_add_up(&mut e, &[0x3c; 1400], 300, Duration::from_millis(20));
}

#[test]
fn receives_ipv6_on_loopback() {
    let mut e = SocketEngine::bind(&SocketConfig::new("[::1]:0")).unwrap();
    let to = e.local_addr().unwrap();
    assert!(to.is_ipv6());
    assert_eq!(e.interface(), Some("lo"));
    let tx = UdpSocket::bind("[::1]:0").unwrap();
    let sent: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100 + i as usize]).collect();
    for p in &sent {
        tx.send_to(p, to).unwrap();
    }
    assert_eq!(collect(&mut e, 20), (sent, 0));
}

#[test]
fn joins_an_ipv6_group_and_receives_only_it() {
    // Linux loopback does not loop IPv6 multicast back: a veth pair in a
    // private namespace carries it instead.
    use crate::capture::host::{if_index, setsockopt};
    use crate::capture::testutil::{in_private_netns, ip};
    use std::net::{Ipv6Addr, SocketAddrV6};
    in_private_netns(|| {
        ip(&[
            "link", "add", "vs6a", "type", "veth", "peer", "name", "vs6b",
        ]);
        for (dev, addr) in [("vs6a", "fd01::1/64"), ("vs6b", "fd01::2/64")] {
            ip(&["-6", "addr", "add", addr, "dev", dev, "nodad"]);
            ip(&["link", "set", dev, "up"]);
        }
        let group: Ipv6Addr = "ff15::7:2".parse().unwrap();
        let mut cfg = SocketConfig::new(format!("[{group}]:7001"));
        cfg.net.interface = Some("vs6b".into());
        let mut e = SocketEngine::bind(&cfg).unwrap();
        assert_eq!(e.local_addr().unwrap(), "[::]:7001".parse().unwrap());
        let joined = crate::capture::joined_groups_v6("vs6b").unwrap();
        assert!(joined.contains(&group), "{joined:?}");
        let tx = UdpSocket::bind("[fd01::1]:0").unwrap();
        let out = if_index("vs6a").unwrap();
        setsockopt(
            tx.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_MULTICAST_IF,
            &out,
        )
        .unwrap();
        // The kernel adds the link's multicast route just after the link comes
        // up: until then a send is "network unreachable".
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let probe = SocketAddrV6::new("ff15::7:9".parse().unwrap(), 7001, 0, 0);
        while tx.send_to(&[], probe).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for i in 0..5u8 {
            tx.send_to(&[i; 64], SocketAddrV6::new(group, 7001, 0, 0))
                .unwrap();
            // Another group on the port: not joined, not ours.
            let other = SocketAddrV6::new("ff15::7:3".parse().unwrap(), 7001, 0, 0);
            tx.send_to(&[0xff; 64], other).unwrap();
        }
        let (got, _) = collect(&mut e, 6);
        assert_eq!(got, (0..5u8).map(|i| vec![i; 64]).collect::<Vec<_>>());
    });
}

#[test]
fn port_in_use_is_a_clear_error() {
    let (err, addr) = second_on_same_port(|a| SocketEngine::bind(&SocketConfig::new(a)));
    let msg = err.to_string();
    assert!(matches!(err, Error::Io { .. }));
    assert!(
        msg.contains(&addr) && msg.contains("another capture"),
        "{msg}"
    );
    let err = SocketEngine::bind(&SocketConfig::new("nonsense"))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
}
