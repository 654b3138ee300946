//! One capture spread over threads by chunk id: real packet rings on loopback
//! in one fanout group, the kernel running the chunk-steering program.

use super::*;
use crate::capture::{Fault, FaultPlan};
use std::collections::BTreeMap;
use std::net::UdpSocket;

const LEN: usize = 32;
const STREAMS: usize = 2;
const PPC: usize = 8;
const PACKETS: u64 = 96; // per stream: 12 chunks

fn packet(stream: u16, index: u64) -> Vec<u8> {
    let mut p = index.to_be_bytes().to_vec();
    p.extend_from_slice(&stream.to_be_bytes());
    p.extend((0..LEN).map(|k| (index as usize * 7 + k + stream as usize * 3) as u8));
    p
}

/// (stream 1, index 64 + 41) never arrives.
fn lost(s: usize, i: u64) -> bool {
    (s, i) == (1, 64 + 41)
}

/// A counter-format capture of `streams` streams on loopback, `threads` packet
/// rings taking turns by chunk, each thread's window `window` chunks.
fn spread(streams: usize, threads: usize, window: usize) -> (CaptureGroup, std::net::SocketAddr) {
    let (locator, ring) = super::tests::counter_rings(streams, LEN);
    let engines = packet_ring_chunk_fanout(&ring, &locator, PPC, threads).unwrap();
    let to = engines[0].local_addr().unwrap();
    let mut cfg = ChunkConfig::new(PPC);
    cfg.nchunks = 48;
    cfg.assembler.window = window;
    let group = CaptureGroup::start_chunks(engines, locator, &[], &cfg, 128).unwrap();
    assert_eq!(group.chunk_stride(), threads);
    (group, to)
}

fn run(threads: usize) {
    let (group, to) = spread(STREAMS, threads, 4);
    // Packet (s, i) is at position 2 * i + s.
    let mut faults = FaultPlan::new(0)
        .at(2 * 41 + 1, Fault::Drop)
        .at(2 * 20, Fault::Duplicate { delay: 0 })
        .injector()
        .unwrap();
    let sent = faults
        .apply((0..PACKETS).flat_map(|i| (0..STREAMS as u16).map(move |s| packet(s, i + 64))));
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &sent {
        tx.send_to(d.bytes().unwrap(), to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    group.stop().unwrap();
    let g = group.stats();
    let tot = &g.total.counters;
    for s in 0..STREAMS {
        let lost_here = (0..PACKETS).filter(|&i| lost(s, i + 64)).count() as u64;
        assert_eq!(tot.streams[s].received, PACKETS - lost_here, "stream {s}");
        assert_eq!(tot.streams[s].missing, lost_here, "stream {s}");
        assert_eq!(tot.streams[s].duplicate, (s == 0) as u64);
        assert_eq!(tot.streams[s].late, 0);
    }
    assert_eq!((tot.foreign, tot.malformed), (0, 0));
    assert_eq!(tot.chunks_emitted, PACKETS / PPC as u64);
    // Every chunk comes from the thread the kernel gave it to, whole.
    let mut ids = BTreeMap::new();
    for t in 0..threads {
        let c = &g.threads[t].snapshot.counters;
        assert!(c.chunks_emitted > 0, "thread {t} got chunks");
        while let Some(ch) = group.next_chunk(t, Duration::from_millis(10)) {
            let id = ch.chunk_id();
            assert_eq!(id % threads as u64, t as u64, "chunk {id} on thread {t}");
            for s in 0..STREAMS {
                for j in 0..PPC {
                    let i = ch.first_index() + j as u64;
                    assert_eq!(ch.is_present(s, j), !lost(s, i), "({s}, {i})");
                    if !lost(s, i) {
                        assert_eq!(ch.payload(s, j).unwrap(), &packet(s as u16, i)[10..]);
                    }
                }
            }
            ids.insert(id, t);
        }
    }
    let want: Vec<u64> = (8..8 + PACKETS / PPC as u64).collect();
    assert_eq!(ids.keys().copied().collect::<Vec<_>>(), want);
}

#[test]
fn one_stream_set_spreads_over_two_threads_by_chunk() {
    run(2);
}

#[test]
fn three_threads_take_every_third_chunk_with_exact_counters() {
    run(3);
}

/// A local sender's UDP GSO super-frames (5 datagrams each) straddle chunk
/// boundaries: the kernel steers each whole by its first datagram, the
/// thread that gets another's packets forwards them (`Strays`), and nothing is
/// lost, dropped or counted foreign.
#[test]
fn gso_frames_across_chunk_boundaries_reach_the_owner() {
    use std::os::fd::AsRawFd;
    // The whole test in each thread's window: the packets arrive faster than any
    // rate the window is sized for, and this checks forwarding, not timing.
    let (group, to) = spread(1, 2, 8);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let seg = (10 + LEN) as libc::c_int;
    // UDP_SEGMENT (include/uapi/linux/udp.h): one send becomes several datagrams.
    // SAFETY: the fd is the open socket `tx`; the option value is a live c_int
    // whose size is passed with it.
    let ok = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_UDP,
            103,
            &seg as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(ok, 0, "UDP_SEGMENT");
    for first in (64..64 + PACKETS).step_by(5) {
        let last = (first + 5).min(64 + PACKETS);
        let frame: Vec<u8> = (first..last).flat_map(|i| packet(0, i)).collect();
        tx.send_to(&frame, to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    group.stop().unwrap();
    let g = group.stats();
    let s = &g.total.counters.streams[0];
    assert_eq!(
        (s.received, s.missing, s.dropped, s.late),
        (PACKETS, 0, 0, 0)
    );
    assert_eq!(
        (g.total.counters.foreign, g.total.counters.malformed),
        (0, 0)
    );
    let mut ids = Vec::new();
    for t in 0..2 {
        while let Some(ch) = group.next_chunk(t, Duration::from_millis(10)) {
            assert_eq!(ch.chunk_id() % 2, t as u64);
            for j in 0..PPC {
                let i = ch.first_index() + j as u64;
                assert!(ch.is_present(0, j), "{i}");
                assert_eq!(ch.payload(0, j).unwrap(), &packet(0, i)[10..]);
            }
            ids.push(ch.chunk_id());
        }
    }
    ids.sort();
    assert_eq!(ids, (8..8 + PACKETS / PPC as u64).collect::<Vec<_>>());
}
