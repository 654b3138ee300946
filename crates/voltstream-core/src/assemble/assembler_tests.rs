//! Tests of the assembler: placement, the reorder window, resyncs, drops and
//! the loss taxonomy's accounting, on a test format with a counter header.

use super::*;
use crate::capture::{Delivered, Fault, FaultPlan, Injector};
use crate::stats::StreamCounters;
use crate::wire::Located;
use std::time::{Duration, Instant};

/// Test format: u64 BE index, u16 BE stream, then the payload.
struct Counter {
    streams: usize,
    payload: usize,
}

impl Locate for Counter {
    fn streams(&self) -> usize {
        self.streams
    }
    fn payload_len(&self) -> usize {
        self.payload
    }
    fn locate<'a>(&self, p: &'a [u8]) -> std::result::Result<Located<'a>, WireError> {
        if p.len() < 10 {
            return Err(WireError::Truncated);
        }
        if p.len() != 10 + self.payload {
            return Err(WireError::Malformed);
        }
        let index = u64::from_be_bytes(p[..8].try_into().unwrap());
        let stream = u16::from_be_bytes([p[8], p[9]]) as usize;
        if stream >= self.streams {
            return Err(WireError::Foreign);
        }
        Ok(Located {
            stream,
            index,
            payload: &p[10..],
        })
    }
}

/// A sink with a fixed number of chunks that keeps what it is given.
struct VecSink {
    free: Vec<Chunk>,
    out: Vec<Chunk>,
}

impl ChunkSink for VecSink {
    fn acquire(&mut self) -> Option<Chunk> {
        self.free.pop()
    }
    fn emit(&mut self, chunk: Chunk) {
        self.out.push(chunk);
    }
}

const PAYLOAD: usize = 12;

/// Deterministic per-packet bytes, so contents can be checked independently.
fn payload(stream: usize, index: u64, salt: u8) -> Vec<u8> {
    (0..PAYLOAD)
        .map(|k| (index as u8).wrapping_mul(31) ^ (stream as u8 * 7) ^ (k as u8) ^ salt)
        .collect()
}

fn packet(stream: usize, index: u64) -> Vec<u8> {
    let mut p = index.to_be_bytes().to_vec();
    p.extend_from_slice(&(stream as u16).to_be_bytes());
    p.extend(payload(stream, index, 0x5a));
    p
}

fn assembler(
    streams: usize,
    ppc: usize,
    window: usize,
    nchunks: usize,
) -> Assembler<Counter, VecSink> {
    aged_assembler(streams, ppc, window, nchunks, None)
}

/// As [`assembler`], with a flush age.
fn aged_assembler(
    streams: usize,
    ppc: usize,
    window: usize,
    nchunks: usize,
    flush_age: Option<Duration>,
) -> Assembler<Counter, VecSink> {
    let layout = ChunkLayout {
        streams,
        packets_per_chunk: ppc,
        payload_len: PAYLOAD,
    };
    let sink = VecSink {
        free: (0..nchunks).map(|_| Chunk::new(layout).unwrap()).collect(),
        out: Vec::new(),
    };
    let cfg = AssemblerConfig {
        packets_per_chunk: ppc,
        window,
        resync_chunks: 8,
        flush_age,
        ..AssemblerConfig::new(ppc)
    };
    Assembler::new(
        Counter {
            streams,
            payload: PAYLOAD,
        },
        sink,
        &cfg,
    )
    .unwrap()
}

/// Checks every present packet's bytes and returns (chunk_id, present positions).
fn emitted(a: &Assembler<Counter, VecSink>) -> Emitted {
    let l = a.layout;
    a.sink
        .out
        .iter()
        .map(|ch| {
            let mut present = Vec::new();
            for s in 0..l.streams {
                for k in 0..l.packets_per_chunk {
                    if ch.is_present(s, k) {
                        let idx = ch.first_index() + k as u64;
                        assert_eq!(ch.payload(s, k).unwrap(), payload(s, idx, 0x5a));
                        present.push((s, idx));
                    }
                }
            }
            assert_eq!(present.len(), ch.present_count());
            (ch.chunk_id(), present)
        })
        .collect()
}

