//! Chunk assembly: places each packet into a fixed-size chunk by its position on
//! the packet timeline, tolerating reordering inside a window of chunks, and keeps
//! the presence bitmap and the loss taxonomy of DESIGN.md.
//!
//! Contract:
//! - The timeline is the [`crate::wire::Locate`] index. Chunk `c` holds indices
//!   `c * packets_per_chunk ..` of every stream (chunk boundaries are multiples of
//!   `packets_per_chunk`). The first packet fixes where counting starts: absent
//!   packets of the first chunk *before* that packet's index are not `missing`
//!   (they preceded the capture); the same holds after a resync.
//! - At most `window` consecutive chunks are open. A packet more than `window - 1`
//!   chunks ahead of the oldest open chunk flushes the oldest ones to the sink.
//!   A packet behind the oldest open chunk is `late`.
//! - With a flush age, [`Assembler::tick`] (called once per batch with the time)
//!   also flushes a chunk open that long, and every chunk before it, so that a
//!   chunk waits a bounded time at any rate (a slow or paused stream). Its
//!   packets that come later are `late`; its positions after the highest packet
//!   seen become `missing` only once a later chunk's packet comes (the stream
//!   went on past them), as at a window flush, never if the timeline ends first.
//! - A jump of more than `resync_chunks` chunks (forward past the window, or
//!   backward behind it) flushes everything open, counts one resync and restarts
//!   the timeline at the new packet, instead of counting the gap as missing.
//! - Chunks in which no packet arrived are not emitted (their packets are counted
//!   `missing`), so consumers see gaps as jumps in `chunk_id`.
//! - When the sink has no free chunk, the chunk is dropped whole: its packets are
//!   still checked for duplicates and counted `dropped`, its gaps `missing`.
//! - Accounting: every packet pushed is counted exactly once, in `received`,
//!   `late`, `duplicate` or `dropped` of its stream, or in the capture-wide
//!   `malformed` or `foreign` (a packet failing its checks, or not ours, has no
//!   trustworthy stream id, so it is not attributed to one).
//! - No allocation, lock or panic per packet; one payload copy per packet.
#![deny(unsafe_code)]

mod assembler;
mod chunk;
mod strays;

pub use assembler::{Assembler, AssemblerConfig, ChunkSink, MAX_WINDOW};
pub use chunk::{Chunk, ChunkLayout};
pub use strays::Strays;
