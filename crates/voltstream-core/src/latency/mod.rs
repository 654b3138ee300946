//! Low-latency acquisition: small frames from the wire into the GPU within
//! microseconds (issue 14; docs/latency.md, and the design it started from in
//! docs/research/low-latency-design.md).
//!
//! - [`frame`]: the frame assembler: packets carry a frame number and their
//!   place in the frame (RTMS-like); a frame is handed over the moment its
//!   last packet arrives; an incomplete frame is counted and flagged, never
//!   handed over as whole.
//! - [`gpu`]: the CUDA driver, reached by `dlopen("libcuda.so.1")` at run
//!   time (the wheel loads without CUDA), and the host memory the session
//!   owns (staging slots, GPU-mapped slots, acknowledgements).
//! - [`handoff`]: the ways a frame reaches the GPU (copy + launch +
//!   synchronise; an async copy and a flag write to a persistent kernel; a
//!   persistent kernel reading mapped host memory; and, measured only because
//!   it tears frames, frame and flag in one copy), as a [`FrameSink`], and the
//!   acknowledgement protocol.
//! - [`session`]: the hot loop (one pinned thread, busy-polling receive,
//!   assembly, hand-over, acknowledgements, live counters).
//! - [`layout`]: the memory layout shared with the CUDA kernels
//!   (docs/research/low-latency-contract.md).
//! - [`standin`]: a host stand-in for the GPU, so the protocol runs in CI.
//!
//! The contract between the assembler and a hand-off is [`FrameSink`]:
//! frames get dense hand-over sequence numbers `1, 2, 3, ...` in wire-frame
//! order, whether or not they complete, so the GPU side can process slots
//! strictly in order and a stale acknowledgement (`seq - slots`) can never be
//! mistaken for a new one.

pub mod frame;
pub mod gpu;
pub mod handoff;
pub mod layout;
pub mod session;
pub mod standin;

pub use layout::monotonic_ns;

/// How a frame ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum FrameKind {
    /// Every packet arrived: the GPU processes it.
    Whole = 1,
    /// Closed with packets missing (window moved on or deadline passed): the
    /// GPU skips it and acknowledges it as skipped; never processed as whole.
    Incomplete = 2,
    /// End of the run: the persistent kernel acknowledges it and returns.
    Stop = 3,
}

/// What the assembler says about a frame it closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDone {
    /// Hand-over sequence number (dense, from 1).
    pub seq: u64,
    /// The frame number on the wire.
    pub frame: u64,
    pub kind: FrameKind,
    /// Packets of the frame that arrived (== packets per frame when whole).
    pub present: u32,
    /// Payload bytes of a whole frame (packets per frame * payload length).
    pub bytes: u32,
    /// CLOCK_MONOTONIC ns when the frame's first packet was placed.
    pub t_first_ns: u64,
    /// CLOCK_MONOTONIC ns of the receive call that completed (or closed) it.
    pub t_done_ns: u64,
    /// The sender's stamp (CLOCK_MONOTONIC ns) if the format carries one.
    pub t_send_ns: Option<u64>,
}

/// Where the assembler puts frames: a hand-off to the GPU, or test memory.
///
/// Calls for one `seq` come in the order `claim`, `write`..., `publish`;
/// `claim` is called with `seq` = the last claimed + 1. None may block.
pub trait FrameSink {
    /// Takes slot `seq % slots` for frame `seq`. `false` when the GPU has not
    /// yet acknowledged that slot's previous frame: the assembler then drops
    /// the frame whole (counted `frames_gpu_busy`) and claims the same `seq`
    /// again for the next frame.
    fn claim(&mut self, seq: u64) -> bool;
    /// Copies `bytes` to `offset` in frame `seq`'s slot (payload area).
    fn write(&mut self, seq: u64, offset: usize, bytes: &[u8]);
    /// Hands the frame over (whole) or tells the GPU to skip it (incomplete).
    fn publish(&mut self, done: &FrameDone);
}
