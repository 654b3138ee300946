//! Any bytes through the SPEAD view, Repr, digitiser reader, sample unpacker
//! and capture locator: nothing may panic, and what parses must emit and
//! parse back the same.
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
    let spec = FormatSpec::spead_digitiser(vec![0, 1, 0x42], 64, 10).unwrap();
    let l = spec.locator().unwrap();
    if let Ok(loc) = l.locate(data) {
        assert_eq!(loc.payload.len(), l.payload_len());
        assert!(data.len() <= spec.packet_len());
    }
});
