//! Tests of the frame sender over loopback: headers, pattern, pacing,
//! skip and reverse, and the frame assembler reading its packets.

use std::net::UdpSocket;

use super::*;
use crate::latency::frame::{FrameAssembler, FrameConfig};
use crate::latency::{FrameDone, FrameKind, FrameSink};

fn receiver() -> UdpSocket {
    let r = UdpSocket::bind("127.0.0.1:0").unwrap();
    r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    // Room for every packet of a test even if the reader is slow to run.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&r);
    crate::capture::host::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &(4 << 20)).unwrap();
    r
}

/// Receives `n` datagrams.
fn recv_all(rx: &UdpSocket, n: usize) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 65536];
    (0..n)
        .map(|_| {
            let got = rx.recv(&mut buf).unwrap();
            buf[..got].to_vec()
        })
        .collect()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks one packet's header and pattern; returns (frame, k, t_send).
fn check_packet(b: &[u8], p: usize, pl: usize) -> (u64, u64, u64) {
    assert_eq!(b.len(), HEADER_LEN + pl);
    assert_eq!(&b[..4], b"TALV"); // 0x564C4154 little-endian
    let (k, frame) = (u16_at(b, 4) as u64, u64_at(b, 24));
    assert_eq!(u16_at(b, 6) as usize, p);
    assert_eq!(u64_at(b, 8), frame * p as u64 + k);
    for (w, word) in b[HEADER_LEN..].chunks_exact(8).enumerate() {
        let j = k * (pl / 8) as u64 + w as u64;
        assert_eq!(
            u64::from_le_bytes(word.try_into().unwrap()),
            pattern_word(frame, j)
        );
    }
    (frame, k, u64_at(b, 16))
}

#[test]
fn frames_arrive_stamped_paced_and_patterned() {
    let rx = receiver();
    let (p, pl) = (4, 64);
    let mut tx = FrameSender::new(rx.local_addr().unwrap(), None, p, pl).unwrap();
    let before = monotonic_ns();
    // 10 frames at 2 kHz: 4.5 ms from the first to the last.
    let st = tx.send_frames(100, 10, 2000.0, None, false).unwrap();
    assert_eq!((st.frames, st.packets, st.bytes), (10, 40, 40 * 96));
    assert!(st.t_first_send_ns >= before);
    assert!(
        st.t_last_send_ns - st.t_first_send_ns >= 4_400_000,
        "{st:?}"
    );
    let got = recv_all(&rx, 40);
    let mut stamps = Vec::new();
    for (i, b) in got.iter().enumerate() {
        let (frame, k, t) = check_packet(b, p, pl);
        assert_eq!((frame, k), (100 + i as u64 / 4, i as u64 % 4));
        if k == 0 {
            stamps.push(t);
        } else {
            assert_eq!(t, *stamps.last().unwrap(), "one stamp per frame");
        }
    }
    assert_eq!(
        (stamps[0], stamps[9]),
        (st.t_first_send_ns, st.t_last_send_ns)
    );
    // Frame i is due 500 µs * i after the call began (a late frame does
    // not move the later ones, so gaps may be shorter, never the schedule).
    for (i, t) in stamps.iter().enumerate() {
        assert!(*t >= before + 500_000 * i as u64, "frame {i}: {stamps:?}");
    }
}

#[test]
fn skip_and_reverse() {
    let rx = receiver();
    let (p, pl) = (4, 8);
    let mut tx = FrameSender::new(rx.local_addr().unwrap(), None, p, pl).unwrap();
    let st = tx.send_frames(0, 6, 0.0, Some((3, 1)), true).unwrap();
    assert_eq!(st.packets, 22);
    let order: Vec<(u64, u64)> = recv_all(&rx, 22)
        .iter()
        .map(|b| {
            let (f, k, _) = check_packet(b, p, pl);
            (f, k)
        })
        .collect();
    let want: Vec<(u64, u64)> = (0..6)
        .flat_map(|f| (0..4).rev().map(move |k| (f, k)))
        .filter(|&(f, k)| !(f % 3 == 0 && k == 1))
        .collect();
    assert_eq!(order, want);
}

