//! Tests of the SPEAD views, heap reading, locator and sample unpacking.

use super::*;
use crate::wire::testutil::XorShift;
use crate::wire::WireError;

fn dig_repr(timestamp: u64, id: u64, len: u64) -> Repr {
    Repr::digitiser(timestamp, 4096, id, len)
}

fn packet(r: &Repr) -> Vec<u8> {
    let mut b: Vec<u8> = (0..r.packet_len()).map(|i| (i * 7) as u8).collect();
    r.emit(&mut Packet::new_unchecked(&mut b[..])).unwrap();
    b
}

#[test]
fn round_trip_and_known_bytes() {
    let r = dig_repr(0x0000_1234_5678_9000, 3, 5120);
    let b = packet(&r);
    assert_eq!(b.len(), 8 + 8 * 8 + 5120);
    // Independent expectation: the header and two pointers spelled out.
    assert_eq!(&b[..8], &[0x53, 4, 2, 6, 0, 0, 0, 8]);
    let heap_cnt = 0x8000_0000_0000_0000u64 | (1 << 48) | (0x1234_5678_9000 / 4096);
    assert_eq!(&b[8..16], &heap_cnt.to_be_bytes());
    let ts = 0x8000_0000_0000_0000u64 | (0x1600 << 48) | 0x1234_5678_9000;
    assert_eq!(&b[40..48], &ts.to_be_bytes());
    let raw = 0x3300u64 << 48; // an address item: immediate bit clear
    assert_eq!(&b[64..72], &raw.to_be_bytes());
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(Repr::parse(&p).unwrap(), r);
    assert_eq!(p.payload(), &b[72..]);
    assert_eq!(p.find(DIG_ID), Some(Item::immediate(DIG_ID, 3)));
    assert_eq!((p.heap_size(), p.heap_offset()), (Some(5120), 0));
    // Other flavours and a multi-packet heap's middle packet.
    for bits in [40u8, 56, 16] {
        let r = Repr {
            heap_address_bits: bits,
            heap_cnt: 77,
            heap_size: Some(1000),
            heap_offset: 600,
            payload_len: 400,
            items: vec![Item::address(0x20, 5)],
        };
        let b = packet(&r);
        assert_eq!(b[2] as u32 + b[3] as u32, 8);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(p.payload().len(), 400);
    }
    // Heap size is optional.
    let r = Repr {
        heap_size: None,
        ..dig_repr(0, 0, 16)
    };
    assert_eq!(
        Repr::parse(&Packet::new_checked(&packet(&r)[..]).unwrap()),
        Ok(r)
    );
}

#[test]
fn malformed_and_truncated() {
    let r = dig_repr(8192, 1, 64);
    let b = packet(&r);
    let err = |v: &[u8]| Packet::new_checked(v).err();
    for n in [0, 7, 8, 71, b.len() - 1] {
        assert_eq!(err(&b[..n]), Some(WireError::Truncated), "length {n}");
    }
    let set = |i: usize, v: u8| {
        let mut c = b.clone();
        c[i] = v;
        c
    };
    assert_eq!(err(&set(0, 0x54)), Some(WireError::Malformed)); // magic
    assert_eq!(err(&set(1, 3)), Some(WireError::Malformed)); // version
    assert_eq!(err(&set(2, 3)), Some(WireError::Malformed)); // 72-bit pointers
    assert_eq!(err(&set(3, 8)), Some(WireError::Malformed)); // no id bits
    let mut zero_addr = set(3, 0);
    zero_addr[2] = 8;
    assert_eq!(err(&zero_addr), Some(WireError::Malformed));
    // Item count beyond the buffer: truncated.
    assert_eq!(err(&set(6, 1)), Some(WireError::Truncated));
    // Standard items missing, repeated, or not immediate.
    let with = |items: Vec<Item>| {
        let mut c = b.clone();
        c[7] = items.len() as u8;
        for (i, it) in items.iter().enumerate() {
            let raw = it.encode(48).unwrap().to_be_bytes();
            c[8 + 8 * i..16 + 8 * i].copy_from_slice(&raw);
        }
        c
    };
    let std4 = [
        Item::immediate(HEAP_CNT, 1),
        Item::immediate(HEAP_SIZE, 64),
        Item::immediate(HEAP_OFFSET, 0),
        Item::immediate(PAYLOAD_LEN, 16),
    ];
    assert!(err(&with(std4.to_vec())).is_none());
    for drop in [0, 2, 3] {
        let mut v = std4.to_vec();
        v.remove(drop);
        assert_eq!(err(&with(v)), Some(WireError::Malformed), "without {drop}");
    }
    let mut v = std4.to_vec();
    v.remove(1);
    assert!(err(&with(v)).is_none(), "heap size is optional");
    let mut v = std4.to_vec();
    v[0] = Item::immediate(HEAP_SIZE, 64);
    assert_eq!(err(&with(v)), Some(WireError::Malformed)); // repeated
    let mut v = std4.to_vec();
    v[2].immediate = false;
    assert_eq!(err(&with(v)), Some(WireError::Malformed)); // offset as address
                                                           // Slice outside the heap.
    let mut v = std4.to_vec();
    v[2] = Item::immediate(HEAP_OFFSET, 49);
    assert_eq!(err(&with(v)), Some(WireError::Malformed));
    let mut v = std4.to_vec();
    v[3] = Item::immediate(PAYLOAD_LEN, 10_000);
    v[1] = Item::immediate(HEAP_SIZE, 20_000);
    assert_eq!(err(&with(v)), Some(WireError::Truncated));
    // Emit refuses what cannot be encoded or would not parse.
    let bad = [
        Repr {
            heap_address_bits: 44,
            ..r.clone()
        },
        Repr {
            heap_address_bits: 64,
            ..r.clone()
        },
        Repr {
            heap_cnt: 1 << 48,
            ..r.clone()
        },
        Repr {
            heap_offset: 1,
            ..r.clone()
        },
        Repr {
            items: vec![Item::immediate(1 << 15, 0)],
            ..r.clone()
        },
        Repr {
            items: vec![Item::immediate(HEAP_CNT, 0)],
            ..r.clone()
        },
    ];
    for x in bad {
        let mut out = vec![0u8; 4096];
        assert_eq!(
            x.emit(&mut Packet::new_unchecked(&mut out[..])),
            Err(WireError::Malformed),
            "{x:?}"
        );
    }
    let mut short = vec![0u8; r.packet_len() - 1];
    assert_eq!(
        r.emit(&mut Packet::new_unchecked(&mut short[..])),
        Err(WireError::Truncated)
    );
}

