//! Tests of the frame assembler: hand-over on the last packet, the loss
//! taxonomy with exact counters, deadlines, the window, GPU-busy drops,
//! resyncs, two-field frames, and counter identities under random faults.

use std::collections::HashMap;

use super::*;
use crate::wire::counter::Locator;
use crate::wire::layout::Layout;

const LEN: usize = 16;

#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Claim(u64, bool),
    Write(u64, usize),
    Publish(FrameDone),
}

/// A sink that records every call, keeps each seq's bytes and checks the
/// contract (dense claims, writes only to claimed and unpublished seqs, each
/// seq published once). `refuse(n)` refuses the n-th claim call (from 1).
struct Rec {
    ev: Vec<Ev>,
    frames: HashMap<u64, Vec<u8>>,
    done: Vec<FrameDone>,
    frame_bytes: usize,
    claims: u64,
    claimed: u64,
    refuse: Box<dyn FnMut(u64) -> bool>,
}

impl Rec {
    fn new(p: usize) -> Rec {
        Rec::refusing(p, |_| false)
    }

    fn refusing(p: usize, refuse: impl FnMut(u64) -> bool + 'static) -> Rec {
        Rec {
            ev: Vec::new(),
            frames: HashMap::new(),
            done: Vec::new(),
            frame_bytes: p * LEN,
            claims: 0,
            claimed: 0,
            refuse: Box::new(refuse),
        }
    }

    fn kinds(&self) -> Vec<(u64, u64, FrameKind)> {
        self.done.iter().map(|d| (d.seq, d.frame, d.kind)).collect()
    }
}

impl FrameSink for Rec {
    fn claim(&mut self, seq: u64) -> bool {
        self.claims += 1;
        assert_eq!(seq, self.claimed + 1, "claims are dense");
        let ok = !(self.refuse)(self.claims);
        if ok {
            self.claimed = seq;
            self.frames.insert(seq, vec![0xee; self.frame_bytes]);
        }
        self.ev.push(Ev::Claim(seq, ok));
        ok
    }

    fn write(&mut self, seq: u64, offset: usize, bytes: &[u8]) {
        assert!(
            !self.done.iter().any(|d| d.seq == seq),
            "write after publish"
        );
        let f = self.frames.get_mut(&seq).expect("write to a claimed seq");
        f[offset..offset + bytes.len()].copy_from_slice(bytes);
        self.ev.push(Ev::Write(seq, offset));
    }

    fn publish(&mut self, done: &FrameDone) {
        assert!(
            self.frames.contains_key(&done.seq),
            "publish of a claimed seq"
        );
        assert!(
            !self.done.iter().any(|d| d.seq == done.seq),
            "one publish per seq"
        );
        self.done.push(*done);
        self.ev.push(Ev::Publish(*done));
    }
}

fn payload(index: u64) -> Vec<u8> {
    (0..LEN as u8)
        .map(|j| (index as u8).wrapping_mul(31) ^ (index >> 8) as u8 ^ j.wrapping_mul(7))
        .collect()
}

/// A `counter` packet of stream 0.
fn pkt(index: u64) -> Vec<u8> {
    let mut p = index.to_be_bytes().to_vec();
    p.extend_from_slice(&0u16.to_be_bytes());
    p.extend(payload(index));
    p
}

fn expected(frame: u64, p: usize) -> Vec<u8> {
    (0..p as u64)
        .flat_map(|k| payload(frame * p as u64 + k))
        .collect()
}

fn asm(cfg: FrameConfig) -> FrameAssembler<Locator> {
    FrameAssembler::new(Locator::new(1, LEN).unwrap(), cfg).unwrap()
}

fn cfg(p: usize, window: usize) -> FrameConfig {
    FrameConfig {
        window,
        ..FrameConfig::new(p)
    }
}

/// Pushes counter packets `indices`, the i-th at time `t0 + i`.
fn feed(a: &mut FrameAssembler<Locator>, s: &mut Rec, t0: u64, indices: &[u64]) {
    for (i, &x) in indices.iter().enumerate() {
        a.push(&pkt(x), t0 + i as u64, s);
    }
}

use FrameKind::{Incomplete, Whole};

#[test]
fn in_order_frames_are_whole() {
    let (p, n) = (4, 10u64);
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &(0..n * p as u64).collect::<Vec<_>>());
    a.finish(1000, &mut s);
    let want: Vec<_> = (0..n).map(|f| (f + 1, f, Whole)).collect();
    assert_eq!(s.kinds(), want);
    for d in &s.done {
        assert_eq!(s.frames[&d.seq], expected(d.frame, p));
        assert_eq!((d.present, d.bytes, d.t_send_ns), (4, 64, None));
    }
    let c = a.counters();
    assert_eq!((c.received, c.missing, c.frames_complete), (40, 0, 10));
    assert_eq!(c.packets(), 40);
    assert_eq!(a.next_seq(), 11);
}

