//! The hand-off's configuration, counters and records (see [`super`]).

use std::time::Duration;

use crate::{Error, Result};

/// How frames reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Copy,
    Persistent,
    PersistentFlag,
    ZeroCopy,
}

impl Mode {
    /// From its command-line name.
    pub fn parse(name: &str) -> Result<Mode> {
        Ok(match name {
            "copy" => Mode::Copy,
            "persistent" => Mode::Persistent,
            "persistent-flag" => Mode::PersistentFlag,
            "zerocopy" => Mode::ZeroCopy,
            other => {
                return Err(Error::Config(format!(
                    "unknown latency mode {other:?} (expected copy, persistent, persistent-flag or zerocopy)"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Persistent => "persistent",
            Mode::PersistentFlag => "persistent-flag",
            Mode::ZeroCopy => "zerocopy",
        }
    }

    /// Whether a persistent kernel consumes the frames (stopped by a frame).
    pub fn persistent(self) -> bool {
        self != Mode::Copy
    }
}

/// The hand-off's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoffConfig {
    pub mode: Mode,
    /// Slots in flight: a power of two in 2..=1024.
    pub slots: usize,
    /// Payload bytes of a whole frame.
    pub frame_bytes: usize,
    /// Launch shape of `latency_sum_frame` (mode copy).
    pub blocks: u32,
    pub threads: u32,
    /// The kernels check the ordering-test pattern (torn words).
    pub check_pattern: bool,
    /// Slots in write-combined memory (fast to write and DMA, slow for the CPU
    /// to read back, which the host's own sums do).
    pub write_combined: bool,
    /// An outstanding frame older than this counts once as `ack_timeouts`.
    pub ack_timeout: Duration,
}

impl HandoffConfig {
    /// Defaults: 16 slots, one block per 8 KiB (at most 8), 256 threads.
    pub fn new(mode: Mode, frame_bytes: usize) -> Self {
        HandoffConfig {
            mode,
            slots: 16,
            frame_bytes,
            blocks: frame_bytes.div_ceil(8192).clamp(1, 8) as u32,
            threads: 256,
            check_pattern: false,
            write_combined: false,
            ack_timeout: Duration::from_secs(1),
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if !self.slots.is_power_of_two() || !(2..=1024).contains(&self.slots) {
            return bad(format!(
                "latency slots must be a power of two in 2..=1024, not {}",
                self.slots
            ));
        }
        if self.frame_bytes == 0 || self.frame_bytes > 64 << 20 {
            return bad(format!(
                "frame size must be 1 byte to 64 MiB, not {} bytes",
                self.frame_bytes
            ));
        }
        if self.blocks == 0 || self.blocks > 65_535 {
            return bad(format!(
                "kernel blocks must be 1..=65535, not {}",
                self.blocks
            ));
        }
        if self.threads == 0 || self.threads > 1024 {
            return bad(format!(
                "kernel threads per block must be 1..=1024, not {}",
                self.threads
            ));
        }
        Ok(())
    }
}

/// Device memory Python (CuPy) allocated for the session; 0 where unused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceBuffers {
    /// `slots * slot_stride` bytes (modes copy, persistent, persistent-flag).
    pub slots: u64,
    /// `slots * 32` zeroed bytes of accumulators (mode copy).
    pub accum: u64,
}

/// What the hand-off counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandoffCounters {
    pub frames_published: u64,
    /// Frames acknowledged (any status; stop frames not counted).
    pub frames_acked: u64,
    /// Acknowledged as skipped (incomplete frames).
    pub frames_skipped: u64,
    /// Whole frames whose GPU sums differ from the host's.
    pub sum_mismatch: u64,
    /// Frames with torn words (pattern mode), and those words.
    pub torn: u64,
    pub torn_words: u64,
    pub ack_timeouts: u64,
    /// Acks not recorded because the record buffer was full.
    pub records_dropped: u64,
    /// Failed driver calls (the first error is kept: [`Handoff::take_error`](super::Handoff::take_error)).
    pub gpu_errors: u64,
    /// Writes outside the frame or out of protocol order (ignored).
    pub bad_writes: u64,
}

/// One acknowledged frame, for latency statistics (all times CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRecord {
    pub seq: u64,
    pub frame: u64,
    /// Ack status (1 ok, 2 skipped, 3 stopped, 4 aborted).
    pub status: u32,
    pub t_send_ns: u64,
    pub t_first_ns: u64,
    pub t_done_ns: u64,
    /// The hand-over calls had returned (copy, launch, flag write submitted).
    pub t_handed_ns: u64,
    pub t_ack_ns: u64,
    /// Status as expected for the frame's kind, sums equal, nothing torn.
    pub ok: bool,
}

/// An ack ring entry as read (tests, diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckEntry {
    pub seq: u64,
    pub sum: u64,
    pub sumsq: u64,
    pub status: u32,
    pub torn: u32,
}
