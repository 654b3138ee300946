//! The memory layout shared by the Rust hand-off and the CUDA kernels
//! (docs/research/low-latency-contract.md; keep the two in step): slots with a
//! 64-byte trailer, the acknowledgement ring and the control block, plus the
//! small helpers both sides of the stand-in use (atomic views, sums, the
//! ordering-test pattern, the clock).

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Slots, and the payload area inside one, are aligned to this.
pub const SLOT_ALIGN: usize = 128;
/// Bytes of the trailer that follows the payload area of a slot.
pub const TRAILER_BYTES: usize = 64;
/// Trailer field offsets (from the start of the trailer).
pub const TRAILER_FRAME: usize = 0;
pub const TRAILER_BYTES_FIELD: usize = 8;
pub const TRAILER_KIND: usize = 12;
pub const TRAILER_T_SEND: usize = 16;
/// `seq` is the trailer's last word, so that one copy of the whole slot writes
/// it last in address order (mode persistent).
pub const TRAILER_SEQ: usize = 56;

/// Bytes of one acknowledgement (its own 64-byte line).
pub const ACK_BYTES: usize = 64;
pub const ACK_SEQ: usize = 0;
pub const ACK_SUM: usize = 8;
pub const ACK_SUMSQ: usize = 16;
pub const ACK_STATUS: usize = 24;
pub const ACK_TORN: usize = 28;
pub const ACK_T_GPU: usize = 32;

/// Bytes of one device accumulator entry (sum, sumsq, done_blocks, torn, reserved).
pub const ACCUM_BYTES: usize = 64;
/// Bytes of the control block; `abort` (u32) is at offset 0.
pub const CONTROL_BYTES: usize = 64;
pub const CONTROL_ABORT: usize = 0;

/// Ack status values.
pub const STATUS_OK: u32 = 1;
pub const STATUS_SKIPPED: u32 = 2;
pub const STATUS_STOPPED: u32 = 3;
pub const STATUS_ABORTED: u32 = 4;

/// Multiplier of the ordering-test pattern (a 64-bit golden-ratio constant).
pub const PATTERN_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

/// `round_up(frame_bytes, 128)`: the payload area of a slot.
pub fn payload_cap(frame_bytes: usize) -> usize {
    frame_bytes.div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

/// `payload_cap + 128`: keeps every slot 128-byte aligned.
pub fn slot_stride(frame_bytes: usize) -> usize {
    payload_cap(frame_bytes) + 2 * TRAILER_BYTES
}

/// Word `j` of frame `frame`'s payload in pattern mode.
pub fn pattern_word(frame: u64, j: u64) -> u64 {
    frame ^ j.wrapping_mul(PATTERN_MUL)
}

/// Fills `buf` with frame `frame`'s pattern (little-endian words; a partial
/// last word keeps its low bytes).
pub fn fill_pattern(buf: &mut [u8], frame: u64) {
    for (j, chunk) in buf.chunks_mut(8).enumerate() {
        let word = pattern_word(frame, j as u64).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Sum and sum of squares of `bytes` as u8 into u64: the stand-in
/// computation, exact and order independent.
pub fn sums(bytes: &[u8]) -> (u64, u64) {
    // u32 lanes over blocks short enough not to overflow (255^2 * 16384 <
    // 2^32), so the compiler vectorises the inner loop; 64 KiB in a few µs.
    bytes.chunks(16_384).fold((0u64, 0u64), |(s, q), block| {
        let (bs, bq) = block.iter().fold((0u32, 0u32), |(s, q), &b| {
            let b = u32::from(b);
            (s + b, q + b * b)
        });
        (s + u64::from(bs), q + u64::from(bq))
    })
}

/// CLOCK_MONOTONIC in nanoseconds (the clock every latency stamp uses).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// An atomic view of the u64 at `addr`.
///
/// # Safety
/// `addr` must be 8-byte aligned and valid for reads and writes for `'a`, and
/// every concurrent access to it must be atomic (or ordered by one).
pub(crate) unsafe fn atomic_u64<'a>(addr: *mut u8) -> &'a AtomicU64 {
    debug_assert_eq!(addr as usize % 8, 0);
    // SAFETY: the caller guarantees alignment, validity and atomic-only sharing;
    // AtomicU64 has the size and alignment of u64.
    unsafe { &*(addr as *const AtomicU64) }
}

/// An atomic view of the u32 at `addr`; as [`atomic_u64`], 4-byte aligned.
///
/// # Safety
/// As [`atomic_u64`], with 4-byte alignment.
pub(crate) unsafe fn atomic_u32<'a>(addr: *mut u8) -> &'a AtomicU32 {
    debug_assert_eq!(addr as usize % 4, 0);
    // SAFETY: as for `atomic_u64`.
    unsafe { &*(addr as *const AtomicU32) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_layout_sizes_follow_the_contract() {
        assert_eq!(payload_cap(1), 128);
        assert_eq!(payload_cap(8192), 8192);
        assert_eq!(slot_stride(8192), 8192 + 128);
        assert_eq!(slot_stride(100) % SLOT_ALIGN, 0);
        assert_eq!(TRAILER_SEQ + 8, TRAILER_BYTES);
        let mut buf = [0u8; 20];
        fill_pattern(&mut buf, 7);
        assert_eq!(
            u64::from_le_bytes(buf[8..16].try_into().unwrap()),
            7 ^ PATTERN_MUL
        );
        assert_eq!(sums(&[1, 2, 3]), (6, 14));
    }
}