#[test]
fn a_frame_is_published_on_its_last_packet() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    for f in 0..3u64 {
        for k in 0..p as u64 {
            let before = s.ev.len();
            a.push(&pkt(f * 4 + k), 100 * f + k, &mut s);
            let last = s.ev.last().cloned();
            if k < 3 {
                assert!(!matches!(last, Some(Ev::Publish(_))), "frame {f} k {k}");
            } else {
                // This very push wrote the last packet and published.
                assert_eq!(s.ev.len(), before + 2);
                let want = FrameDone {
                    seq: f + 1,
                    frame: f,
                    kind: Whole,
                    present: 4,
                    bytes: 64,
                    t_first_ns: 100 * f,
                    t_done_ns: 100 * f + 3,
                    t_send_ns: None,
                };
                assert_eq!(last, Some(Ev::Publish(want)));
                assert_eq!(a.frames_open(), 0);
            }
        }
    }
}

#[test]
fn loss_closes_frames_incomplete_with_exact_counters() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    let order: Vec<u64> = (0..24).filter(|&i| i != 5 && i != 14).collect();
    feed(&mut a, &mut s, 0, &order);
    // Frame 1 gives way when frame 3 opens; frame 2 was published before it.
    assert_eq!(
        s.kinds(),
        [
            (1, 0, Whole),
            (3, 2, Whole),
            (2, 1, Incomplete),
            (5, 4, Whole),
            (4, 3, Incomplete),
            (6, 5, Whole)
        ]
    );
    let d = s.done[2];
    assert_eq!((d.present, d.t_first_ns, d.t_done_ns), (3, 4, 11));
    // The incomplete frame holds what came, and nothing where the hole is.
    assert_eq!(&s.frames[&2][..LEN], &payload(4)[..]);
    assert_eq!(&s.frames[&2][LEN..2 * LEN], &[0xee; LEN][..]);
    a.finish(99, &mut s);
    let c = *a.counters();
    assert_eq!((c.received, c.missing, c.late, c.duplicate), (22, 2, 0, 0));
    assert_eq!(
        (c.frames_complete, c.frames_incomplete, c.frames_lost),
        (4, 2, 0)
    );
    assert_eq!(c.packets(), 22);
}

#[test]
fn reorder_within_and_across_frames() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    // Frame 0 shuffled; frame 2's first packet before frame 1's last two.
    let order = [2, 0, 3, 1, 4, 5, 8, 6, 7, 10, 9, 11, 13, 12, 15, 14];
    feed(&mut a, &mut s, 0, &order);
    a.finish(99, &mut s);
    assert_eq!(
        s.kinds(),
        [(1, 0, Whole), (2, 1, Whole), (3, 2, Whole), (4, 3, Whole)]
    );
    for d in &s.done {
        assert_eq!(s.frames[&d.seq], expected(d.frame, p));
    }
    let c = a.counters();
    assert_eq!(
        (c.received, c.late, c.missing, c.frames_complete),
        (16, 0, 0, 4)
    );
}

#[test]
fn duplicates_are_counted_not_rewritten() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &[0, 1]);
    let mut dup = pkt(1);
    dup[12] ^= 0xff;
    a.push(&dup, 5, &mut s);
    feed(&mut a, &mut s, 6, &[2, 3]);
    // A copy after its frame closed whole is late, not a duplicate.
    feed(&mut a, &mut s, 8, &[3, 4]);
    a.finish(99, &mut s);
    assert_eq!(s.frames[&1], expected(0, p));
    let c = a.counters();
    assert_eq!((c.received, c.duplicate, c.late), (5, 1, 1));
    assert_eq!(
        (c.frames_complete, c.frames_incomplete, c.missing),
        (1, 1, 3)
    );
    assert_eq!(c.packets(), 7);
}

#[test]
fn deadline_closes_the_oldest_frame() {
    let p = 4;
    let mut a = asm(FrameConfig {
        timeout_ns: 100,
        ..cfg(p, 2)
    });
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &[0, 1, 2]);
    a.poll(99, &mut s);
    assert!(s.done.is_empty());
    a.poll(100, &mut s);
    assert_eq!(s.kinds(), [(1, 0, Incomplete)]);
    assert_eq!((s.done[0].present, s.done[0].t_done_ns), (3, 100));
    a.push(&pkt(3), 101, &mut s);
    assert_eq!(a.counters().late, 1);
    // Checked at each push too: frame 1 expires when frame 2's packet comes.
    feed(&mut a, &mut s, 200, &[4, 5]);
    a.push(&pkt(8), 300, &mut s);
    assert_eq!(s.kinds()[1], (2, 1, Incomplete));
    assert_eq!(s.done[1].t_done_ns, 300);
    assert_eq!(a.frames_open(), 1);
    let c = a.counters();
    assert_eq!((c.frames_incomplete, c.missing, c.received), (2, 3, 6));
}

