use super::*;

#[test]
fn reassembly_joins_pieces_and_flags_overflow() {
    let mut r = Reassembly::new(10);
    assert_eq!(r.push(Some(b"abcd"), false), Joined::Frame(b"abcd"));
    assert_eq!(r.push(Some(b"abc"), true), Joined::More);
    assert_eq!(r.push(Some(b"def"), true), Joined::More);
    assert_eq!(r.push(Some(b"gh"), false), Joined::Frame(b"abcdefgh"));
    // Longer than the buffer: reported once, at the last piece.
    assert_eq!(r.push(Some(b"abcdef"), true), Joined::More);
    assert_eq!(r.push(Some(b"ghijkl"), true), Joined::More);
    assert_eq!(r.push(Some(b"m"), false), Joined::TooLong);
    // An unreadable piece spoils its frame only.
    assert_eq!(r.push(None, true), Joined::More);
    assert_eq!(r.push(Some(b"x"), false), Joined::TooLong);
    assert_eq!(r.push(Some(b"ok"), false), Joined::Frame(b"ok"));
    assert_eq!(r.buf.capacity(), 10, "no reallocation");
}

/// An Ethernet + IPv4 + UDP frame to `port` carrying `payload`.
fn frame(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

#[test]
fn deliver_passes_whole_payloads_and_flags_cut_or_long_ones() {
    let run = |l2: &[u8]| {
        let mut got = Vec::new();
        let n = deliver(l2, Flow::behind_filter(7000), 100, &mut |r: Received<
            '_,
        >| {
            got.push(match r {
                Received::Packet(p) => Some(p.to_vec()),
                Received::Truncated => None,
            })
        });
        assert_eq!(n, got.len());
        got
    };
    let p: Vec<u8> = (0..100u8).collect();
    let f = frame(7000, &p);
    assert_eq!(run(&f), vec![Some(p.clone())]);
    // Cut by the XDP program (no multi-buffer): the IP length says more.
    assert_eq!(run(&f[..f.len() - 1]), vec![None]);
    // Longer than max_packet.
    assert_eq!(run(&frame(7000, &[1; 101])), vec![None]);
    // Not ours (the program passes these to the kernel; never counted here).
    assert!(run(&frame(7001, &p)).is_empty());
    let mut arp = f.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert!(run(&arp).is_empty());
}

#[test]
fn config_is_checked_and_modes_parse() {
    let mut c = XdpConfig::new("127.0.0.1:0");
    assert!(c.validate().is_ok());
    c.frame_size = 3000;
    assert!(matches!(
        XdpEngine::open(&c).err().unwrap(),
        Error::Config(_)
    ));
    c.frame_size = 2048;
    c.frames = 100;
    assert!(XdpEngine::open(&c)
        .err()
        .unwrap()
        .to_string()
        .contains("power of two"));
    assert_eq!(XdpConfig::frames_for(64 << 20, 4096), 16384);
    assert_eq!(XdpConfig::frames_for(1000, 4096), 64);
    assert_eq!(XdpConfig::frames_for(5 << 20, 4096), 2048);
    for m in ["auto", "native", "skb"] {
        assert_eq!(XdpMode::parse(m).unwrap().name(), m);
    }
    assert_eq!(XdpMode::parse("generic").unwrap(), XdpMode::Skb);
    assert!(XdpMode::parse("zc").is_err());
}

#[cfg(not(voltstream_xdp))]
#[test]
fn without_af_xdp_open_says_what_to_install() {
    let err = XdpEngine::open(&XdpConfig::new("127.0.0.1:0"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("built without AF_XDP"), "{err}");
}

#[cfg(voltstream_xdp)]
mod live {
    //! Each test runs in a thread of its own network namespace (unshare),
    //! on that namespace's loopback: the host's interfaces are never touched
    //! and the namespace disappears with the thread. Needs root.
    use super::*;
    use crate::capture::test_collect as collect;
    use crate::capture::testutil::{in_private_netns, send_all};
    use std::net::{SocketAddr, UdpSocket};

    fn small(bind: &str) -> XdpConfig {
        let mut c = XdpConfig::new(bind);
        c.frames = 256;
        c.huge_pages = false;
        c.max_packet = 6000;
        c
    }

    fn payload(len: usize, seed: u32) -> Vec<u8> {
        (0..len).map(|k| (k as u32 * 13 + seed) as u8).collect()
    }

    #[test]
    fn loopback_receives_our_port_only_in_order_and_passes_the_rest() {
        in_private_netns(|| {
            let mut e = XdpEngine::open(&small("127.0.0.1:0")).unwrap();
            let info = e.info();
            assert_eq!((info.interface.as_str(), info.mode), ("lo", "skb"));
            assert!(!info.zero_copy);
            let to = e.local_addr().unwrap();
            let other = UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut sent = Vec::new();
            for i in 0..60u32 {
                // Some beyond one 4 KiB chunk (multi-buffer), some beyond max_packet.
                let len = match i % 10 {
                    3 => 6001,
                    7 => 5000 + i as usize,
                    _ => 1 + (i as usize * 37) % 1000,
                };
                let p = payload(len, i);
                tx.send_to(&p, to).unwrap();
                tx.send_to(&p, other.local_addr().unwrap()).unwrap();
                sent.push(p);
            }
            let (got, truncated) = collect(&mut e, 60);
            assert_eq!(truncated, 6);
            let expect: Vec<Vec<u8>> = sent.iter().filter(|p| p.len() <= 6000).cloned().collect();
            assert_eq!(got, expect);
            assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
            assert_eq!(e.kernel_drops(), 0);
            let c = info.counts();
            assert_eq!((c.matched, c.cut, c.no_socket), (60, 0, 0));
            assert!(
                info.multi_buffer,
                "kernel {:?}",
                std::fs::read_to_string("/proc/sys/kernel/osrelease")
            );
            // The other port's datagrams went to the kernel stack, whole.
            assert_received(&other, &sent);
        });
    }

    /// `sock` received exactly `sent`, in order, within 2 s each.
    fn assert_received(sock: &UdpSocket, sent: &[Vec<u8>]) {
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = vec![0u8; 10000];
        for p in sent {
            let n = sock.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &p[..]);
        }
    }

    #[test]
    fn loopback_receives_ipv6_for_our_address_and_port() {
        in_private_netns(|| {
            let mut e = XdpEngine::open(&small("[::1]:0")).unwrap();
            assert_eq!(e.info().interface, "lo");
            let to = e.local_addr().unwrap();
            let other = UdpSocket::bind("[::1]:0").unwrap();
            // IPv4 to the same port is not ours: bound to ::1, not [::].
            let v4_same_port = SocketAddr::from(([127, 0, 0, 1], to.port()));
            let sent: Vec<Vec<u8>> = (0..20).map(|i| payload(100 + i * 10, i as u32)).collect();
            let tx = UdpSocket::bind("[::1]:0").unwrap();
            send_all(&tx, to, &[other.local_addr().unwrap()], &sent);
            send_all(
                &UdpSocket::bind("127.0.0.1:0").unwrap(),
                v4_same_port,
                &[],
                &sent,
            );
            assert_eq!(collect(&mut e, 20), (sent.clone(), 0));
            assert_eq!(e.kernel_drops(), 0);
            assert_eq!(e.info().counts().matched, 20);
            assert_received(&other, &sent);
        });
    }

    #[test]
    fn without_multi_buffer_long_frames_are_cut_and_reported_truncated() {
        in_private_netns(|| {
            let mut c = small("127.0.0.1:0");
            c.multi_buffer = false;
            let mut e = XdpEngine::open(&c).unwrap();
            assert!(!e.info().multi_buffer);
            let to = e.local_addr().unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let (short, long) = (payload(3000, 1), payload(5000, 2));
            for p in [&short, &long, &short] {
                tx.send_to(p, to).unwrap();
            }
            let (got, truncated) = collect(&mut e, 3);
            assert_eq!((got, truncated), (vec![short.clone(), short], 1));
            assert_eq!(e.kernel_drops(), 0);
            assert_eq!(e.info().counts().cut, 1);
        });
    }

    #[test]
    fn drops_are_counted_exactly_when_the_umem_is_full() {
        in_private_netns(|| {
            let mut c = small("127.0.0.1:0");
            c.frames = 64;
            c.batch = 64;
            let mut e = XdpEngine::open(&c).unwrap();
            let to = e.local_addr().unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let p = payload(1000, 9);
            for _ in 0..200 {
                tx.send_to(&p, to).unwrap();
            }
            // Let the kernel finish with all 200 before reading frees chunks.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while e.kernel_drops() < 136 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut got = 0u64;
            while e
                .recv_batch(Duration::from_millis(20), |r| {
                    assert_eq!(r, Received::Packet(&p[..]));
                    got += 1;
                })
                .unwrap()
                > 0
            {}
            let drops = e.kernel_drops();
            assert_eq!((got, drops), (64, 136));
            let counts = e.info().counts();
            assert_eq!(counts.rx_dropped, 136);
            assert_eq!(counts.matched, 200);
        });
    }

    #[test]
    fn clear_errors_for_a_missing_interface_queue_or_a_busy_port() {
        in_private_netns(|| {
            let mut c = small("127.0.0.1:0");
            c.interface = Some("vs-no-such-if".into());
            let err = XdpEngine::open(&c).err().unwrap();
            assert!(err.to_string().contains("vs-no-such-if"), "{err}");
            let mut c = small("127.0.0.1:0");
            c.queue = 5;
            let err = XdpEngine::open(&c).err().unwrap().to_string();
            assert!(
                err.contains("queue 5") && err.contains("receive queue"),
                "{err}"
            );
            let e = XdpEngine::open(&small("127.0.0.1:0")).unwrap();
            let addr = e.local_addr().unwrap().to_string();
            let err = XdpEngine::open(&small(&addr)).err().unwrap();
            assert!(err.to_string().contains("another capture"), "{err}");
            // A second capture on the same queue: the queue is taken.
            let err = XdpEngine::open(&small("127.0.0.1:0"))
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("already reads queue 0"), "{err}");
            drop(e);
            // Detached on drop: the interface is free again.
            XdpEngine::open(&small("127.0.0.1:0")).unwrap();
        });
    }
}