#[test]
fn reordering_inside_the_window_loses_nothing() {
    let mut a = assembler(2, 4, 2, 8);
    // Two chunks interleaved out of order (the first packet fixes the timeline
    // start, so it comes from chunk 0), both streams.
    let order = [1u64, 0, 5, 3, 7, 2, 6, 4];
    for s in [1, 0] {
        for &i in &order {
            a.push(&packet(s, i));
        }
    }
    a.finish();
    let c = a.counters();
    assert_eq!(c.streams[0].received, 8);
    assert_eq!(c.streams[1].received, 8);
    assert_eq!(c.total().missing + c.total().late + c.total().duplicate, 0);
    let out = emitted(&a);
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), [0, 1]);
    assert!(out.iter().all(|o| o.1.len() == 8));
    assert_eq!(c.total().bytes, 16 * PAYLOAD as u64);
}

#[test]
fn duplicates_late_malformed_and_foreign_are_counted_once_each() {
    let mut a = assembler(2, 4, 2, 8);
    for i in 0..4 {
        a.push(&packet(0, i));
    }
    a.push(&packet(0, 2)); // duplicate
    a.push(&packet(0, 9)); // chunk 2: flushes chunk 0
    a.push(&packet(1, 3)); // chunk 0, now behind the window: late
    a.push(&packet(5, 8)); // stream 5 does not exist: foreign
    a.push(&packet(0, 8)[..7]); // truncated: malformed
    a.push(&[packet(0, 8), vec![0]].concat()); // wrong length: malformed
    a.push_truncated();
    a.finish();
    let c = a.counters().clone();
    assert_eq!(c.streams[0].duplicate, 1);
    assert_eq!(c.streams[1].late, 1);
    assert_eq!(c.foreign, 1);
    assert_eq!(c.malformed, 3);
    assert_eq!(c.streams[0].received, 5);
    assert_eq!(c.accounted(), 11);
    // Chunk 0: stream 1 absent (4). Chunk 1: nothing arrived (2 x 4).
    // Chunk 2: due up to index 9, the highest seen; 9 is present for stream 0
    // only (floor is 0, so 8 counts too).
    assert_eq!(c.streams[0].missing, 4 + 1);
    assert_eq!(c.streams[1].missing, 4 + 4 + 2);
    assert_eq!(emitted(&a).iter().map(|o| o.0).collect::<Vec<_>>(), [0, 2]);
}

#[test]
fn first_packet_sets_the_floor_for_missing() {
    let mut a = assembler(1, 8, 2, 4);
    for i in [13u64, 14, 12, 15] {
        a.push(&packet(0, i));
    }
    a.finish();
    // Chunk 1 covers 8..16; 8..13 precede the capture's start, 12 came reordered.
    let c = a.counters();
    assert_eq!((c.streams[0].received, c.streams[0].missing), (4, 0));
    let out = emitted(&a);
    assert_eq!(out[0].1, [(0, 12), (0, 13), (0, 14), (0, 15)]);
}

#[test]
fn gap_counts_missing_for_the_chunks_skipped() {
    let mut a = assembler(1, 4, 2, 8);
    for i in (0..4).chain(20..24) {
        a.push(&packet(0, i));
    }
    a.finish();
    let c = a.counters();
    assert_eq!(c.streams[0].missing, 16); // chunks 1..5
    assert_eq!(c.resyncs, 0);
    assert_eq!(emitted(&a).iter().map(|o| o.0).collect::<Vec<_>>(), [0, 5]);
}

#[test]
fn time_stamp_jump_resynchronises_both_ways() {
    let mut a = assembler(1, 4, 2, 8);
    for i in 0..6 {
        a.push(&packet(0, i));
    }
    let far = 1_000_000_007u64;
    for i in far..far + 3 {
        a.push(&packet(0, i));
    }
    a.push(&packet(0, 1)); // long jump back: a restart, not a late packet
    a.finish();
    let c = a.counters();
    assert_eq!(c.resyncs, 2);
    assert_eq!(c.streams[0].received, 10);
    // Each timeline is due from its first packet (floor) to its highest one
    // (top), and every packet in between arrived: nothing is missing, although
    // chunk 1, the far timeline's second chunk and the restarted chunk 0 are
    // all partly filled.
    assert_eq!(c.streams[0].missing, 0);
    assert_eq!(c.streams[0].late, 0);
    let ids: Vec<u64> = emitted(&a).iter().map(|o| o.0).collect();
    assert_eq!(ids, [0, 1, far / 4, far / 4 + 1, 0]);
}

