//! The hand-off protocol against the host stand-in (no GPU): every mode, the
//! ack rules (equality, never "non-zero"), slot reuse, stop, abort, and a
//! deliberately broken stand-in that the sums and the pattern check catch.

use std::time::{Duration, Instant};

use super::*;
use crate::latency::standin::{HostGpu, KernelExit, StandinOptions};

const MODES: [Mode; 4] = [
    Mode::Copy,
    Mode::Persistent,
    Mode::PersistentFlag,
    Mode::ZeroCopy,
];
const PERSISTENT: [Mode; 3] = [Mode::Persistent, Mode::PersistentFlag, Mode::ZeroCopy];
/// Not a multiple of 128, so the payload area is rounded up.
const FRAME: usize = 8232;
const T: Duration = Duration::from_secs(5);

fn config(mode: Mode, slots: usize) -> HandoffConfig {
    let mut c = HandoffConfig::new(mode, FRAME);
    c.slots = slots;
    c.check_pattern = true;
    // Exercises the write-combining fences (ordinary memory in the stand-in).
    c.write_combined = mode == Mode::ZeroCopy;
    c
}

fn standin(mode: Mode, slots: usize, opts: StandinOptions) -> Handoff<HostGpu> {
    Handoff::standin(config(mode, slots), opts, 10_000).unwrap()
}

/// Offers frame `frame` as `seq`, in 1000-byte packets (an incomplete frame
/// gets its first packet only). `false` when the slot is busy.
fn offer(h: &mut Handoff<HostGpu>, seq: u64, frame: u64, kind: FrameKind) -> bool {
    if !h.claim(seq) {
        return false;
    }
    fill_and_publish(h, seq, frame, kind);
    true
}

/// Writes frame `frame`'s payload into claimed `seq` and publishes it.
fn fill_and_publish(h: &mut Handoff<HostGpu>, seq: u64, frame: u64, kind: FrameKind) {
    let mut payload = vec![0u8; FRAME];
    fill_pattern(&mut payload, frame);
    let packets = if kind == FrameKind::Whole {
        payload.len()
    } else {
        1000
    };
    for (k, packet) in payload[..packets].chunks(1000).enumerate() {
        h.write(seq, k * 1000, packet);
    }
    let now = monotonic_ns();
    h.publish(&FrameDone {
        seq,
        frame,
        kind,
        present: 1,
        bytes: FRAME as u32,
        t_first_ns: now,
        t_done_ns: now,
        t_send_ns: Some(now - 1),
    });
}

/// Offers until the slot frees up (bounded).
fn send(h: &mut Handoff<HostGpu>, seq: u64, frame: u64, kind: FrameKind) {
    let deadline = Instant::now() + T;
    while !offer(h, seq, frame, kind) {
        assert!(Instant::now() < deadline, "slot for seq {seq} never freed");
        std::thread::yield_now();
    }
}

fn drain(h: &mut Handoff<HostGpu>) {
    let deadline = Instant::now() + T;
    while h.outstanding() > 0 {
        h.poll_acks(monotonic_ns());
        assert!(
            Instant::now() < deadline,
            "{} frames never acknowledged",
            h.outstanding()
        );
        std::thread::yield_now();
    }
}

#[test]
fn latency_every_mode_acks_every_seq_once_in_order_with_equal_sums() {
    for mode in MODES {
        let mut h = standin(mode, 8, StandinOptions::default());
        for seq in 1..=100u64 {
            send(&mut h, seq, seq * 3, FrameKind::Whole);
        }
        drain(&mut h);
        h.stop(T).unwrap();
        let c = h.counters();
        assert_eq!((c.frames_published, c.frames_acked), (100, 100), "{mode:?}");
        assert_eq!(
            (c.sum_mismatch, c.torn, c.gpu_errors, c.bad_writes),
            (0, 0, 0, 0),
            "{mode:?}"
        );
        let frames: Vec<_> = h
            .records()
            .iter()
            .filter(|r| r.status != STATUS_STOPPED)
            .collect();
        assert_eq!(frames.len(), 100, "{mode:?}");
        for (k, r) in frames.iter().enumerate() {
            assert_eq!(
                (r.seq, r.frame, r.status, r.ok),
                (k as u64 + 1, 3 * (k as u64 + 1), STATUS_OK, true)
            );
            assert!(
                r.t_send_ns < r.t_first_ns && r.t_done_ns <= r.t_ack_ns,
                "{mode:?} {r:?}"
            );
        }
        if mode.persistent() {
            assert_eq!(h.records().last().map(|r| r.status), Some(STATUS_STOPPED));
            assert_eq!(
                h.gpu().join_kernel(T).unwrap(),
                KernelExit::Stopped,
                "{mode:?}"
            );
        }
    }
}