#[test]
fn digitiser_heaps() {
    let b = packet(&dig_repr(4096 * 9, 0x42, 5120));
    let d = digitiser(&b, 48, DIG_TIMESTAMP, DIG_ID).unwrap();
    assert_eq!((d.timestamp, d.digitiser_id), (4096 * 9, 0x42));
    assert_eq!(d.payload, &b[72..]);
    assert_eq!(
        digitiser(&b, 40, DIG_TIMESTAMP, DIG_ID),
        Err(WireError::Malformed)
    );
    assert_eq!(digitiser(&b, 48, 0x1601, DIG_ID), Err(WireError::Malformed));
    let mut long = b.clone();
    long.push(0);
    assert_eq!(
        digitiser(&long, 48, DIG_TIMESTAMP, DIG_ID),
        Err(WireError::Malformed)
    );
    let multi = Repr {
        heap_size: Some(10_240),
        ..dig_repr(0, 1, 5120)
    };
    let m = packet(&multi);
    assert!(
        Packet::new_checked(&m[..]).is_ok(),
        "valid multi-packet heap"
    );
    assert_eq!(
        digitiser(&m, 48, DIG_TIMESTAMP, DIG_ID),
        Err(WireError::Malformed)
    );
    let mut as_addr = dig_repr(0, 1, 64);
    as_addr.items[0].immediate = false;
    let a = packet(&as_addr);
    assert_eq!(
        digitiser(&a, 48, DIG_TIMESTAMP, DIG_ID),
        Err(WireError::Malformed)
    );
}

#[test]
fn heap_packets_of_several_packet_heaps() {
    fn read(b: &[u8]) -> Result<HeapPacket<'_>, WireError> {
        heap_packet(b, 48, DIG_TIMESTAMP, DIG_ID)
    }
    // The middle packet of a heap, items of the first packet absent.
    let middle = Repr {
        heap_address_bits: 48,
        heap_cnt: 12,
        heap_size: Some(3000),
        heap_offset: 1000,
        payload_len: 1000,
        items: vec![],
    };
    let b = packet(&middle);
    let h = read(&b).unwrap();
    assert_eq!(
        (
            h.heap_cnt,
            h.heap_size,
            h.heap_offset,
            h.timestamp,
            h.stream_id
        ),
        (12, Some(3000), 1000, None, None)
    );
    assert_eq!(h.payload, &b[40..]);
    // The first packet with the items; the first of a repeated item counts.
    let first = Repr {
        heap_offset: 0,
        items: vec![
            Item::immediate(DIG_TIMESTAMP, 77),
            Item::immediate(DIG_ID, 3),
            Item::immediate(DIG_ID, 4),
        ],
        ..middle.clone()
    };
    let fb = packet(&first);
    let h = read(&fb).unwrap();
    assert_eq!((h.timestamp, h.stream_id), (Some(77), Some(3)));
    let mut as_addr = first.clone();
    as_addr.items[1].immediate = false;
    assert_eq!(read(&packet(&as_addr)), Err(WireError::Malformed));
    let mut long = b.clone();
    long.push(0);
    assert_eq!(read(&long), Err(WireError::Malformed));
    assert_eq!(read(&b[..b.len() - 1]), Err(WireError::Truncated));
    assert_eq!(
        heap_packet(&b, 40, DIG_TIMESTAMP, DIG_ID),
        Err(WireError::Malformed)
    );
    let crowded = Repr {
        items: vec![Item::immediate(0x20, 0); MAX_DIGITISER_ITEMS - 3],
        ..middle
    };
    assert_eq!(read(&packet(&crowded)), Err(WireError::Malformed));
}

