//! The frame assembler's configuration and counters (see `frame.rs` for
//! the rules they describe).

use crate::wire::layout::Field;
use crate::{Error, Result};

/// Most packets a frame may have (the bitmap of each open frame is fixed).
pub const MAX_PACKETS_PER_FRAME: usize = 4096;
/// Most frames open at once.
pub const MAX_WINDOW: usize = 64;

/// Frame assembly parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameConfig {
    /// P, packets per frame, `1..=MAX_PACKETS_PER_FRAME`.
    pub packets_per_frame: usize,
    /// Reorder tolerance in frames, `1..=MAX_WINDOW`: a frame stays open
    /// until a frame `window` newer opens (so at most `window` are open).
    pub window: usize,
    /// Close the oldest open frame incomplete this long after its first
    /// packet; 0 = no deadline.
    pub timeout_ns: u64,
    /// A jump of more than this many frames restarts the timeline.
    pub resync_frames: u64,
    /// Where the frame number is (two-field mode); `None`: index / P.
    pub frame_field: Option<Field>,
    /// Where the sender's CLOCK_MONOTONIC stamp (ns) is, if it sends one.
    pub send_time: Option<Field>,
}

impl FrameConfig {
    /// Defaults: a window of 2 frames, no deadline, resync beyond 64 frames,
    /// one-counter mode, no send stamp.
    pub fn new(packets_per_frame: usize) -> Self {
        FrameConfig {
            packets_per_frame,
            window: 2,
            timeout_ns: 0,
            resync_frames: 64,
            frame_field: None,
            send_time: None,
        }
    }

    /// Checks the values, saying what to change.
    pub fn validate(&self) -> Result<()> {
        let p = self.packets_per_frame;
        if !(1..=MAX_PACKETS_PER_FRAME).contains(&p) {
            return Err(Error::Config(format!(
                "packets per frame must be 1..={MAX_PACKETS_PER_FRAME}, got {p}"
            )));
        }
        if !(1..=MAX_WINDOW).contains(&self.window) {
            return Err(Error::Config(format!(
                "frame window must be 1..={MAX_WINDOW} frames, got {}",
                self.window
            )));
        }
        if self.resync_frames == 0 {
            return Err(Error::Config(
                "resync bound must be at least 1 frame (default 64)".into(),
            ));
        }
        if let Some(f) = &self.frame_field {
            check_field(f, "frame")?;
        }
        if let Some(f) = &self.send_time {
            check_field(f, "send_time")?;
        }
        Ok(())
    }
}

/// A user-given field must be a readable integer (its place in the packet
/// is checked per packet: a field past the end makes the packet malformed).
fn check_field(f: &Field, what: &str) -> Result<()> {
    let total = f.bytes as u32 * 8;
    if !(1..=8).contains(&f.bytes) {
        return Err(Error::Config(format!(
            "{what} field is {} bytes wide; use 1 to 8 bytes",
            f.bytes
        )));
    }
    if f.shift as u32 >= total || f.shift as u32 + f.bits as u32 > total {
        return Err(Error::Config(format!(
            "{what} field: shift {} and bits {} do not fit in {total} bits",
            f.shift, f.bits
        )));
    }
    Ok(())
}

/// What the assembler counted. Packets: each pushed packet is counted once in
/// `received, dropped, duplicate, late, malformed, truncated, foreign`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameCounters {
    /// Packets placed (written to the sink).
    pub received: u64,
    /// Packets of frames dropped because the GPU was busy (not written).
    pub dropped: u64,
    /// A packet whose place in its open frame was already taken.
    pub duplicate: u64,
    /// A packet of a frame no longer (or never) open.
    pub late: u64,
    /// Places of closed frames and lost frames that no packet filled.
    pub missing: u64,
    /// Failed the format's checks (also: flagged invalid, `k >= P`, a frame
    /// or send-time field past the packet's end).
    pub malformed: u64,
    pub truncated: u64,
    /// Valid, but not ours (another sender or stream on the port).
    pub foreign: u64,
    /// Frames published whole.
    pub frames_complete: u64,
    /// Frames published incomplete (the GPU skips them).
    pub frames_incomplete: u64,
    /// Frames never seen (between the newest and a newer one).
    pub frames_lost: u64,
    /// Frames dropped whole because the sink refused the claim.
    pub frames_gpu_busy: u64,
    pub resyncs: u64,
}

impl FrameCounters {
    /// Packets pushed: the sum of the per-packet counters.
    pub fn packets(&self) -> u64 {
        self.received
            + self.dropped
            + self.duplicate
            + self.late
            + self.malformed
            + self.truncated
            + self.foreign
    }
}
