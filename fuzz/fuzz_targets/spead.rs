//! Any bytes through the SPEAD view, Repr, heap-packet and digitiser readers,
//! sample unpacker and capture locators (single-packet digitiser heaps, and
//! heaps of several packets under both heap-index rules): nothing may panic,
//! and what parses must emit and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::{spead, FormatSpec, Locate};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = spead::Packet::new_checked(data) {
        let r = spead::Repr::parse(&p).expect("a checked view parses");
        assert_eq!(p.payload().len() as u64, r.payload_len);
        let mut out = vec![0u8; r.packet_len()];
        r.emit(&mut spead::Packet::new_unchecked(&mut out[..]))
            .expect("parsed fields fit");
        let again = spead::Repr::parse(&spead::Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(again, r);
        let mut samples = [0i16; 1024];
        let bits = data.first().map_or(10, |b| b % 18);
        let _ = spead::unpack_signed(p.payload(), bits, &mut samples);
    }
    let _ = spead::digitiser(data, 48, spead::DIG_TIMESTAMP, spead::DIG_ID);
    if let Ok(h) = spead::heap_packet(data, 48, spead::DIG_TIMESTAMP, spead::DIG_ID) {
        assert_eq!(
            h.payload.len() as u64,
            spead::Packet::new_unchecked(data).payload_len()
        );
    }
    let specs = [
        FormatSpec::spead_digitiser(vec![0, 1, 0x42], 64, 10).unwrap(),
        FormatSpec::spead_heaps(vec![0, 2], 64, 96, 3, spead::HeapIndex::Timestamp).unwrap(),
        FormatSpec::spead_heaps(vec![0, 2], 64, 96, 3, spead::HeapIndex::HeapCnt { step: 3 })
            .unwrap(),
    ];
    for spec in specs {
        let l = spec.locator().unwrap();
        if let Ok(loc) = l.locate(data) {
            assert_eq!(loc.payload.len(), l.payload_len());
            assert!(loc.stream < l.streams());
            assert!(data.len() <= spec.packet_len());
        }
    }
});
