//! Any bytes through the Ethernet/IPv4/IPv6/UDP views and the frame
//! classifier the capture engines use: nothing may panic, what classifies as
//! UDP lies inside the frame and reads back through the views, and headers
//! that parse emit and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::net::{self, ethernet, ipv4, ipv6, udp};

fuzz_target!(|data: &[u8]| {
    match net::classify(data) {
        Ok(u) => {
            let start = u.payload.as_ptr() as usize - data.as_ptr() as usize;
            assert!(start >= 8 && start + u.payload.len() <= data.len());
            assert_eq!(u.src.is_ipv4(), u.dst.is_ipv4());
        }
        Err(r) => {
            let _ = r.reason.to_string();
        }
    }
    if let Ok(e) = ethernet::Packet::new_checked(data) {
        let r = ethernet::Repr::parse(&e).expect("a checked view parses");
        let mut out = vec![0u8; r.header_len()];
        r.emit(&mut ethernet::Packet::new_unchecked(&mut out[..])).expect("parsed tags emit");
        assert_eq!(ethernet::Repr::parse(&ethernet::Packet::new_checked(&out[..]).unwrap()), Ok(r));
        let l3 = e.into_payload();
        if let Ok(p) = ipv4::Packet::new_checked(l3) {
            let _ = (p.payload(), p.src(), p.ttl(), p.checksum(), ipv4::Repr::parse(&p));
        }
        if let Ok(p) = ipv6::Packet::new_checked(l3) {
            let _ = (p.payload(), p.upper(), p.src(), ipv6::Repr::parse(&p));
        }
    }
    if let Ok(p) = udp::Packet::new_checked(data) {
        let r = udp::Repr::parse(&p).expect("a checked view parses");
        let mut out = vec![0u8; udp::HEADER_LEN + r.payload_len];
        r.emit(&mut udp::Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(udp::Repr::parse(&udp::Packet::new_checked(&out[..]).unwrap()), Ok(r));
    }
});
