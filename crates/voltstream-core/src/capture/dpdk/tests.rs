use super::deliver::Deliver;
use super::*;
use crate::capture::flow::Flow;
use crate::capture::Received;
use std::net::Ipv4Addr;

#[test]
fn ports_parse_as_pci_devices_or_interfaces() {
    assert_eq!(
        DpdkPort::parse("3b:00.1").unwrap(),
        DpdkPort::Device("0000:3b:00.1".into())
    );
    assert!(DpdkPort::parse("0000:3b:00.1").unwrap().is_pci());
    let v = DpdkPort::parse("net_af_packet0,iface=eth1").unwrap();
    assert_eq!(v, DpdkPort::Device("net_af_packet0,iface=eth1".into()));
    assert!(!v.is_pci());
    assert_eq!(
        DpdkPort::parse("eth1").unwrap(),
        DpdkPort::AfPacket {
            interface: "eth1".into()
        }
    );
    assert!(DpdkPort::parse(" ").is_err());
}

#[test]
fn af_packet_ring_holds_the_largest_packet_in_frames_that_tile_blocks() {
    for max_packet in [1, 1074, 1472, 8266, 9000, 65_507] {
        let r = AfPacketRing::for_config(max_packet, 64 << 20, 4096);
        assert!(r.framesz - AF_PACKET_NET_OFFSET - IP_UDP >= max_packet);
        assert!(r.framesz < 2 * af_packet_framesz_for(max_packet), "{r:?}");
        assert_eq!(r.blocksz % r.framesz, 0, "{r:?}");
        assert_eq!(r.blocksz % 4096, 0);
        assert_eq!(r.framecnt % (r.blocksz / r.framesz), 0);
        assert!(r.framecnt * r.framesz <= 64 << 20);
        check_af_packet_devargs(&r.devargs("net_af_packet0", "x"), max_packet).unwrap();
    }
    assert_eq!(af_packet_framesz_for(1074), 1184);
    assert_eq!(AfPacketRing::for_config(1074, 1 << 20, 4096).framesz, 2048);
}

#[test]
fn a_framesz_too_small_for_the_packets_is_refused() {
    let e = check_af_packet_devargs("net_af_packet0,iface=x,framesz=2048", 8266)
        .unwrap_err()
        .to_string();
    assert!(e.contains("framesz=8384") && e.contains("cut"), "{e}");
    // The driver's default framesz is 2048.
    assert!(check_af_packet_devargs("net_af_packet0,iface=x", 2000).is_err());
    check_af_packet_devargs("net_af_packet0,iface=x", 1940).unwrap();
    check_af_packet_devargs("net_af_packet0,iface=x,framesz=8192,blocksz=8192", 8000).unwrap();
    let e = check_af_packet_devargs("net_af_packet0,framesz=8384,blocksz=65536", 8266);
    assert!(e.unwrap_err().to_string().contains("multiple of framesz"));
    let e = check_af_packet_devargs("net_af_packet0,framesz=2048,blocksz=8192,framecnt=6", 10);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("framecnt must be a multiple of"));
    let e =
        check_af_packet_devargs("net_af_packet0,iface=x,qpairs=2,framesz=4096", 10).unwrap_err();
    assert!(e.to_string().contains("qpairs must be 1"));
    assert!(check_af_packet_devargs("net_af_packet0,framesz=big", 10).is_err());
    check_af_packet_devargs("0000:3b:00.0", 9000).unwrap(); // not af_packet
}

fn frame(dst: [u8; 4], proto: u8, port: u16, payload: &[u8], cut: usize) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (IP_UDP + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[9] = proto;
    ip[16..20].copy_from_slice(&dst);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&9999u16.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f.truncate(f.len() - cut);
    f
}

#[test]
fn frames_are_passed_cut_or_counted_as_others() {
    let mut d = Deliver {
        flow: Flow::new(SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 7148))),
        max_packet: 100,
        counts: DpdkCounts::default(),
    };
    let mut got = Vec::new();
    let mut sink = |r: Received<'_>| {
        got.push(match r {
            Received::Packet(p) => p.len() as i64,
            Received::Truncated => -1,
        })
    };
    let us = [10, 0, 0, 1];
    assert_eq!(
        d.frame(Some(&frame(us, 17, 7148, &[7; 100], 0)), &mut sink),
        1
    );
    assert_eq!(
        d.frame(Some(&frame(us, 17, 7148, &[7; 101], 0)), &mut sink),
        1
    );
    assert_eq!(
        d.frame(Some(&frame(us, 17, 7148, &[7; 100], 30)), &mut sink),
        1
    );
    assert_eq!(
        d.frame(Some(&frame(us, 17, 7149, &[7; 100], 30)), &mut sink),
        0
    );
    assert_eq!(
        d.frame(Some(&frame([10, 0, 0, 2], 17, 7148, &[7; 9], 0)), &mut sink),
        0
    );
    assert_eq!(d.frame(Some(&frame(us, 6, 7148, &[7; 9], 0)), &mut sink), 0);
    assert_eq!(d.frame(Some(&[0xff; 42]), &mut sink), 0); // not IPv4 (ARP-sized)
    assert_eq!(d.frame(None, &mut sink), 1);
    assert_eq!(got, vec![100, -1, -1, -1]);
    let c = d.counts;
    assert_eq!((c.frames, c.other, c.cut), (8, 4, 1));
}
