//! Any bytes through a declarative layout, and any layout table over those
//! bytes: validation and locate may refuse, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voltstream_core::wire::layout::{Check, Endian, Field, Layout};
use voltstream_core::wire::{FormatSpec, Locate};

fn field(b: &[u8]) -> Field {
    let g = |i: usize| b.get(i).copied().unwrap_or(0);
    Field {
        offset: g(0) as usize % 40,
        bytes: g(1) % 10,
        endian: if g(2) & 1 == 0 {
            Endian::Big
        } else {
            Endian::Little
        },
        shift: g(3) % 72,
        bits: g(4) % 72,
    }
}

fuzz_target!(|data: &[u8]| {
    // The first 24 bytes describe a layout; the rest is the packet.
    let (table, packet) = data.split_at(data.len().min(24));
    let g = |i: usize| table.get(i).copied().unwrap_or(0);
    let spec = FormatSpec::Layout(Layout {
        packet_len: packet.len(),
        index: field(&table[..table.len().min(5)]),
        index_step: g(5) as u64,
        stream: (g(6) & 1 == 1).then(|| field(table.get(7..12).unwrap_or(&[]))),
        stream_ids: if g(6) & 1 == 1 {
            vec![0, g(12) as u64]
        } else {
            vec![]
        },
        checks: vec![Check {
            field: field(table.get(13..18).unwrap_or(&[])),
            value: g(18) as u64,
            foreign: g(19) & 1 == 1,
        }],
        payload_offset: g(20) as usize % 48,
        payload_len: g(21) as usize % 48,
    });
    if let Ok(l) = spec.locator() {
        if let Ok(loc) = l.locate(packet) {
            assert_eq!(loc.payload.len(), l.payload_len());
            assert!(loc.stream < l.streams());
        }
    }
    let f = field(table);
    let _ = (f.read(packet), f.max());
});
