//! Paced UDP sender, used by the simulator and by replay.
//!
//! Contract: [`Sender::send`] sends a buffer of equal-length packets in order,
//! batched with `sendmmsg` and, where the kernel and path allow, UDP GSO
//! (`UDP_SEGMENT`), pacing bursts against a monotonic clock so the average
//! payload bit rate is the one asked for (0 = as fast as possible). It does not
//! allocate while sending. Socket errors come back as [`crate::Error`] with a
//! sentence naming the destination; transient ones (`ENOBUFS`, `EAGAIN`,
//! `EINTR`) are retried. [`Sender::send_paced`] paces against a clock that
//! carries across calls (a rate from a start time, or one time per packet), so
//! a replay made of many sends keeps its average rate exactly.
//!
//! [`FrameSender`] (`frames.rs`) is the low-latency benchmark's source:
//! paced frames of P stamped packets on the same socket.

pub mod frames;
mod sender;

pub use frames::{bench_layout, monotonic_ns, FrameSendStats, FrameSender};
pub use sender::{Pace, SendStats, Sender};
