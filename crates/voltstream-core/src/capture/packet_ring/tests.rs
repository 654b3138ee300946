use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use super::*;
use crate::capture::flow::{Flow, Frame};
use crate::capture::test_collect as collect;
use crate::capture::testutil::{drops_add_up, second_on_same_port, send_all, varied_packets};
use crate::capture::Engine;
use crate::wire::net::build::udp_frame;
use crate::Error;

/// An IPv4/UDP frame from 127.0.0.1:1234 to 127.0.0.1:`port`, with one VLAN
/// tag or none, its flags and fragment offset word set to `frag`.
pub(super) fn frame(port: u16, payload: &[u8], vlan: bool, frag: u16) -> Vec<u8> {
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let mut f = udp_frame(
        SocketAddr::from(([127, 0, 0, 1], 1234)),
        to,
        vlan as usize,
        payload,
    );
    let ip = if vlan { 18 } else { 14 };
    f[ip + 6..ip + 8].copy_from_slice(&frag.to_be_bytes());
    f
}

fn parse_udp(l2: &[u8], port: u16) -> Frame<'_> {
    Flow::behind_filter(port).frame(l2)
}

#[test]
fn parses_udp_with_and_without_vlan_and_rejects_every_cut() {
    let payload: Vec<u8> = (0..100u32).map(|i| (i * 7 + 3) as u8).collect();
    for vlan in [false, true] {
        let f = frame(7000, &payload, vlan, 0);
        assert_eq!(parse_udp(&f, 7000), Frame::Udp(&payload[..]));
        assert_eq!(parse_udp(&f, 7001), Frame::Other);
        for n in 0..f.len() {
            assert!(
                matches!(
                    parse_udp(&f[..n], 7000),
                    Frame::Cut | Frame::Malformed | Frame::Other
                ),
                "cut at {n}"
            );
            assert_ne!(parse_udp(&f[..n], 7000), Frame::Udp(&payload[..]));
        }
        // Ethernet padding after the IP datagram is ignored.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0; 9]);
        assert_eq!(parse_udp(&padded, 7000), Frame::Udp(&payload[..]));
        // First fragment (MF) and a UDP length that disagrees: malformed.
        assert_eq!(
            parse_udp(&frame(7000, &payload, vlan, 0x2000), 7000),
            Frame::Malformed
        );
        let mut bad = f.clone();
        let at = bad.len() - payload.len() - 4;
        bad[at] ^= 1;
        assert_eq!(parse_udp(&bad, 7000), Frame::Malformed);
    }
    let mut arp = frame(7000, &payload, false, 0);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(parse_udp(&arp, 7000), Frame::Other);
}

/// A small ring on `bind`, for packets of at most 1000 bytes.
fn small(bind: &str) -> PacketRingEngine {
    let mut cfg = PacketRingConfig::new(bind);
    cfg.max_packet = 1000;
    cfg.blocks = 4;
    cfg.block_size = 128 << 10;
    let e = PacketRingEngine::open(&cfg).unwrap();
    assert_eq!(e.interface(), "lo");
    e
}

#[test]
fn loopback_ring_receives_our_port_only_in_order() {
    let mut e = small("127.0.0.1:0");
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent = varied_packets(60);
    // The other port's packets are filtered out.
    send_all(
        &tx,
        e.local_addr().unwrap(),
        &[other.local_addr().unwrap()],
        &sent,
    );
    let (got, truncated) = collect(&mut e, 60);
    assert_eq!(truncated, 6);
    let expect: Vec<Vec<u8>> = sent.into_iter().filter(|p| p.len() <= 1000).collect();
    assert_eq!(got, expect);
    // Nothing more is pending: the other port's packets never reached us.
    assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
    assert_eq!(e.kernel_drops(), 0);
    assert_eq!(e.kernel_frames(), 60);
}

#[test]
fn loopback_ring_receives_ipv6_for_our_port() {
    let mut e = small("[::1]:0");
    let to = e.local_addr().unwrap();
    assert!(to.is_ipv6());
    let other = UdpSocket::bind("[::1]:0").unwrap().local_addr().unwrap();
    // The same port on IPv4 is not ours either: the ring is bound to ::1, not [::].
    let v4_same_port = SocketAddr::from(([127, 0, 0, 1], to.port()));
    let sent: Vec<Vec<u8>> = varied_packets(30)
        .into_iter()
        .filter(|p| p.len() <= 1000)
        .collect();
    send_all(&UdpSocket::bind("[::1]:0").unwrap(), to, &[other], &sent);
    send_all(
        &UdpSocket::bind("127.0.0.1:0").unwrap(),
        v4_same_port,
        &[],
        &sent,
    );
    assert_eq!(collect(&mut e, sent.len()), (sent.clone(), 0));
    assert_eq!(e.recv_batch(Duration::ZERO, |_| {}).unwrap(), 0);
    assert_eq!(e.kernel_drops(), 0);
    assert_eq!(e.kernel_frames(), sent.len() as u64);
}

#[test]
fn ring_drops_are_counted_when_it_overflows() {
    let mut cfg = PacketRingConfig::new("127.0.0.1:0");
    cfg.blocks = 2;
    cfg.block_size = 128 << 10;
    let mut e = PacketRingEngine::open(&cfg).unwrap();
    drops_add_up(&mut e, &[0x5a; 8000], 100, Duration::ZERO);
}

#[test]
fn port_in_use_and_unknown_interface_are_clear_errors() {
    let (err, _) = second_on_same_port(|a| PacketRingEngine::open(&PacketRingConfig::new(a)));
    assert!(err.to_string().contains("another capture"), "{err}");
    let mut cfg = PacketRingConfig::new("127.0.0.1:0");
    cfg.interface = Some("vs-no-such-if".into());
    let err = PacketRingEngine::open(&cfg).err().unwrap();
    assert!(err.to_string().contains("vs-no-such-if"), "{err}");
    cfg.block_size = 1000;
    assert!(matches!(
        PacketRingEngine::open(&cfg).err().unwrap(),
        Error::Config(_)
    ));
}