#[test]
fn the_window_moves_on() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &[0, 4]);
    assert!(s.done.is_empty());
    // Frame 2 opens: frame 0 leaves the window, frame 1 stays.
    a.push(&pkt(8), 2, &mut s);
    assert_eq!(s.kinds(), [(1, 0, Incomplete)]);
    assert_eq!(s.done[0].t_done_ns, 2);
    feed(&mut a, &mut s, 3, &[1, 5]);
    assert_eq!(a.counters().late, 1);
    // Window 1: every straggler of an earlier frame is late.
    let mut a = asm(cfg(p, 1));
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &[0, 1, 4, 2, 5]);
    assert_eq!(s.kinds(), [(1, 0, Incomplete)]);
    assert_eq!((a.counters().late, a.counters().received), (1, 4));
}

#[test]
fn skipped_frames_are_lost_and_get_no_seq() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    let mut s = Rec::new(p);
    feed(&mut a, &mut s, 0, &[0, 1, 2, 3, 12, 13, 14, 15, 5]);
    a.finish(99, &mut s);
    assert_eq!(s.kinds(), [(1, 0, Whole), (2, 3, Whole)]);
    let c = a.counters();
    assert_eq!((c.frames_lost, c.missing, c.late, c.resyncs), (2, 8, 1, 0));
}

#[test]
fn a_busy_gpu_drops_the_frame_and_its_seq_is_reused() {
    let p = 4;
    let mut a = asm(cfg(p, 2));
    // The second and third claims are refused: frames 1 and 2 are dropped.
    let mut s = Rec::refusing(p, |n| n == 2 || n == 3);
    let order: Vec<u64> = (0..16).filter(|&i| i != 9).chain([4]).collect();
    feed(&mut a, &mut s, 0, &order);
    a.finish(99, &mut s);
    assert_eq!(s.kinds(), [(1, 0, Whole), (2, 3, Whole)]);
    assert_eq!(
        s.ev.iter()
            .filter(|e| matches!(e, Ev::Claim(..)))
            .collect::<Vec<_>>(),
        [
            &Ev::Claim(1, true),
            &Ev::Claim(2, false),
            &Ev::Claim(2, false),
            &Ev::Claim(2, true)
        ]
    );
    assert_eq!(s.frames[&2], expected(3, p));
    let c = *a.counters();
    // Frame 1 whole but dropped, frame 2 dropped with a hole; 4 (again) late.
    assert_eq!((c.frames_gpu_busy, c.dropped, c.received), (2, 7, 8));
    assert_eq!((c.missing, c.late), (1, 1));
    assert_eq!(c.packets(), 16);
    assert_eq!(c.received + c.dropped + c.missing, 4 * 4);
}

#[test]
fn big_jumps_resync() {
    let p = 4;
    let mut a = asm(FrameConfig {
        resync_frames: 8,
        ..cfg(p, 2)
    });
    let mut s = Rec::new(p);
    // Jump of 8 frames (7 lost): not a resync.
    feed(&mut a, &mut s, 0, &[0, 1, 2, 3, 32]);
    assert_eq!((a.counters().frames_lost, a.counters().resyncs), (7, 0));
    // Jump of 9: resync; frame 8 closes incomplete, none counted lost.
    a.push(&pkt(17 * 4), 10, &mut s);
    assert_eq!(s.kinds(), [(1, 0, Whole), (2, 8, Incomplete)]);
    assert_eq!((a.counters().frames_lost, a.counters().resyncs), (7, 1));
    // 8 back: late; 9 back: resync (the sender restarted).
    feed(&mut a, &mut s, 11, &[9 * 4, 8 * 4 + 1]);
    assert_eq!((a.counters().late, a.counters().resyncs), (1, 2));
    assert_eq!(s.kinds()[2], (3, 17, Incomplete));
    a.finish(99, &mut s);
    assert_eq!(s.kinds()[3], (4, 8, Incomplete));
    let c = a.counters();
    assert_eq!(c.missing, 7 * 4 + 3 + 3 + 3);
    assert_eq!(c.received + c.missing, 4 * (1 + 3 + 7));
}

#[path = "frame_tests_faults.rs"]
mod faults;
