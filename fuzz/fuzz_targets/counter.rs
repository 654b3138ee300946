//! Any bytes through the sequence-counter view, Repr and capture locator:
//! nothing may panic, and what parses must emit the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::{counter, FormatSpec, Locate};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = counter::Packet::new_checked(data) {
        let r = counter::Repr::parse(&p).expect("a checked view parses");
        let mut out = data.to_vec();
        r.emit(&mut counter::Packet::new_unchecked(&mut out[..]))
            .expect("the header fits");
        assert_eq!(out, data);
    }
    let spec = FormatSpec::Counter {
        streams: 3,
        payload_len: 64,
    };
    let l = spec.locator().unwrap();
    if let Ok(loc) = l.locate(data) {
        assert_eq!(loc.payload.len(), 64);
        assert!(loc.stream < 3);
    }
});