#[test]
fn latency_incomplete_frames_are_acked_as_skipped_never_summed() {
    for mode in MODES {
        let mut h = standin(mode, 4, StandinOptions::default());
        for seq in 1..=30u64 {
            let kind = if seq % 3 == 0 {
                FrameKind::Incomplete
            } else {
                FrameKind::Whole
            };
            send(&mut h, seq, seq, kind);
            drain(&mut h);
            if mode.persistent() && kind == FrameKind::Incomplete {
                let ack = h.read_ack(seq as usize);
                assert_eq!(
                    (ack.seq, ack.status, ack.sum, ack.sumsq),
                    (seq, STATUS_SKIPPED, 0, 0),
                    "{mode:?}"
                );
            }
        }
        let c = h.counters();
        assert_eq!(
            (c.frames_acked, c.frames_skipped, c.sum_mismatch),
            (30, 10, 0),
            "{mode:?}"
        );
        for r in h.records() {
            let expected = if r.seq % 3 == 0 {
                STATUS_SKIPPED
            } else {
                STATUS_OK
            };
            assert_eq!((r.status, r.ok), (expected, true), "{mode:?} {r:?}");
        }
    }
}

#[test]
fn latency_stale_ack_is_never_accepted() {
    for mode in PERSISTENT {
        let mut h = standin(mode, 4, StandinOptions::default());
        for seq in 1..=4u64 {
            send(&mut h, seq, seq, FrameKind::Whole);
        }
        drain(&mut h);
        // Seq 5 goes to slot 1, whose ack still says seq 1 = 5 - N.
        h.gpu().set_paused(true);
        send(&mut h, 5, 5, FrameKind::Whole);
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            h.poll_acks(monotonic_ns());
        }
        assert_eq!(h.read_ack(5).seq, 1, "{mode:?}: the stale ack is there");
        assert_eq!(
            (h.outstanding(), h.counters().frames_acked),
            (1, 4),
            "{mode:?}"
        );
        h.gpu().set_paused(false);
        drain(&mut h);
        assert_eq!(
            h.records().last().map(|r| (r.seq, r.ok)),
            Some((5, true)),
            "{mode:?}"
        );
    }
}

#[test]
fn latency_claim_refuses_a_busy_slot_and_the_frame_is_not_overwritten() {
    for mode in PERSISTENT {
        let mut h = standin(mode, 4, StandinOptions::default());
        h.gpu().set_paused(true);
        for seq in 1..=4u64 {
            assert!(offer(&mut h, seq, 100 + seq, FrameKind::Whole));
        }
        assert!(!h.claim(5), "{mode:?}: slot 1 still holds seq 1");
        h.gpu().set_paused(false);
        drain(&mut h);
        // Sums equal the host's: seq 1's slot was never written over.
        let c = h.counters();
        assert_eq!(
            (c.frames_acked, c.sum_mismatch, c.torn),
            (4, 0, 0),
            "{mode:?}"
        );
        assert!(offer(&mut h, 5, 105, FrameKind::Whole));
        drain(&mut h);
    }
}

#[test]
fn latency_slow_gpu_makes_the_assembler_drop_frames_whole() {
    let opts = StandinOptions {
        frame_delay: Duration::from_millis(2),
        ..StandinOptions::default()
    };
    for mode in PERSISTENT {
        let mut h = standin(mode, 4, opts);
        let (mut seq, mut dropped) = (1u64, 0u64);
        // As the assembler does: a refused claim drops the frame, and the
        // next frame claims the same seq.
        for frame in 1..=40u64 {
            if offer(&mut h, seq, frame, FrameKind::Whole) {
                seq += 1;
            } else {
                dropped += 1;
            }
        }
        drain(&mut h);
        let c = h.counters();
        assert!(dropped > 0, "{mode:?}: a 2 ms GPU must fall behind");
        assert_eq!(c.frames_acked + dropped, 40, "{mode:?}");
        assert_eq!((c.sum_mismatch, c.torn), (0, 0), "{mode:?}");
        assert!(h.records().iter().all(|r| r.ok), "{mode:?}");
    }
}

#[test]
fn latency_stop_drains_then_stops() {
    let opts = StandinOptions {
        frame_delay: Duration::from_micros(300),
        ..StandinOptions::default()
    };
    for mode in MODES {
        let mut h = standin(mode, 16, opts);
        for seq in 1..=8u64 {
            assert!(offer(&mut h, seq, seq, FrameKind::Whole));
        }
        h.stop(T).unwrap();
        assert_eq!(h.counters().frames_acked, 8, "{mode:?}");
        assert_eq!(h.outstanding(), 0);
        if mode.persistent() {
            let last = h.records().last().copied().unwrap();
            assert_eq!(
                (last.seq, last.status, last.ok),
                (9, STATUS_STOPPED, true),
                "{mode:?}"
            );
            assert_eq!(h.gpu().join_kernel(T).unwrap(), KernelExit::Stopped);
        }
    }
}

#[test]
fn latency_abort_stops_a_persistent_standin_that_sees_no_frames() {
    for mode in PERSISTENT {
        let mut h = standin(mode, 4, StandinOptions::default());
        h.abort();
        assert_eq!(
            h.gpu().join_kernel(T).unwrap(),
            KernelExit::Aborted,
            "{mode:?}"
        );
        let ack = h.read_ack(1);
        assert_eq!((ack.seq, ack.status), (1, STATUS_ABORTED), "{mode:?}");
        // A stop after the kernel is gone fails (with its status), never hangs.
        let err = h.stop(Duration::from_millis(200)).unwrap_err().to_string();
        assert!(err.contains("status 4") || err.contains("aborted"), "{err}");
    }
}

