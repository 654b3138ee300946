//! Frame assembler tests, continued: two-field frames, bad packets and
//! configurations, and counter identities under random faults.

use super::*;
use crate::capture::{Delivered, Fault, FaultPlan};

/// Two-field test format: k u16 LE at 0, frame u64 LE at 8, send stamp u64
/// LE at 16, payload at 24.
fn two_field_packet(frame: u64, k: u16, t_send: u64) -> Vec<u8> {
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&k.to_le_bytes());
    b[8..16].copy_from_slice(&frame.to_le_bytes());
    b[16..24].copy_from_slice(&t_send.to_le_bytes());
    b.extend(payload(frame * 3 + k as u64));
    b
}

fn two_field_layout() -> Layout {
    Layout {
        packet_len: 24 + LEN,
        index: Field::le(0, 2),
        index_step: 1,
        stream: None,
        stream_ids: vec![],
        checks: vec![],
        payload_offset: 24,
        payload_len: LEN,
    }
}

#[test]
fn two_field_frames_with_send_time() {
    let cfg = FrameConfig {
        frame_field: Some(Field::le(8, 8)),
        send_time: Some(Field::le(16, 8)),
        ..FrameConfig::new(3)
    };
    let mut a = FrameAssembler::new(two_field_layout(), cfg).unwrap();
    let mut s = Rec::new(3);
    // The first packet to arrive (k 2) carries the frame's stamp.
    for (i, (f, k, t)) in [(7, 2, 70), (7, 0, 71), (7, 3, 0), (7, 1, 72), (8, 0, 80)]
        .into_iter()
        .enumerate()
    {
        a.push(&two_field_packet(f, k, t), 1000 + i as u64, &mut s);
    }
    assert_eq!(s.kinds(), [(1, 7, Whole)]);
    assert_eq!(s.done[0].t_send_ns, Some(70));
    assert_eq!(s.frames[&1], expected(7, 3));
    a.finish(2000, &mut s);
    assert_eq!(s.done[1].t_send_ns, Some(80));
    let c = a.counters();
    assert_eq!((c.received, c.malformed, c.frames_incomplete), (4, 1, 1));
    // A frame field past the packet's end makes every packet malformed.
    let cfg = FrameConfig {
        frame_field: Some(Field::le(40, 8)),
        ..FrameConfig::new(3)
    };
    let mut a = FrameAssembler::new(two_field_layout(), cfg).unwrap();
    a.push(&two_field_packet(1, 0, 0), 0, &mut s);
    assert_eq!(a.counters().malformed, 1);
}

#[test]
fn truncated_foreign_and_malformed_packets() {
    let mut a = asm(cfg(4, 2));
    let mut s = Rec::new(4);
    let good = pkt(0);
    a.push(&good[..5], 0, &mut s); // shorter than the header
    a.push(&good[..good.len() - 1], 1, &mut s); // payload cut short
    let mut other = pkt(1);
    other[9] = 1; // stream 1: not configured
    a.push(&other, 2, &mut s);
    let mut long = pkt(2);
    long.push(0);
    a.push(&long, 3, &mut s);
    a.push_truncated();
    let c = a.counters();
    assert_eq!(
        (c.truncated, c.foreign, c.malformed, c.received),
        (3, 1, 1, 0)
    );
    assert_eq!(c.packets(), 5);
    assert!(s.ev.is_empty());
}

#[test]
fn config_errors_say_what_to_change() {
    let bad = [
        FrameConfig::new(0),
        FrameConfig::new(4097),
        cfg(4, 0),
        cfg(4, 65),
        FrameConfig {
            resync_frames: 0,
            ..FrameConfig::new(4)
        },
        FrameConfig {
            frame_field: Some(Field::le(0, 9)),
            ..FrameConfig::new(4)
        },
        FrameConfig {
            send_time: Some(Field::le(0, 2).part(12, 8)),
            ..FrameConfig::new(4)
        },
    ];
    for c in bad {
        let e = FrameAssembler::new(Locator::new(1, LEN).unwrap(), c).err();
        assert!(matches!(e, Some(Error::Config(_))), "{c:?}");
    }
    let two = FrameAssembler::new(Locator::new(2, LEN).unwrap(), FrameConfig::new(4));
    let msg = two.err().unwrap().to_string();
    assert!(msg.contains("one stream"), "{msg}");
    assert!(FrameConfig::new(4096).validate().is_ok());
}

/// Random drops, duplicates, reordering, truncation, garbage and foreign
/// packets, GPU-busy refusals and pauses that pass the deadline: every
/// packet is counted once and the frame identities hold exactly.
#[test]
fn random_faults_keep_counter_identities() {
    let p = 8;
    let mut a = asm(FrameConfig {
        window: 3,
        timeout_ns: 40_000,
        ..FrameConfig::new(p)
    });
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut s = Rec::refusing(p, |n| n % 13 == 5);
    let mut inj = FaultPlan::new(42)
        .rate(Fault::Drop, 0.03)
        .rate(Fault::Duplicate { delay: 12 }, 0.02)
        .rate(Fault::Delay(12), 0.05)
        .rate(Fault::Truncate, 0.01)
        .rate(Fault::Garbage, 0.01)
        .rate(Fault::Foreign, 0.01)
        .foreign(|b| [&b[..8], &7u16.to_be_bytes(), &b[10..]].concat())
        .injector()
        .unwrap();
    let delivered = inj.apply((0..10_000u64).map(pkt));
    let mut now = 0;
    for d in &delivered {
        now += 1000;
        if next() % 500 == 0 {
            now += 100_000; // a pause: open frames pass their deadline
            a.poll(now, &mut s);
        }
        match d {
            Delivered::Packet(b) => a.push(b, now, &mut s),
            Delivered::Truncated => a.push_truncated(),
        }
    }
    a.finish(now, &mut s);
    let c = *a.counters();
    let i = inj.injected();
    assert_eq!(c.packets(), delivered.len() as u64);
    assert_eq!(
        (c.truncated, c.foreign, c.malformed),
        (i.truncated, i.foreign, i.garbage)
    );
    let valid = c.received + c.dropped + c.duplicate + c.late;
    assert_eq!(valid, i.intact() + i.duplicated);
    let closed = c.frames_complete + c.frames_incomplete + c.frames_gpu_busy;
    assert_eq!(
        c.received + c.dropped + c.missing,
        p as u64 * (closed + c.frames_lost)
    );
    // Seqs 1..next published once each; whole frames hold exactly their data.
    let mut seqs: Vec<u64> = s.done.iter().map(|d| d.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..a.next_seq()).collect::<Vec<_>>());
    let whole: Vec<_> = s.done.iter().filter(|d| d.kind == Whole).collect();
    assert_eq!(whole.len() as u64, c.frames_complete);
    for d in &whole {
        assert_eq!(s.frames[&d.seq], expected(d.frame, p), "frame {}", d.frame);
    }
    let present: u64 = s.done.iter().map(|d| d.present as u64).sum();
    assert_eq!(present, c.received);
    assert!(s.done.iter().all(|d| (d.kind == Whole) == (d.present == 8)));
    // The run exercised every path.
    assert!(c.frames_incomplete > 20 && c.frames_gpu_busy > 20, "{c:?}");
    assert!(c.late > 0 && c.duplicate > 0 && c.resyncs == 0, "{c:?}");
}