#[test]
fn partial_chunks_are_flushed_at_finish() {
    let mut a = assembler(2, 4, 3, 8);
    for (s, i) in [(0, 0), (1, 1), (0, 4), (1, 9)] {
        a.push(&packet(s, i));
    }
    a.finish();
    let out = emitted(&a);
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], (0, vec![(0, 0), (1, 1)]));
    assert_eq!(out[1], (1, vec![(0, 4)]));
    assert_eq!(out[2], (2, vec![(1, 9)]));
    // Chunks 0 and 1 are due in full; chunk 2 only up to index 9, the highest
    // seen: what would follow it was never sent.
    assert_eq!(a.counters().total().missing, (8 - 2) + (8 - 1) + (4 - 1));
}

#[test]
fn no_free_chunk_drops_the_chunk_whole() {
    let mut a = assembler(1, 4, 2, 1);
    for i in 0..12 {
        a.push(&packet(0, i));
    }
    a.push(&packet(0, 9)); // duplicate inside a dropped chunk is still a duplicate
    a.finish();
    let c = a.counters();
    // Chunk 0 got the only buffer (never returned); chunks 1 and 2 are dropped.
    assert_eq!(c.streams[0].received, 4);
    assert_eq!(c.streams[0].dropped, 8);
    assert_eq!(c.streams[0].duplicate, 1);
    assert_eq!((c.chunks_emitted, c.chunks_dropped), (1, 2));
    assert_eq!(c.accounted(), 13);
}

/// Found by fuzz/fuzz_targets/assembler.rs: a packet at index u64::MAX (the
/// counter and layout formats carry a full 64-bit index) overflowed the
/// one-past-the-end bound of the timeline, and with one packet per chunk
/// also `head`: a panic in debug builds; in release builds the bound wrapped
/// to 0 and the other streams' absent packets of that last chunk were not
/// counted missing.
#[test]
fn the_last_index_of_the_timeline_does_not_overflow() {
    for ppc in [1usize, 4] {
        let mut a = assembler(2, ppc, 2, 4);
        a.push(&packet(0, u64::MAX - 2));
        a.push(&packet(0, u64::MAX));
        a.push(&packet(0, u64::MAX)); // duplicate
        a.finish();
        let c = &a.counters().streams;
        assert_eq!((c[0].received, c[0].duplicate), (2, 1), "ppc {ppc}");
        // Due: u64::MAX - 2 ..= u64::MAX on both streams.
        assert_eq!((c[0].missing, c[1].missing), (1, 3), "ppc {ppc}");
        let ids: Vec<u64> = emitted(&a).iter().map(|o| o.0).collect();
        let want: Vec<u64> = match ppc {
            1 => vec![u64::MAX - 2, u64::MAX],
            _ => vec![u64::MAX / 4],
        };
        assert_eq!(ids, want, "ppc {ppc}");
    }
}

/// Found while writing the assembler fuzz target (which now covers it): a forward jump below the resync bound flushed one
/// chunk per chunk jumped, so with a large `resync_chunks` (a user setting)
/// one bad packet kept the capture thread busy for hours.
#[test]
fn a_long_jump_below_the_resync_bound_is_counted_at_once() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let layout = ChunkLayout {
            streams: 2,
            packets_per_chunk: 4,
            payload_len: PAYLOAD,
        };
        let sink = VecSink {
            free: (0..4).map(|_| Chunk::new(layout).unwrap()).collect(),
            out: Vec::new(),
        };
        let cfg = AssemblerConfig {
            packets_per_chunk: 4,
            window: 2,
            resync_chunks: u64::MAX,
            flush_age: None,
            ..AssemblerConfig::new(4)
        };
        let counter = Counter {
            streams: 2,
            payload: PAYLOAD,
        };
        let mut a = Assembler::new(counter, sink, &cfg).unwrap();
        let far = 1_000_000_000_000_000u64; // chunks
        for s in 0..2 {
            for i in 0..4 {
                a.push(&packet(s, i));
            }
        }
        a.push(&packet(0, 4 * far));
        a.push(&packet(1, 4 * far));
        a.finish();
        tx.send((a.counters().clone(), emitted(&a))).unwrap();
    });
    let (c, out) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the jump must not take one step per chunk");
    assert_eq!(c.resyncs, 0);
    // Chunks 1 .. far - 1 were due in full and never came.
    let far = 1_000_000_000_000_000u64;
    for s in &c.streams {
        assert_eq!((s.received, s.missing), (5, (far - 1) * 4));
    }
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), [0, far]);
}

