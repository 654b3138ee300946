//! Any bytes through the VDIF view, Repr, sample decoder and capture locator:
//! nothing may panic, and what parses must emit and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::{vdif, FormatSpec, Locate};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = vdif::Packet::new_checked(data) {
        let r = vdif::Repr::parse(&p).expect("a checked view parses");
        let mut out = vec![0u8; r.frame_len];
        r.emit(&mut vdif::Packet::new_unchecked(&mut out[..]))
            .expect("parsed fields fit");
        let again = vdif::Repr::parse(&vdif::Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(again, r);
        let mut parts = [0f32; 4096];
        let _ = vdif::decode(p.payload(), r.bits_per_sample, &mut parts);
    }
    for legacy in [false, true] {
        let spec = FormatSpec::Vdif {
            threads: vec![0, 1, 7],
            frame_len: data.len().max(40) / 8 * 8,
            frames_per_second: 1000,
            station: None,
            legacy,
        };
        if let Ok(l) = spec.locator() {
            // Twice: the first valid frame fixes the station the second is checked against.
            for _ in 0..2 {
                if let Ok(loc) = l.locate(data) {
                    assert_eq!(loc.payload.len(), l.payload_len());
                }
            }
        }
    }
});
