//! The stand-in's "kernels": what `latency_sum_frame` and `latency_persistent`
//! do, on host memory with atomics (see [`super`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::{KernelExit, PersistentParams, Shared, StandinOptions};
use crate::latency::layout::*;

/// Copies `bytes` from `src` to `dst` with Relaxed atomic stores, skipping the
/// 8 bytes at `skip` (a `seq` word, stored separately).
///
/// # Safety
/// `src` valid for reads and `dst` for writes of `bytes`; `dst` 8-aligned.
pub(super) unsafe fn store_bytes(dst: u64, src: *const u8, bytes: usize, skip: Option<u64>) {
    let words = bytes / 8;
    for j in 0..words {
        let at = dst + 8 * j as u64;
        if Some(at) == skip {
            continue;
        }
        // SAFETY: within both ranges (caller); unaligned read of the source.
        unsafe {
            let v = std::ptr::read_unaligned(src.add(8 * j) as *const u64);
            atomic_u64(at as *mut u8).store(v, Ordering::Relaxed);
        }
    }
    for k in 8 * words..bytes {
        // SAFETY: within both ranges (caller); AtomicU8 has no alignment need.
        unsafe { (*(dst as *mut AtomicU8).add(k)).store(*src.add(k), Ordering::Relaxed) };
    }
}

/// Sum, sum of squares and torn words of `bytes` payload bytes at `slot`.
///
/// # Safety
/// `slot` 8-aligned and valid for reads of `bytes`; concurrent writers atomic.
pub(super) unsafe fn device_sums(
    slot: u64,
    bytes: usize,
    frame: u64,
    check_pattern: bool,
) -> (u64, u64, u32) {
    let (mut sum, mut sumsq, mut torn) = (0u64, 0u64, 0u32);
    let mut add = |b: u8| {
        sum += u64::from(b);
        sumsq += u64::from(b) * u64::from(b);
    };
    for j in 0..bytes / 8 {
        // SAFETY: within the payload (caller).
        let w = unsafe { atomic_u64((slot + 8 * j as u64) as *mut u8) }.load(Ordering::Relaxed);
        w.to_le_bytes().into_iter().for_each(&mut add);
        if check_pattern && u64::from_le(w) != pattern_word(frame, j as u64) {
            torn += 1;
        }
    }
    for k in 8 * (bytes / 8)..bytes {
        // SAFETY: within the payload (caller).
        add(unsafe { (*(slot as *const AtomicU8).add(k)).load(Ordering::Relaxed) });
    }
    (sum, sumsq, torn)
}

/// Writes an ack: the fields, then `seq` with a Release store (the kernel's
/// `__threadfence_system(); st.release.sys`).
///
/// # Safety
/// `acks` is a ring of `nslots` entries valid for writes.
pub(super) unsafe fn write_ack(
    acks: u64,
    nslots: u64,
    seq: u64,
    sums: (u64, u64, u32),
    status: u32,
) {
    let a = (acks + (seq % nslots) * ACK_BYTES as u64) as *mut u8;
    // SAFETY: entry `seq % nslots` of the ring (caller); aligned fields.
    unsafe {
        atomic_u64(a.add(ACK_SUM)).store(sums.0, Ordering::Relaxed);
        atomic_u64(a.add(ACK_SUMSQ)).store(sums.1, Ordering::Relaxed);
        atomic_u32(a.add(ACK_STATUS)).store(status, Ordering::Relaxed);
        atomic_u32(a.add(ACK_TORN)).store(sums.2, Ordering::Relaxed);
        atomic_u64(a.add(ACK_T_GPU)).store(monotonic_ns(), Ordering::Relaxed);
        atomic_u64(a.add(ACK_SEQ)).store(seq, Ordering::Release);
    }
}

/// The persistent stand-in's loop (see the module docs).
pub(super) fn persistent(p: PersistentParams, shared: &Shared, opts: StandinOptions) -> KernelExit {
    let n = u64::from(p.nslots.max(1));
    let cap = p.payload_cap as usize;
    let (mut next, mut empty, mut last_frame) = (1u64, 0u64, Instant::now());
    // The slots, acks and control block stay valid until this thread
    // returns (launch_persistent contract): "see above" below refers to this.
    // SAFETY: see above; `abort` is 4-aligned and only accessed atomically.
    let abort = unsafe { atomic_u32(p.control as *mut u8) };
    loop {
        let slot = p.slots + (next % n) * p.slot_stride;
        let trailer = (slot + cap as u64) as *mut u8;
        // SAFETY: see above.
        let seq = unsafe { atomic_u64(trailer.add(TRAILER_SEQ)) };
        if !shared.paused.load(Ordering::Acquire) && seq.load(Ordering::Acquire) == next {
            let delay_end = Instant::now() + opts.frame_delay;
            while Instant::now() < delay_end && !shared.quit.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_micros(100));
            }
            // SAFETY: see above; the trailer was published before `seq`.
            let (kind, bytes, frame) = unsafe {
                (
                    atomic_u32(trailer.add(TRAILER_KIND)).load(Ordering::Relaxed),
                    atomic_u32(trailer.add(TRAILER_BYTES_FIELD)).load(Ordering::Relaxed) as usize,
                    atomic_u64(trailer.add(TRAILER_FRAME)).load(Ordering::Relaxed),
                )
            };
            match kind {
                // SAFETY: see above.
                3 => unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_STOPPED) },
                // SAFETY: see above.
                2 => unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_SKIPPED) },
                // SAFETY: see above; `bytes` is bounded by the payload area.
                _ => unsafe {
                    let sums = device_sums(slot, bytes.min(cap), frame, p.check_pattern);
                    write_ack(p.acks, n, next, sums, STATUS_OK);
                },
            }
            if kind == 3 {
                return KernelExit::Stopped;
            }
            next += 1;
            empty = 0;
            last_frame = Instant::now();
            continue;
        }
        if shared.quit.load(Ordering::Acquire) {
            return KernelExit::Quit;
        }
        empty += 1;
        if empty % 1024 == 0 {
            let idle = !opts.idle_limit.is_zero() && last_frame.elapsed() > opts.idle_limit;
            if abort.load(Ordering::Acquire) != 0 || idle {
                // SAFETY: see above.
                unsafe { write_ack(p.acks, n, next, (0, 0, 0), STATUS_ABORTED) };
                return if idle {
                    KernelExit::Idle
                } else {
                    KernelExit::Aborted
                };
            }
            // A CI machine shares its cores: let others run.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}
