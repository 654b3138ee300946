//! Any bytes through the CODIF view, Repr and capture locator: nothing may
//! panic, and what parses must emit and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::{codif, FormatSpec, Locate};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = codif::Packet::new_checked(data) {
        let r = codif::Repr::parse(&p).expect("a checked view parses");
        assert_eq!(p.payload().len(), r.data_len);
        let mut out = vec![0u8; r.frame_len()];
        r.emit(&mut codif::Packet::new_unchecked(&mut out[..]))
            .expect("parsed fields fit");
        let again = codif::Repr::parse(&codif::Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(again, r);
    }
    let spec = FormatSpec::Codif {
        threads: vec![0, 1, 7],
        frame_len: data.len().max(72) / 8 * 8,
        frames_per_period: 1000,
        station: None,
        group: None,
    };
    if let Ok(l) = spec.locator() {
        if let Ok(loc) = l.locate(data) {
            assert_eq!(loc.payload.len(), l.payload_len());
        }
    }
});