/// Packs with a bit-by-bit reference, independent of `unpack_signed`.
fn pack_reference(samples: &[i16], bits: u8) -> Vec<u8> {
    let mut out = vec![0u8; (samples.len() * bits as usize).div_ceil(8)];
    let mut pos = 0;
    for &s in samples {
        for k in (0..bits).rev() {
            if (s as u16 >> k) & 1 == 1 {
                out[pos / 8] |= 0x80 >> (pos % 8);
            }
            pos += 1;
        }
    }
    out
}

#[test]
fn unpack_every_width() {
    // 10-bit known bytes: -1, 0, 511, -512 -> 0x3ff 0x000 0x1ff 0x200.
    let mut out = [0i16; 4];
    unpack_signed(&[0xff, 0xc0, 0x07, 0xfe, 0x00], 10, &mut out).unwrap();
    assert_eq!(out, [-1, 0, 511, -512]);
    let mut rng = XorShift(0x005e_ed0f_5eed);
    for bits in 2..=16u8 {
        let n = 64 + rng.below(64);
        let lo = -(1i32 << (bits - 1));
        let samples: Vec<i16> = (0..n)
            .map(|_| (lo + rng.below(1 << bits) as i32) as i16)
            .collect();
        let packed = pack_reference(&samples, bits);
        let mut got = vec![0x5555i16; n];
        unpack_signed(&packed, bits, &mut got).unwrap();
        assert_eq!(got, samples, "{bits} bits");
        assert_eq!(
            unpack_signed(&packed[..packed.len() - 1], bits, &mut got),
            Err(WireError::Truncated)
        );
    }
    assert_eq!(
        unpack_signed(&[0; 8], 1, &mut out),
        Err(WireError::Malformed)
    );
    assert_eq!(
        unpack_signed(&[0; 8], 17, &mut out),
        Err(WireError::Malformed)
    );
    assert_eq!(packed_len(4096, 10), Some(5120));
    assert_eq!(packed_len(3, 10), None);
}

#[test]
fn no_panic_on_random_input() {
    let mut rng = XorShift(0x0bad_5eed_d00d_f00d);
    let valid = packet(&dig_repr(4096 * 3, 2, 96));
    let mut accepted = 0;
    let mut out = [0i16; 128];
    for (i, bytes) in rng.cases(&valid, 200_000) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            accepted += 1;
            let r = Repr::parse(&p).unwrap();
            assert_eq!(p.payload().len() as u64, r.payload_len);
            let mut again = vec![0u8; r.packet_len()];
            r.emit(&mut Packet::new_unchecked(&mut again[..])).unwrap();
            let q = Packet::new_checked(&again[..]).unwrap();
            assert_eq!(Repr::parse(&q).unwrap(), r);
            let _ = unpack_signed(p.payload(), 2 + (i % 15) as u8, &mut out);
        }
        if let Ok(d) = digitiser(&bytes, 48, DIG_TIMESTAMP, DIG_ID) {
            let header = Packet::new_unchecked(&bytes[..]).header_len();
            assert_eq!(d.payload.len() + header, bytes.len());
            assert_eq!(
                d.payload.len() as u64,
                Packet::new_unchecked(&bytes[..]).payload_len()
            );
        }
        if let Ok(h) = heap_packet(&bytes, 48, DIG_TIMESTAMP, DIG_ID) {
            let header = Packet::new_unchecked(&bytes[..]).header_len();
            assert_eq!(h.payload.len() + header, bytes.len());
        }
        let p = Packet::new_unchecked(&bytes[..]);
        let _ = (p.payload(), p.heap_cnt(), p.heap_size(), p.item(usize::MAX));
    }
    assert!(accepted > 1000, "mutations should keep many packets valid");
}
