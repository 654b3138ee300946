//! Any bytes through the YNAO frame view, Repr and capture locator: nothing
//! may panic, and what parses must emit and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::{ynao, FormatSpec, Locate};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = ynao::Packet::new_checked(data) {
        let r = ynao::Repr::parse(&p).expect("a checked view parses");
        let mut out = vec![0u8; ynao::FRAME_LEN];
        r.emit(&mut ynao::Packet::new_unchecked(&mut out[..]))
            .expect("parsed fields fit");
        let again = ynao::Repr::parse(&ynao::Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(again, r);
    }
    for subband in [None, Some(0u8)] {
        let l = FormatSpec::Ynao { subband }.locator().unwrap();
        if let Ok(loc) = l.locate(data) {
            assert_eq!(loc.payload.len(), l.payload_len());
        }
    }
});
