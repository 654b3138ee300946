//! Tests of the flush age: a chunk open that long goes out at the next tick,
//! whatever the packet rate, and every packet and position is still counted once.

use super::*;

const AGE: Duration = Duration::from_millis(500);

fn ids(a: &Assembler<Counter, VecSink>) -> Vec<u64> {
    emitted(a).iter().map(|o| o.0).collect()
}

#[test]
fn a_partial_chunk_goes_out_at_its_age_and_its_stragglers_count_late() {
    let mut a = aged_assembler(1, 4, 4, 8, Some(AGE));
    let t0 = Instant::now();
    a.push(&packet(0, 0));
    a.push(&packet(0, 1));
    a.tick(t0); // chunk 0 opened in this batch
    a.tick(t0 + AGE / 2);
    assert!(ids(&a).is_empty(), "not yet aged");
    a.tick(t0 + AGE);
    assert_eq!(emitted(&a), [(0, vec![(0, 0), (0, 1)])]);
    // Due up to the highest packet seen: nothing missing yet.
    assert_eq!(a.counters().streams[0].missing, 0);
    a.push(&packet(0, 3)); // its chunk is on its way to disk: late
    for i in 4..8 {
        a.push(&packet(0, i));
    }
    a.tick(t0 + AGE + AGE / 4);
    // The stream went on past chunk 0: its positions 2 and 3 were due.
    let c = &a.counters().streams[0];
    assert_eq!((c.received, c.late, c.missing), (6, 1, 2));
    a.finish();
    assert_eq!(ids(&a), [0, 1]);
    assert_eq!(a.counters().accounted(), 7);
    assert_eq!(a.counters().streams[0].missing, 2);
}

#[test]
fn a_stream_that_ends_after_an_aged_flush_has_nothing_missing() {
    let mut a = aged_assembler(2, 8, 4, 8, Some(AGE));
    let t0 = Instant::now();
    for i in 0..3 {
        a.push(&packet(0, i));
        a.push(&packet(1, i));
    }
    a.tick(t0);
    a.tick(t0 + AGE);
    a.finish(); // the stream ended at index 2: positions 3.. were never due
    let c = a.counters();
    assert_eq!((c.total().received, c.total().missing), (6, 0));
    assert_eq!(ids(&a), [0]);
}

#[test]
fn an_aged_chunk_goes_out_with_every_older_one_and_newer_ones_wait() {
    let mut a = aged_assembler(1, 4, 3, 8, Some(AGE));
    let t0 = Instant::now();
    a.push(&packet(0, 0)); // chunk 0
    a.tick(t0);
    a.push(&packet(0, 9)); // chunk 2 (chunk 1 a gap)
    a.tick(t0 + AGE / 2);
    a.tick(t0 + AGE);
    // Chunk 0 aged; a later chunk has packets, so it was due in full.
    assert_eq!(ids(&a), [0]);
    assert_eq!(a.counters().streams[0].missing, 3);
    a.push(&packet(0, 8)); // chunk 2 is still open: placed
    a.push(&packet(0, 2)); // chunk 0 is behind the head now: late
    a.tick(t0 + AGE + AGE / 2);
    // Chunk 2 aged in its turn, the gap of chunk 1 before it (due in full);
    // 10 and 11 not yet due.
    assert_eq!(ids(&a), [0, 2]);
    let c = &a.counters().streams[0];
    assert_eq!((c.received, c.late, c.missing), (3, 1, 3 + 4));
    a.finish();
    assert_eq!(a.counters().accounted(), 4);
}

#[test]
fn a_paused_stream_is_flushed_by_ticks_alone() {
    let mut a = aged_assembler(1, 256, 4, 8, Some(AGE));
    let t0 = Instant::now();
    for i in 0..10 {
        a.push(&packet(0, i));
    }
    // The capture thread ticks after every wait, packets or not.
    let mut t = t0;
    while t < t0 + 2 * AGE {
        a.tick(t);
        t += Duration::from_millis(100);
    }
    assert_eq!(ids(&a), [0]);
    assert_eq!(emitted(&a)[0].1.len(), 10);
}

#[test]
fn without_a_flush_age_ticks_change_nothing() {
    let mut a = assembler(1, 4, 4, 8);
    let t0 = Instant::now();
    a.push(&packet(0, 0));
    a.tick(t0);
    a.tick(t0 + Duration::from_secs(3600));
    assert!(ids(&a).is_empty());
}

#[test]
fn a_zero_flush_age_is_refused() {
    let mut cfg = AssemblerConfig::new(4);
    cfg.flush_age = Some(Duration::ZERO);
    assert!(cfg.validate().is_err());
}

/// Random streams (reordered, dropped, duplicated) with ticks at random times:
/// every packet is counted once, and each stream's positions from the first
/// packet to the highest one placed (not late) are each received, dropped or
/// missing, once.
#[test]
fn random_streams_with_ticks_count_every_packet_and_position_once() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut late, mut aged_out) = (0, 0);
    for round in 0..300 {
        let RandomRound {
            streams,
            ppc,
            window,
            n,
            packets,
            ..
        } = random_round(&mut rng, 0.3);
        let nchunks = if round % 5 == 0 { 2 } else { 64 + n as usize };
        let mut a = aged_assembler(streams, ppc, window, nchunks, Some(AGE));
        let mut now = Instant::now();
        let (mut first, mut top) = (None, 0u64);
        // Per stream, packets placed before the first one's index (reordered):
        // received, though positions before the first are never counted missing.
        let mut early = vec![std::collections::BTreeSet::new(); streams];
        for d in &packets {
            let b = d.bytes().unwrap();
            let index = u64::from_be_bytes(b[..8].try_into().unwrap());
            let first = *first.get_or_insert(index);
            let late_before = a.counters().total().late;
            a.push(b);
            if a.counters().total().late == late_before {
                top = top.max(index); // placed (or dropped, or a duplicate)
                if index < first {
                    early[u16::from_be_bytes([b[8], b[9]]) as usize].insert(index);
                }
            }
            if rng.below(4) == 0 {
                now += Duration::from_millis(rng.below(400));
                let out = a.counters().chunks_emitted + a.counters().chunks_dropped;
                a.tick(now);
                aged_out += a.counters().chunks_emitted + a.counters().chunks_dropped - out;
            }
        }
        a.finish();
        let c = a.counters();
        assert_eq!(c.accounted(), packets.len() as u64, "round {round}");
        if let Some(first) = first {
            for (s, sc) in c.streams.iter().enumerate() {
                let counted = sc.received + sc.dropped + sc.missing;
                let due = top - first + 1 + early[s].len() as u64;
                assert_eq!(counted, due, "round {round} stream {s}");
            }
        }
        let out = ids(&a); // also checks every packet's bytes
        assert!(
            out.windows(2).all(|w| w[0] < w[1]),
            "round {round}: {out:?}"
        );
        late += c.total().late;
    }
    assert!(
        late > 100 && aged_out > 100,
        "late {late}, aged out {aged_out}"
    );
}