/// Keeps published frames and their bytes.
struct Keep {
    bytes: Vec<Vec<u8>>,
    done: Vec<FrameDone>,
    frame_bytes: usize,
}

impl FrameSink for Keep {
    fn claim(&mut self, _seq: u64) -> bool {
        self.bytes.push(vec![0; self.frame_bytes]);
        true
    }
    fn write(&mut self, seq: u64, offset: usize, bytes: &[u8]) {
        self.bytes[seq as usize - 1][offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    fn publish(&mut self, done: &FrameDone) {
        self.done.push(*done);
    }
}

#[test]
fn the_frame_assembler_reads_the_bench_layout() {
    let rx = receiver();
    let (p, pl) = (8, 1024);
    let mut tx = FrameSender::new(rx.local_addr().unwrap(), None, p, pl).unwrap();
    // Received while sent: 160 kB is more than a default socket buffer.
    let reader = std::thread::spawn(move || recv_all(&rx, 158));
    let st = tx
        .send_frames(5, 20, 20_000.0, Some((10, 3)), false)
        .unwrap();
    assert_eq!(st.packets, 158);
    let got = reader.join().unwrap();
    let (layout, send_time) = bench_layout(pl);
    layout.validate().unwrap();
    let cfg = FrameConfig {
        send_time: Some(send_time),
        ..FrameConfig::new(p)
    };
    let mut asm = FrameAssembler::new(layout, cfg).unwrap();
    let mut sink = Keep {
        bytes: Vec::new(),
        done: Vec::new(),
        frame_bytes: p * pl,
    };
    for b in &got {
        asm.push(b, monotonic_ns(), &mut sink);
    }
    asm.finish(monotonic_ns(), &mut sink);
    // Of frames 5..25, frames 10 and 20 lack packet 3.
    let kinds: Vec<(u64, FrameKind)> = sink.done.iter().map(|d| (d.frame, d.kind)).collect();
    assert_eq!(kinds.len(), 20);
    for (frame, kind) in &kinds {
        let whole = frame % 10 != 0;
        assert_eq!(*kind == FrameKind::Whole, whole, "frame {frame}");
    }
    for d in sink.done.iter().filter(|d| d.kind == FrameKind::Whole) {
        let t = d.t_send_ns.unwrap();
        assert!(t >= st.t_first_send_ns && t <= st.t_last_send_ns);
        assert!(d.t_done_ns >= t);
        let bytes = &sink.bytes[d.seq as usize - 1];
        for (j, w) in bytes.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(w.try_into().unwrap());
            assert_eq!(word, pattern_word(d.frame, j as u64));
        }
    }
    let c = asm.counters();
    assert_eq!(
        (c.received, c.frames_complete, c.frames_incomplete),
        (158, 18, 2)
    );
    assert_eq!((c.malformed, c.missing), (0, 2));
    // A packet with another magic is malformed.
    let mut bad = got[0].clone();
    bad[0] ^= 1;
    asm.push(&bad, 0, &mut sink);
    assert_eq!(asm.counters().malformed, 1);
}

#[test]
fn bad_arguments_are_config_errors() {
    let rx = receiver();
    let dest = rx.local_addr().unwrap();
    for (p, pl) in [(0, 64), (4097, 64), (4, 0), (4, 12), (4, 65_536)] {
        let r = FrameSender::new(dest, None, p, pl);
        assert!(matches!(r, Err(Error::Config(_))), "{p} {pl}");
    }
    let mut tx = FrameSender::new(dest, None, 4, 8).unwrap();
    type Args = (u64, u64, f64, Option<(u64, u16)>);
    let bad: [Args; 5] = [
        (0, 1, -1.0, None),
        (0, 1, f64::NAN, None),
        (u64::MAX, 2, 0.0, None),
        (0, 1, 0.0, Some((0, 1))),
        (0, 1, 0.0, Some((2, 4))),
    ];
    for (first, count, rate, skip) in bad {
        let r = tx.send_frames(first, count, rate, skip, false);
        assert!(
            matches!(r, Err(Error::Config(_))),
            "{first} {rate} {skip:?}"
        );
    }
}