/// Small deterministic generator (xorshift) so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random round's streams, packets per chunk, window and packet count, and its
/// packets: a regular sequence reordered (by up to window + 1 chunks, a share
/// `delay_rate` of them), dropped and duplicated; jumps stay below the resync bound
/// of 8 chunks. `faults` tells what was injected.
struct RandomRound {
    streams: usize,
    ppc: usize,
    window: usize,
    n: u64,
    packets: Vec<Delivered>,
    faults: Injector,
}

fn random_round(rng: &mut Rng, delay_rate: f64) -> RandomRound {
    let streams = 1 + rng.below(3) as usize;
    let ppc = 1 + rng.below(9) as usize;
    let window = 1 + rng.below(4) as usize;
    let start = rng.below(1000);
    let n = rng.below(120);
    let sent = (start..start + n).flat_map(|i| (0..streams).map(move |s| packet(s, i)));
    let displace = streams * ppc * (window + 1);
    let mut faults = FaultPlan::new(rng.next())
        .rate(Fault::Drop, 0.10)
        .rate(Fault::Duplicate { delay: displace }, 0.05)
        .rate(Fault::Delay(displace), delay_rate)
        .injector()
        .unwrap();
    let packets = faults.apply(sent);
    RandomRound {
        streams,
        ppc,
        window,
        n,
        packets,
        faults,
    }
}

type Emitted = Vec<(u64, Vec<(usize, u64)>)>;

/// Reference model: the same rules written as plainly as possible, on sets.
fn model(packets: &[(usize, u64)], streams: usize, ppc: u64, window: u64) -> (Counters, Emitted) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut c = Counters::new(streams);
    let mut open: BTreeMap<u64, BTreeSet<(usize, u64)>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut head = packets.first().map_or(0, |p| p.1 / ppc);
    let floor = packets.first().map_or(0, |p| p.1);
    let mut top = floor + 1;
    let expected =
        |id: u64, top: u64| (id * ppc..id * ppc + ppc).filter(move |&i| i >= floor && i < top);
    let mut flush = |id: u64, set: Option<BTreeSet<(usize, u64)>>, c: &mut Counters, top| {
        let set = set.unwrap_or_default();
        for (s, sc) in c.streams.iter_mut().enumerate() {
            sc.missing += expected(id, top)
                .filter(|&i| !set.contains(&(s, i)))
                .count() as u64;
        }
        if !set.is_empty() {
            out.push((id, set.into_iter().collect()));
            c.chunks_emitted += 1;
        }
    };
    for &(s, i) in packets {
        let id = i / ppc;
        if id < head {
            c.streams[s].late += 1;
            continue;
        }
        while id >= head + window {
            let set = open.remove(&head);
            flush(head, set, &mut c, u64::MAX);
            head += 1;
        }
        top = top.max(i + 1);
        if !open.entry(id).or_default().insert((s, i)) {
            c.streams[s].duplicate += 1;
        } else {
            c.streams[s].received += 1;
            c.streams[s].bytes += PAYLOAD as u64;
        }
    }
    if let Some(&newest) = open.keys().max() {
        while head <= newest {
            let set = open.remove(&head);
            flush(head, set, &mut c, top);
            head += 1;
        }
    }
    (c, out)
}

#[test]
fn random_streams_match_the_model() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen = StreamCounters::default();
    for round in 0..300 {
        let r = random_round(&mut rng, 0.5);
        let (streams, ppc, window) = (r.streams, r.ppc, r.window);
        let packets: Vec<(usize, u64)> = r
            .packets
            .iter()
            .map(|d| {
                let b = d.bytes().unwrap();
                let index = u64::from_be_bytes(b[..8].try_into().unwrap());
                (u16::from_be_bytes([b[8], b[9]]) as usize, index)
            })
            .collect();
        assert_eq!(packets.len() as u64, r.faults.injected().delivered);
        let mut a = assembler(streams, ppc, window, 64 + r.n as usize);
        for &(s, i) in &packets {
            a.push(&packet(s, i));
        }
        a.finish();
        let (want, want_out) = model(&packets, streams, ppc as u64, window as u64);
        assert_eq!(a.counters(), &want, "round {round}");
        assert_eq!(a.counters().accounted(), packets.len() as u64);
        assert_eq!(emitted(&a), want_out, "round {round}");
        let t = want.total();
        seen.late += t.late;
        seen.duplicate += t.duplicate;
        seen.missing += t.missing;
    }
    // The generator must exercise every path the model describes.
    assert!(
        seen.late > 100 && seen.duplicate > 100 && seen.missing > 100,
        "{seen:?}"
    );
}

#[path = "assembler_age_tests.rs"]
mod age;