#[test]
fn latency_idle_limit_ends_a_forgotten_standin() {
    let opts = StandinOptions {
        idle_limit: Duration::from_millis(20),
        ..StandinOptions::default()
    };
    let h = standin(Mode::ZeroCopy, 4, opts);
    assert_eq!(h.gpu().join_kernel(T).unwrap(), KernelExit::Idle);
}

#[test]
fn latency_seq_published_before_payload_is_caught() {
    // The broken stand-in stores trailer.seq first and the payload only after
    // the kernel acknowledged: the check must flag every frame.
    let opts = StandinOptions {
        seq_before_payload: true,
        ..StandinOptions::default()
    };
    let mut h = standin(Mode::Persistent, 4, opts);
    for seq in 1..=10u64 {
        send(&mut h, seq, 1000 + seq, FrameKind::Whole);
        drain(&mut h);
    }
    let c = h.counters();
    assert_eq!((c.frames_acked, c.sum_mismatch, c.torn), (10, 10, 10));
    assert!(c.torn_words >= 10 * (FRAME as u64 / 8) - 10);
    assert!(h.records().iter().all(|r| !r.ok));
}

#[test]
fn latency_ack_timeout_counts_once_per_frame() {
    let mut cfg = config(Mode::ZeroCopy, 4);
    cfg.ack_timeout = Duration::from_millis(1);
    let mut h = Handoff::standin(cfg, StandinOptions::default(), 100).unwrap();
    h.gpu().set_paused(true);
    send(&mut h, 1, 1, FrameKind::Whole);
    std::thread::sleep(Duration::from_millis(5));
    h.poll_acks(monotonic_ns());
    h.poll_acks(monotonic_ns());
    assert_eq!(h.counters().ack_timeouts, 1);
    h.gpu().set_paused(false);
    drain(&mut h);
    assert_eq!(h.counters().frames_acked, 1);
}

#[test]
fn latency_full_record_buffer_counts_dropped_records() {
    let mut h = Handoff::standin(config(Mode::Copy, 4), StandinOptions::default(), 5).unwrap();
    for seq in 1..=12u64 {
        send(&mut h, seq, seq, FrameKind::Whole);
    }
    let c = h.counters();
    assert_eq!(
        (h.records().len(), c.frames_acked, c.records_dropped),
        (5, 12, 7)
    );
}

#[test]
fn latency_protocol_misuse_is_counted_not_fatal() {
    let mut h = standin(Mode::ZeroCopy, 4, StandinOptions::default());
    assert!(!h.claim(2), "seq 1 comes first");
    assert!(h.claim(1));
    h.write(1, FRAME - 10, &[0u8; 20]); // past the frame
    h.write(3, 0, &[0u8; 8]); // not the claimed seq
    assert_eq!(h.counters().bad_writes, 3);
    fill_and_publish(&mut h, 1, 1, FrameKind::Whole);
    drain(&mut h);
    assert_eq!(h.counters().sum_mismatch, 0);
}

#[test]
fn latency_a_frame_closed_before_an_older_one_waits_for_it() {
    // The assembler's window: frames 1 and 2 open at once, 2 completes first.
    // It is held until 1 is published, so the GPU takes them in seq order.
    for mode in MODES {
        let mut h = standin(mode, 8, StandinOptions::default());
        assert!(h.claim(1) && h.claim(2));
        fill_and_publish(&mut h, 2, 20, FrameKind::Whole);
        assert_eq!(h.counters().frames_published, 0, "{mode:?}: held for seq 1");
        fill_and_publish(&mut h, 1, 10, FrameKind::Incomplete);
        assert_eq!(h.counters().frames_published, 2);
        drain(&mut h);
        let c = h.counters();
        assert_eq!(
            (
                c.frames_acked,
                c.frames_skipped,
                c.sum_mismatch,
                c.bad_writes
            ),
            (2, 1, 0, 0)
        );
        let seqs: Vec<u64> = h.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(h.records()[1].frame, 20);
    }
}

#[test]
fn latency_mode_names_and_config_checks() {
    for mode in MODES {
        assert_eq!(Mode::parse(mode.name()).unwrap(), mode);
    }
    let err = Mode::parse("fast").unwrap_err().to_string();
    assert!(
        err.contains("copy, persistent, persistent-flag or zerocopy"),
        "{err}"
    );
    let mut c = HandoffConfig::new(Mode::Copy, 8192);
    assert_eq!((c.slots, c.blocks, c.threads), (16, 1, 256));
    c.validate().unwrap();
    for slots in [0, 1, 3, 2048] {
        let bad = HandoffConfig { slots, ..c };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("power of two"));
    }
    c.frame_bytes = 0;
    assert!(c.validate().unwrap_err().to_string().contains("frame size"));
    let cfg = config(Mode::Persistent, 4);
    let gpu = HostGpu::new(&cfg, StandinOptions::default()).unwrap();
    let err = Handoff::new(gpu, cfg, DeviceBuffers::default(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("needs device slots"), "{err}");
}
