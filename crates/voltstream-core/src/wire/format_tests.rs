//! Tests of the format descriptions (validation messages) and of every
//! format's locator, on packets built with the wire views.

use super::*;
use crate::wire::{Locate, WireError};

fn vdif_spec() -> FormatSpec {
    FormatSpec::Vdif {
        threads: vec![5, 2],
        frame_len: 1056,
        frames_per_second: 1000,
        station: Some(0x4142),
        legacy: false,
    }
}

fn vdif_frame(thread: u16, seconds: u32, frame: u32) -> Vec<u8> {
    let r = vdif::Repr {
        invalid: false,
        legacy: false,
        seconds,
        ref_epoch: 48,
        frame,
        version: 1,
        log2_nchan: 3,
        frame_len: 1056,
        complex: true,
        bits_per_sample: 8,
        thread,
        station: 0x4142,
        edv: 0,
    };
    let mut b = vec![0u8; 1056];
    for (i, x) in b.iter_mut().enumerate() {
        *x = i as u8;
    }
    r.emit(&mut vdif::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    b
}

#[test]
fn vdif_locate() {
    let l = vdif_spec().locator().unwrap();
    assert_eq!((l.streams(), l.payload_len()), (2, 1024));
    let f = vdif_frame(2, 7, 999);
    let loc = l.locate(&f).unwrap();
    assert_eq!((loc.stream, loc.index), (1, 7 * 1000 + 999));
    assert_eq!(loc.payload, &f[32..]);
    assert_eq!(l.locate(&vdif_frame(5, 0, 3)).unwrap().stream, 0);
    assert_eq!(l.locate(&vdif_frame(3, 0, 3)), Err(WireError::Foreign));
    assert_eq!(l.locate(&vdif_frame(2, 0, 1000)), Err(WireError::Malformed));
    assert_eq!(l.locate(&f[..1055]), Err(WireError::Truncated));
    let mut long = f.clone();
    long.push(0);
    assert_eq!(l.locate(&long), Err(WireError::Malformed));
    let mut inv = f.clone();
    inv[3] |= 0x80;
    assert_eq!(l.locate(&inv), Err(WireError::Invalid { stream: 1 }));
    assert_eq!(l.station(), Some(0x4142));
    let mut stn = f.clone();
    stn[12] ^= 1;
    assert_eq!(l.locate(&stn), Err(WireError::Foreign));
    let mut legacy = f.clone();
    legacy[3] |= 0x40;
    assert_eq!(l.locate(&legacy), Err(WireError::Malformed));
}

#[test]
fn vdif_legacy_headers_when_configured() {
    let spec = FormatSpec::Vdif {
        threads: vec![0],
        frame_len: 1040,
        frames_per_second: 1000,
        station: None,
        legacy: true,
    };
    let l = spec.locator().unwrap();
    assert_eq!(l.payload_len(), 1024);
    let r = vdif::Repr {
        invalid: false,
        legacy: true,
        seconds: 3,
        ref_epoch: 48,
        frame: 5,
        version: 1,
        log2_nchan: 0,
        frame_len: 1040,
        complex: false,
        bits_per_sample: 2,
        thread: 0,
        station: 7,
        edv: 0,
    };
    let mut b: Vec<u8> = (0..1040).map(|i| i as u8).collect();
    r.emit(&mut vdif::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    let loc = l.locate(&b).unwrap();
    assert_eq!((loc.index, loc.payload), (3005, &b[16..]));
    // A standard header in a legacy capture (or the reverse) is malformed.
    let standard = vdif_spec().locator().unwrap();
    assert_eq!(standard.locate(&b), Err(WireError::Malformed));
    assert_eq!(l.locate(&vdif_frame(5, 3, 5)), Err(WireError::Malformed));
}

#[test]
fn vdif_learns_its_station_from_the_first_valid_frame_of_its_threads() {
    let spec = FormatSpec::Vdif {
        threads: vec![5, 2],
        frame_len: 1056,
        frames_per_second: 1000,
        station: None,
        legacy: false,
    };
    let l = spec.locator().unwrap();
    let shared = l.clone(); // a clone (another capture thread) learns with it
    let other = |f: &[u8]| {
        let mut g = f.to_vec();
        g[12] ^= 1; // station 0x4143
        g
    };
    let ours = vdif_frame(2, 7, 1);
    assert_eq!(l.station(), None);
    // Frames that are not ours, or not valid, teach nothing.
    assert_eq!(
        l.locate(&other(&vdif_frame(3, 7, 0))),
        Err(WireError::Foreign)
    );
    let mut inv = other(&ours);
    inv[3] |= 0x80;
    assert_eq!(l.locate(&inv), Err(WireError::Invalid { stream: 1 }));
    assert_eq!(l.station(), None);
    assert!(l.locate(&ours).is_ok());
    assert_eq!(
        (l.station(), shared.station()),
        (Some(0x4142), Some(0x4142))
    );
    assert_eq!(shared.locate(&other(&ours)), Err(WireError::Foreign));
    assert!(shared.locate(&vdif_frame(5, 7, 2)).is_ok());
    // A fresh locator from the same spec starts unlocked: theirs first wins.
    let fresh = spec.locator().unwrap();
    assert!(fresh.locate(&other(&ours)).is_ok());
    assert_eq!(fresh.locate(&ours), Err(WireError::Foreign));
}

#[test]
fn ynao_locate() {
    let mut b = vec![9u8; ynao::FRAME_LEN];
    let r = ynao::Repr {
        sequence: 1 << 40,
        mjd: 60000,
        second: 5,
        nanosecond: 16_000,
        subband: 3,
    };
    r.emit(&mut ynao::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    let any = FormatSpec::Ynao { subband: None }.locator().unwrap();
    let loc = any.locate(&b).unwrap();
    assert_eq!(
        (loc.stream, loc.index, loc.payload.len()),
        (0, 1 << 40, 8192)
    );
    let three = FormatSpec::Ynao { subband: Some(3) }.locator().unwrap();
    assert!(three.locate(&b).is_ok());
    let four = FormatSpec::Ynao { subband: Some(4) }.locator().unwrap();
    assert_eq!(four.locate(&b), Err(WireError::Foreign));
    assert_eq!(any.locate(&b[..8000]), Err(WireError::Truncated));
    b.push(0);
    assert_eq!(any.locate(&b), Err(WireError::Malformed));
}

#[test]
fn validation_messages() {
    let bad = [
        FormatSpec::Vdif {
            threads: vec![],
            frame_len: 1056,
            frames_per_second: 1,
            station: None,
            legacy: false,
        },
        FormatSpec::Vdif {
            threads: vec![1024],
            frame_len: 1056,
            frames_per_second: 1,
            station: None,
            legacy: false,
        },
        FormatSpec::Vdif {
            threads: vec![1, 1],
            frame_len: 1056,
            frames_per_second: 1,
            station: None,
            legacy: false,
        },
        FormatSpec::Vdif {
            threads: vec![0],
            frame_len: 1057,
            frames_per_second: 1,
            station: None,
            legacy: false,
        },
        FormatSpec::Vdif {
            threads: vec![0],
            frame_len: 32,
            frames_per_second: 1,
            station: None,
            legacy: false,
        },
        FormatSpec::Vdif {
            threads: vec![0],
            frame_len: 1056,
            frames_per_second: 0,
            station: None,
            legacy: false,
        },
    ];
    for s in bad {
        assert!(matches!(s.locator(), Err(Error::Config(_))), "{s:?}");
    }
}

#[test]
fn no_panic_on_random_input() {
    let mut rng = super::super::testutil::XorShift(0xdead_beef_cafe_f00d);
    let valid = vdif_frame(5, 3, 10);
    let l = vdif_spec().locator().unwrap();
    let y = FormatSpec::Ynao { subband: Some(1) }.locator().unwrap();
    for (_, bytes) in rng.cases(&valid, 50_000) {
        if let Ok(loc) = l.locate(&bytes) {
            assert_eq!(loc.payload.len(), l.payload_len());
            assert!(loc.stream < 2);
        }
        let _ = y.locate(&bytes);
    }
}

fn dig_packet(timestamp: u64, id: u64, len: usize) -> Vec<u8> {
    let r = spead::Repr::digitiser(timestamp, 4096, id, len as u64);
    let mut b = vec![0x5au8; r.packet_len()];
    r.emit(&mut spead::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    b
}

#[test]
fn spead_locate() {
    let spec = FormatSpec::spead_digitiser(vec![7, 4], 4096, 10).unwrap();
    assert_eq!(spec.payload_len(), 5120);
    assert!(spec.packet_len() >= dig_packet(0, 7, 5120).len());
    let l = spec.locator().unwrap();
    assert_eq!((l.streams(), l.payload_len()), (2, 5120));
    let p = dig_packet(4096 * 1_000_003, 4, 5120);
    let loc = l.locate(&p).unwrap();
    assert_eq!((loc.stream, loc.index), (1, 1_000_003));
    assert_eq!(loc.payload, &p[72..]);
    assert_eq!(l.locate(&dig_packet(0, 7, 5120)).unwrap().stream, 0);
    assert_eq!(l.locate(&dig_packet(0, 5, 5120)), Err(WireError::Foreign));
    assert_eq!(
        l.locate(&dig_packet(100, 7, 5120)),
        Err(WireError::Malformed)
    );
    assert_eq!(l.locate(&dig_packet(0, 7, 5112)), Err(WireError::Malformed));
    assert_eq!(l.locate(&p[..p.len() - 1]), Err(WireError::Truncated));
    let mut long = p.clone();
    long.push(0);
    assert_eq!(l.locate(&long), Err(WireError::Malformed));
    let mut bad_magic = p.clone();
    bad_magic[0] = 0;
    assert_eq!(l.locate(&bad_magic), Err(WireError::Malformed));
    for bits in [8u8, 12, 16] {
        let s = FormatSpec::spead_digitiser(vec![0], 4096, bits).unwrap();
        assert_eq!(s.payload_len(), 4096 * bits as usize / 8);
    }
    assert!(FormatSpec::spead_digitiser(vec![0], 4096, 11).is_err());
    assert!(FormatSpec::spead_digitiser(vec![0], 3, 10).is_err());
}

/// Packet `part` of a heap of `heap_size` bytes split into `len`-byte
/// packets, with `extra` items (time stamp, id) and payload bytes that
/// say where they belong.
fn heap_part(
    bits: u8,
    heap_cnt: u64,
    heap_size: Option<u64>,
    offset: u64,
    len: usize,
    extra: &[(u64, u64)],
) -> Vec<u8> {
    let r = spead::Repr {
        heap_address_bits: bits,
        heap_cnt,
        heap_size,
        heap_offset: offset,
        payload_len: len as u64,
        items: extra
            .iter()
            .map(|&(id, v)| spead::Item::immediate(id, v))
            .chain([spead::Item::address(spead::DIG_RAW_DATA, 0)])
            .collect(),
    };
    let mut b = vec![0u8; r.packet_len()];
    let start = r.header_len();
    for (i, x) in b[start..].iter_mut().enumerate() {
        *x = (heap_cnt as usize * 31 + offset as usize + i) as u8;
    }
    r.emit(&mut spead::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    b
}

#[test]
fn spead_multi_packet_heaps_by_timestamp() {
    let (ts, id) = (spead::DIG_TIMESTAMP, spead::DIG_ID);
    let spec =
        FormatSpec::spead_heaps(vec![7, 4], 4096, 5120, 4, spead::HeapIndex::Timestamp).unwrap();
    assert_eq!((spec.payload_len(), spec.packets_per_heap()), (1280, 4));
    assert!(spec.packet_len() >= 1280 + 8 + 8 * 7);
    let l = spec.locator().unwrap();
    assert_eq!((l.streams(), l.payload_len()), (2, 1280));
    let part =
        |cnt, size, off, len, items: &[(u64, u64)]| heap_part(48, cnt, size, off, len, items);
    let both = [(ts, 4096 * 10), (id, 4)];
    for k in 0..4u64 {
        let p = part(99, Some(5120), 1280 * k, 1280, &both);
        let loc = l.locate(&p).unwrap();
        assert_eq!((loc.stream, loc.index), (1, 10 * 4 + k));
        assert_eq!(loc.payload, &p[p.len() - 1280..]);
    }
    let mal = |p: Vec<u8>| assert_eq!(l.locate(&p), Err(WireError::Malformed));
    mal(part(99, Some(5120), 1281, 1280, &both)); // offset not a packet boundary
    mal(part(99, Some(5120), 640, 1280, &both));
    mal(part(99, Some(5120), 3840, 1024, &both)); // another packet size
                                                  // Beyond the heap: built inside a larger heap, then the 64-48 heap
                                                  // size pointer (the second) rewritten.
    let beyond = |off| {
        let mut p = part(99, Some(8192), off, 1280, &both);
        p[16..24].copy_from_slice(&((1u64 << 63) | (2 << 48) | 5120).to_be_bytes());
        p
    };
    assert_eq!(
        spead::Packet::new_checked(&beyond(5120)[..]).err(),
        Some(WireError::Malformed)
    );
    mal(beyond(5120));
    mal(beyond(3840 + 1280 * 2));
    mal(part(99, Some(5120), 1280, 1280 * 2, &both));
    mal(part(99, Some(2560), 1280, 1280, &both)); // another heap size
    mal(part(99, None, 1280, 1280, &both)); // heap size absent
    mal(part(99, Some(5120), 1280, 1280, &both[..1])); // id absent
    mal(part(99, Some(5120), 1280, 1280, &both[1..])); // time stamp absent
    mal(part(99, Some(5120), 0, 1280, &[(ts, 100), (id, 4)])); // not on a heap
    assert_eq!(
        l.locate(&part(99, Some(5120), 0, 1280, &[(ts, 0), (id, 5)])),
        Err(WireError::Foreign)
    );
    // Another flavour is malformed for this capture, and locates in its own.
    let p40 = heap_part(40, 1, Some(5120), 2560, 1280, &both);
    mal(p40.clone());
    let mut spec40 = spec.clone();
    if let FormatSpec::Spead {
        heap_address_bits, ..
    } = &mut spec40
    {
        *heap_address_bits = 40;
    }
    let loc = spec40.locator().unwrap().locate(&p40).unwrap();
    assert_eq!((loc.stream, loc.index), (1, 42));
}

#[test]
fn spead_multi_packet_heaps_by_heap_counter() {
    let (ts, id) = (spead::DIG_TIMESTAMP, spead::DIG_ID);
    // Four senders (heap_cnt = heap * 4 + sender); we take senders 3 and 1.
    let spec = FormatSpec::spead_heaps(
        vec![3, 1],
        2048,
        4096,
        2,
        spead::HeapIndex::HeapCnt { step: 4 },
    )
    .unwrap();
    let l = spec.locator().unwrap();
    let heap = 1_000_000u64;
    let cnt = heap * 4 + 1;
    // spead2 style: items in the first packet only.
    let first = heap_part(48, cnt, Some(4096), 0, 2048, &[(ts, heap * 2048), (id, 1)]);
    let second = heap_part(48, cnt, Some(4096), 2048, 2048, &[]);
    let a = l.locate(&first).unwrap();
    let b = l.locate(&second).unwrap();
    assert_eq!(
        (a.stream, a.index, b.stream, b.index),
        (1, 2 * heap, 1, 2 * heap + 1)
    );
    assert_eq!(b.payload, &second[second.len() - 2048..]);
    let mal = |p: Vec<u8>| assert_eq!(l.locate(&p), Err(WireError::Malformed));
    mal(heap_part(
        48,
        cnt,
        Some(4096),
        0,
        2048,
        &[(ts, heap * 2048 + 2048)],
    ));
    mal(heap_part(48, cnt, Some(4096), 0, 2048, &[(id, 3)]));
    mal(heap_part(48, cnt, Some(4096), 1024, 2048, &[]));
    mal(heap_part(48, cnt, Some(8192), 2048, 2048, &[]));
    assert_eq!(
        l.locate(&heap_part(48, heap * 4 + 2, Some(4096), 0, 2048, &[])),
        Err(WireError::Foreign)
    );
    let top = heap_part(48, (1 << 48) - 1, Some(4096), 2048, 2048, &[]);
    assert_eq!(
        l.locate(&top).unwrap().index,
        ((1u64 << 48) - 1) / 4 * 2 + 1
    );
    // A hand-built map with zeros must count, not panic.
    let zero = spead::HeapMap {
        heap_address_bits: 48,
        ids: vec![0].into_boxed_slice(),
        samples_per_heap: 0,
        heap_bytes: 0,
        packets_per_heap: 0,
        timestamp_id: ts,
        id_item: id,
        index: spead::HeapIndex::HeapCnt { step: 0 },
    };
    assert_eq!(zero.locate(&second), Err(WireError::Malformed));
    let empty = heap_part(48, 0, Some(0), 0, 0, &[(ts, 0), (id, 0)]);
    assert_eq!(zero.locate(&empty), Err(WireError::Malformed));
    let by_ts = spead::HeapMap {
        index: spead::HeapIndex::Timestamp,
        ..zero
    };
    assert_eq!(by_ts.locate(&empty), Err(WireError::Malformed));
}

fn codif_frame(thread: u16, seconds: u32, frame: u32) -> Vec<u8> {
    // Only what the locator reads; the rest is the smallest valid frame's.
    let r = codif::Repr {
        seconds,
        frame,
        station: 0x4b41,
        data_len: 1024,
        group: 2,
        thread,
        period: 27,
        ..Default::default()
    };
    let mut b = vec![3u8; r.frame_len()];
    r.emit(&mut codif::Packet::new_unchecked(&mut b[..]))
        .unwrap();
    b
}

fn codif_spec() -> FormatSpec {
    let threads = vec![9, 1];
    FormatSpec::Codif {
        threads,
        frame_len: 1088,
        frames_per_period: 1000,
        station: Some(0x4b41),
        group: Some(2),
    }
}

/// Where `l` puts `packet` (stream, index), its payload checked to be all
/// the bytes after a `header`-byte header.
fn placed(
    l: &Locator,
    packet: &[u8],
    header: usize,
) -> core::result::Result<(usize, u64), WireError> {
    let loc = l.locate(packet)?;
    assert_eq!(loc.payload, &packet[header..]);
    Ok((loc.stream, loc.index))
}

#[test]
fn codif_locate() {
    let l = codif_spec().locator().unwrap();
    assert_eq!((l.streams(), l.payload_len()), (2, 1024));
    let f = codif_frame(1, 27 * 5, 999);
    assert_eq!(placed(&l, &f, 64), Ok((1, 5 * 1000 + 999)));
    assert_eq!(placed(&l, &codif_frame(9, 0, 0), 64), Ok((0, 0)));
    let mut long = f.clone();
    long.push(0);
    for (packet, want) in [
        (codif_frame(2, 0, 0), WireError::Foreign),
        // Seconds not a multiple of the period; frame number past the period.
        (codif_frame(1, 28, 0), WireError::Malformed),
        (codif_frame(1, 27, 1000), WireError::Malformed),
        (f[..1087].to_vec(), WireError::Truncated),
        (long, WireError::Malformed),
    ] {
        assert_eq!(l.locate(&packet), Err(want));
    }
    let corrupt = |byte: usize, bit: u8| {
        let mut c = f.clone();
        c[byte] ^= 1 << bit;
        l.locate(&c).map(|x| (x.stream, x.index))
    };
    assert_eq!(corrupt(7, 7), Err(WireError::Invalid { stream: 1 })); // invalid flag
    assert_eq!(corrupt(44, 0), Err(WireError::Malformed)); // sync word
    assert_eq!(corrupt(12, 0), Err(WireError::Truncated)); // longer data array
    assert_eq!(corrupt(12, 7), Err(WireError::Malformed)); // empty data array
    let mut shorter = f.clone();
    shorter[12] = 0x40; // 512 bytes: a frame of another length
    assert_eq!(l.locate(&shorter), Err(WireError::Malformed));
    assert_eq!(corrupt(0, 0), Ok((1, 5 * 1000 + 998)));
    assert_eq!(corrupt(8, 0), Err(WireError::Foreign)); // station
    assert_eq!(corrupt(16, 0), Err(WireError::Foreign)); // group
    let mut no_period = f.clone();
    no_period[28..30].fill(0);
    assert_eq!(l.locate(&no_period), Err(WireError::Malformed));
}

#[test]
fn counter_and_layout_locate() {
    let l = FormatSpec::Counter {
        streams: 2,
        payload_len: 4,
    }
    .locator()
    .unwrap();
    let mut p = 0x0102_0304_0506_0708u64.to_be_bytes().to_vec();
    p.extend_from_slice(&1u16.to_be_bytes());
    p.extend_from_slice(&[9, 8, 7, 6]);
    let loc = l.locate(&p).unwrap();
    assert_eq!(
        (loc.stream, loc.index, loc.payload),
        (1, 0x0102_0304_0506_0708, &[9, 8, 7, 6][..])
    );
    for n in 0..p.len() {
        assert_eq!(l.locate(&p[..n]), Err(WireError::Truncated), "length {n}");
    }
    p.push(0);
    assert_eq!(l.locate(&p), Err(WireError::Malformed));
    p.pop();
    p[9] = 2;
    assert_eq!(l.locate(&p), Err(WireError::Foreign));
    // The counter format, described as a layout, locates the same.
    let as_layout = FormatSpec::Layout(layout::Layout {
        packet_len: 14,
        index: layout::Field::be(0, 8),
        index_step: 1,
        stream: Some(layout::Field::be(8, 2)),
        stream_ids: vec![0, 1],
        checks: vec![],
        payload_offset: 10,
        payload_len: 4,
    });
    assert_eq!(as_layout.packet_len(), 14);
    let ll = as_layout.locator().unwrap();
    p[9] = 1;
    assert_eq!(ll.locate(&p), l.locate(&p));
    assert_eq!(ll.streams(), 2);
}

#[test]
fn new_format_validation_messages() {
    let spead = |f: &dyn Fn(&mut FormatSpec)| {
        let mut s = FormatSpec::spead_digitiser(vec![0, 1], 4096, 10).unwrap();
        f(&mut s);
        s
    };
    let set = |s: &mut FormatSpec, k: &str| {
        let FormatSpec::Spead {
            heap_address_bits: bits,
            digitiser_ids: ids,
            samples_per_heap: spp,
            heap_bytes: bytes,
            packets_per_heap: pph,
            heap_index: index,
            timestamp_id: ts,
            digitiser_id_item: id_item,
        } = s
        else {
            unreachable!()
        };
        match k {
            "bits44" => *bits = 44,
            "bits64" => *bits = 64,
            "noids" => ids.clear(),
            "dupids" => *ids = vec![3, 3],
            "bigid" => *ids = vec![1 << 48],
            "spp0" => *spp = 0,
            "bytes0" => *bytes = 0,
            "ts_std" => *ts = spead::HEAP_SIZE,
            "ts_wide" => *ts = 1 << 15,
            "same" => *id_item = *ts,
            "pph0" => *pph = 0,
            "pph3" => *pph = 3,
            "step0" => *index = spead::HeapIndex::HeapCnt { step: 0 },
            "step1" => *index = spead::HeapIndex::HeapCnt { step: 1 },
            _ => unreachable!(),
        }
    };
    let mut bad: Vec<FormatSpec> = [
        "bits44", "bits64", "noids", "dupids", "bigid", "spp0", "bytes0", "ts_std", "ts_wide",
        "same", "pph0", "pph3", "step0", "step1",
    ]
    .iter()
    .map(|k| spead(&|s| set(s, k)))
    .collect();
    let codif = |threads: Vec<u16>, frame_len: usize, fpp: u32| FormatSpec::Codif {
        threads,
        frame_len,
        frames_per_period: fpp,
        station: None,
        group: None,
    };
    bad.extend([
        codif(vec![], 1088, 1),
        codif(vec![1, 1], 1088, 1),
        codif(vec![1], 64, 1),
        codif(vec![1], 1090, 1),
        codif(vec![1], 1088, 0),
        FormatSpec::Counter {
            streams: 0,
            payload_len: 8,
        },
        FormatSpec::Counter {
            streams: 65537,
            payload_len: 8,
        },
        FormatSpec::Counter {
            streams: 1,
            payload_len: 0,
        },
        FormatSpec::Layout(layout::Layout {
            packet_len: 8,
            index: layout::Field::be(0, 8),
            index_step: 1,
            stream: None,
            stream_ids: vec![],
            checks: vec![],
            payload_offset: 8,
            payload_len: 1,
        }),
    ]);
    for s in bad {
        assert!(matches!(s.locator(), Err(Error::Config(_))), "{s:?}");
    }
}

#[test]
fn new_formats_no_panic_on_random_input() {
    let mut rng = super::super::testutil::XorShift(0x5ead_c0d1_f00d_1a40);
    let cases = [
        (
            FormatSpec::spead_digitiser(vec![7, 4], 64, 10).unwrap(),
            dig_packet(64 * 3, 4, 80),
        ),
        (
            FormatSpec::spead_heaps(vec![0, 2], 64, 96, 3, spead::HeapIndex::HeapCnt { step: 3 })
                .unwrap(),
            heap_part(48, 3 * 17 + 2, Some(96), 32, 32, &[]),
        ),
        (codif_spec(), codif_frame(9, 54, 3)),
        (
            FormatSpec::Counter {
                streams: 3,
                payload_len: 30,
            },
            [&5u64.to_be_bytes()[..], &[0, 2], &[1; 30]].concat(),
        ),
    ];
    for (spec, valid) in cases {
        let l = spec.locator().unwrap();
        assert!(l.locate(&valid).is_ok(), "{spec:?}");
        let mut accepted = 0;
        for (_, bytes) in rng.cases(&valid, 40_000) {
            if let Ok(loc) = l.locate(&bytes) {
                accepted += 1;
                assert_eq!(loc.payload.len(), l.payload_len());
                assert!(loc.stream < l.streams());
                assert!(bytes.len() <= spec.packet_len());
            }
        }
        assert!(accepted > 100, "{spec:?}: {accepted}");
    }
}
