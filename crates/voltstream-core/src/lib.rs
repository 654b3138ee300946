//! voltstream-core: the hot path of voltstream, in pure Rust.
//!
//! Layers (each a module, each with its own contract in its module docs):
//! - [`wire`]: packet formats as zero-copy checked views (no panics on any input);
//! - [`capture`]: capture engines that deliver batches of packets;
//! - [`assemble`]: places packets into fixed-size chunks by time stamp, with
//!   presence bitmaps and the loss taxonomy;
//! - [`memory`]: buffer pools allocated at start-up;
//! - [`ring`]: chunk handoff between the capture thread and consumers;
//! - [`record`]: chunks to files on many disks, never holding the capture back;
//! - [`latency`]: small frames into the GPU microseconds after their last
//!   packet (a frame assembler, the GPU hand-off by dlopen'd driver calls, the
//!   pinned busy-polling loop);
//! - [`send`]: paced UDP senders (the simulator's, and the latency mode's
//!   stamped frames);
//! - [`stats`]: counters shared with the monitor;
//! - [`host_counters`]: the kernel's drop counters outside the capture (context).
//!
//! Nothing on the receive path allocates after start-up.

pub mod assemble;
pub mod capture;
pub mod error;
pub mod host_counters;
pub mod latency;
pub mod memory;
pub mod record;
pub mod ring;
pub mod send;
pub mod stats;
pub mod wire;

pub use error::{Error, Result};
