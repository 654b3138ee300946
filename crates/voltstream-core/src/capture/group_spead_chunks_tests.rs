//! One SPEAD digitiser stream spread over threads by chunk: real packet rings
//! on loopback in one fanout group, the kernel reading each heap's time stamp
//! item at its fixed item pointer.

use super::*;
use crate::wire::{FormatSpec, SpeadPacket, SpeadRepr};
use std::net::UdpSocket;

const SAMPLES: u64 = 64; // per heap, 8-bit: 64 payload bytes
const PPC: usize = 8;
const HEAPS: u64 = 96; // 12 chunks
const FIRST: u64 = 64; // heap index of the first packet: chunk 8
/// Sent with its time stamp and id items swapped: thread 0 gets it from the
/// kernel and forwards it to thread 1, whose chunk 9 it belongs in.
const SWAPPED: u64 = FIRST + 8 + 3;

fn payload(heap: u64) -> Vec<u8> {
    (0..SAMPLES).map(|k| (heap * 5 + k) as u8).collect()
}

fn heap_packet(heap: u64) -> Vec<u8> {
    let mut r = SpeadRepr::digitiser(heap * SAMPLES, SAMPLES, 0, SAMPLES);
    if heap == SWAPPED {
        r.items.swap(0, 1);
    }
    let mut b = vec![0u8; r.packet_len()];
    r.emit(&mut SpeadPacket::new_unchecked(&mut b[..])).unwrap();
    let n = b.len();
    b[n - SAMPLES as usize..].copy_from_slice(&payload(heap));
    b
}

/// Sends the heaps to two threads taking turns by chunk; `stray_len` is the
/// longest packet a thread can forward to another (`Strays`).
fn run(stray_len: usize) {
    let locator = FormatSpec::spead_digitiser(vec![0], SAMPLES, 8)
        .unwrap()
        .locator()
        .unwrap();
    let (_, ring) = super::tests::counter_rings(1, 4);
    let engines = packet_ring_chunk_fanout(&ring, &locator, PPC, 2).unwrap();
    let to = engines[0].local_addr().unwrap();
    let mut cfg = ChunkConfig::new(PPC);
    cfg.nchunks = 48;
    cfg.assembler.window = 8;
    let group = CaptureGroup::start_chunks(engines, locator, &[], &cfg, stray_len).unwrap();
    assert_eq!(group.chunk_stride(), 2);

    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for heap in FIRST..FIRST + HEAPS {
        tx.send_to(&heap_packet(heap), to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    group.stop().unwrap();
    let g = group.stats();
    let s = &g.total.counters.streams[0];
    // Too long to forward: the swapped packet alone is dropped, so the kernel
    // gave every other packet to its chunk's owner.
    let lost = (heap_packet(SWAPPED).len() > stray_len) as u64;
    let present = |heap: u64| heap != SWAPPED || lost == 0;
    assert_eq!(
        (s.received, s.missing, s.dropped, s.late),
        (HEAPS - lost, lost, lost, 0)
    );
    assert_eq!((s.duplicate, g.total.counters.foreign), (0, 0));
    assert_eq!(g.total.counters.malformed, 0);
    // Thread 1 received only its own chunks' packets from the kernel, plus the
    // swapped one forwarded by thread 0: each placed once, where it belongs.
    let mut ids = Vec::new();
    for t in 0..2 {
        assert_eq!(
            g.threads[t].snapshot.counters.chunks_emitted,
            HEAPS / PPC as u64 / 2
        );
        while let Some(ch) = group.next_chunk(t, Duration::from_millis(10)) {
            assert_eq!(ch.chunk_id() % 2, t as u64, "chunk {}", ch.chunk_id());
            for j in 0..PPC {
                let heap = ch.first_index() + j as u64;
                assert_eq!(ch.is_present(0, j), present(heap), "heap {heap}");
                if present(heap) {
                    assert_eq!(ch.payload(0, j).unwrap(), &payload(heap)[..]);
                }
            }
            ids.push(ch.chunk_id());
        }
    }
    ids.sort();
    let want: Vec<u64> = (FIRST / PPC as u64..(FIRST + HEAPS) / PPC as u64).collect();
    assert_eq!(ids, want);
}

#[test]
fn spead_digitiser_heaps_spread_over_two_threads_by_chunk() {
    run(256);
}

#[test]
fn only_the_packet_without_its_timestamp_in_place_is_a_stray() {
    run(128);
}
