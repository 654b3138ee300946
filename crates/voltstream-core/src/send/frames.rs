//! The low-latency benchmark's frame source: paced frames of P packets, each
//! stamped with the sender's CLOCK_MONOTONIC time (issue 14, design section 3).
//!
//! Packet format ("VLAT"; all integers little-endian), `32 + payload_len`
//! bytes:
//!
//! | offset | type | field |
//! |---|---|---|
//! | 0 | u32 | magic `0x564C4154` ("VLAT" read as a big-endian word) |
//! | 4 | u16 | k, the packet's place in its frame, `0..P` |
//! | 6 | u16 | P, packets per frame |
//! | 8 | u64 | index = frame * P + k |
//! | 16 | u64 | t_send_ns: CLOCK_MONOTONIC ns read just before the frame's first packet is sent; the same in every packet of the frame |
//! | 24 | u64 | frame |
//! | 32 | | payload, `payload_len` bytes |
//!
//! Payload (pattern mode, as the GPU kernels check it): the frame's payload
//! as one array of `P * payload_len` bytes has 8-byte little-endian word
//! `j == frame ^ j.wrapping_mul(0x9E3779B97F4A7C15)`; packet k carries bytes
//! `k * payload_len ..` of it, so `payload_len` must be a multiple of 8.
//!
//! [`bench_layout`] describes the format as a [`Layout`] (one-counter frame
//! mode: frame = index / P), so receivers and tests read exactly what the
//! sender writes.
//!
//! Pacing: frame i is due `i / rate_hz` after the call starts; the sender
//! sleeps through the bulk of a gap longer than 200 µs and spins on
//! CLOCK_MONOTONIC for the rest, then sends the frame's packets back to back
//! in one `sendmmsg` (through [`Sender`]'s socket). A frame that falls behind
//! goes at once and the lateness is reported.

use std::net::SocketAddr;
use std::time::Duration;

use super::Sender;
use crate::wire::layout::{Check, Field, Layout};
use crate::{Error, Result};

/// The header's magic number ("VLAT").
pub const MAGIC: u32 = 0x564C_4154;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 32;
/// Most packets a frame may have (the frame assembler's limit).
pub const MAX_PACKETS_PER_FRAME: usize = crate::latency::frame::MAX_PACKETS_PER_FRAME;
/// Where the send stamp is.
pub const SEND_TIME: Field = Field::le(16, 8);
/// Where the frame number is (for two-field receivers).
pub const FRAME: Field = Field::le(24, 8);

/// Gaps shorter than this are spun; longer ones sleep all but this much.
const SPIN_NS: u64 = 200_000;
/// Largest UDP payload over IPv4.
const MAX_UDP: usize = 65_507;

// One clock and one pattern for the sender and the receiver.
pub use crate::latency::layout::{pattern_word, PATTERN_MUL};
pub use crate::latency::monotonic_ns;

/// The bench packet as a layout with `payload_len`-byte payloads (magic
/// checked, a mismatch malformed; index at 8), and where its send stamp is.
pub fn bench_layout(payload_len: usize) -> (Layout, Field) {
    let layout = Layout {
        packet_len: HEADER_LEN + payload_len,
        index: Field::le(8, 8),
        index_step: 1,
        stream: None,
        stream_ids: vec![],
        checks: vec![Check {
            field: Field::le(0, 4),
            value: MAGIC as u64,
            foreign: false,
        }],
        payload_offset: HEADER_LEN,
        payload_len,
    };
    (layout, SEND_TIME)
}

/// What one [`FrameSender::send_frames`] call did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameSendStats {
    pub frames: u64,
    pub packets: u64,
    /// UDP payload bytes.
    pub bytes: u64,
    pub seconds: f64,
    /// The most a frame started behind its due time, ns (0 unpaced).
    pub late_max_ns: u64,
    /// Stamps of the first and last frame sent (0 when none).
    pub t_first_send_ns: u64,
    pub t_last_send_ns: u64,
}

/// A paced, stamped frame source to one UDP destination.
#[derive(Debug)]
pub struct FrameSender {
    sender: Sender,
    p: usize,
    payload_len: usize,
    /// One frame's packets in send order (allocated once).
    buf: Vec<u8>,
}

impl FrameSender {
    /// A sender of frames of `packets_per_frame` packets of `payload_len`
    /// payload bytes, from `bind` (any local port if `None`) to `dest`.
    pub fn new(
        dest: SocketAddr,
        bind: Option<SocketAddr>,
        packets_per_frame: usize,
        payload_len: usize,
    ) -> Result<Self> {
        let p = packets_per_frame;
        if !(1..=MAX_PACKETS_PER_FRAME).contains(&p) {
            return Err(Error::Config(format!(
                "packets per frame must be 1..={MAX_PACKETS_PER_FRAME}, got {p}"
            )));
        }
        if payload_len == 0 || payload_len % 8 != 0 || payload_len > MAX_UDP - HEADER_LEN {
            return Err(Error::Config(format!(
                "frame payload length must be a multiple of 8 bytes (the pattern's \
                 words) from 8 to {}, got {payload_len}",
                (MAX_UDP - HEADER_LEN) / 8 * 8
            )));
        }
        Ok(FrameSender {
            sender: Sender::new(dest, bind)?,
            p,
            payload_len,
            buf: vec![0; p * (HEADER_LEN + payload_len)],
        })
    }

    /// Bytes per packet (header and payload).
    pub fn packet_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    pub fn packets_per_frame(&self) -> usize {
        self.p
    }

    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Sends frames `first_frame .. first_frame + count` at `rate_hz` frames
    /// per second (0 = as fast as possible). `skip = Some((n, k))` leaves out
    /// packet k of every frame whose number is a multiple of n (incomplete
    /// frames on purpose); `reverse` sends each frame's packets last first.
    pub fn send_frames(
        &mut self,
        first_frame: u64,
        count: u64,
        rate_hz: f64,
        skip: Option<(u64, u16)>,
        reverse: bool,
    ) -> Result<FrameSendStats> {
        if !rate_hz.is_finite() || rate_hz < 0.0 {
            return Err(Error::Config(format!(
                "frame rate {rate_hz} Hz is invalid; use a rate >= 0 (0 = unpaced)"
            )));
        }
        if first_frame.checked_add(count).is_none() {
            return Err(Error::Config(format!(
                "{count} frames from frame {first_frame} run past the 64-bit frame counter"
            )));
        }
        if let Some((n, k)) = skip {
            if n == 0 || k as usize >= self.p {
                return Err(Error::Config(format!(
                    "skip ({n}, {k}) needs every n >= 1 frames and a packet k < {}",
                    self.p
                )));
            }
        }
        let period_ns = if rate_hz > 0.0 { 1e9 / rate_hz } else { 0.0 };
        let len = self.packet_len();
        let start = monotonic_ns();
        let mut stats = FrameSendStats {
            frames: 0,
            packets: 0,
            bytes: 0,
            seconds: 0.0,
            late_max_ns: 0,
            t_first_send_ns: 0,
            t_last_send_ns: 0,
        };
        for i in 0..count {
            let frame = first_frame + i;
            let omit = skip.and_then(|(n, k)| (frame % n == 0).then_some(k as usize));
            let n = self.build(frame, omit, reverse);
            if period_ns > 0.0 {
                let due = start.saturating_add((i as f64 * period_ns) as u64);
                stats.late_max_ns = stats.late_max_ns.max(wait_until(due));
            }
            let t_send = monotonic_ns();
            for pkt in self.buf[..n * len].chunks_exact_mut(len) {
                SEND_TIME.set(pkt, t_send);
            }
            self.sender.send(&self.buf[..n * len], len, 0.0)?;
            if i == 0 {
                stats.t_first_send_ns = t_send;
            }
            stats.t_last_send_ns = t_send;
            stats.frames += 1;
            stats.packets += n as u64;
            stats.bytes += (n * len) as u64;
        }
        stats.seconds = monotonic_ns().saturating_sub(start) as f64 * 1e-9;
        Ok(stats)
    }

    /// Writes frame `frame`'s packets into the buffer in send order, leaving
    /// out packet `omit`; returns how many. The stamp is written later.
    fn build(&mut self, frame: u64, omit: Option<usize>, reverse: bool) -> usize {
        let (p, pl) = (self.p, self.payload_len);
        let len = HEADER_LEN + pl;
        let mut n = 0;
        for j in 0..p {
            let k = if reverse { p - 1 - j } else { j };
            if omit == Some(k) {
                continue;
            }
            let Some(pkt) = self.buf.get_mut(n * len..(n + 1) * len) else {
                break; // unreachable: the buffer holds p packets
            };
            pkt[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            pkt[4..6].copy_from_slice(&(k as u16).to_le_bytes());
            pkt[6..8].copy_from_slice(&(p as u16).to_le_bytes());
            let index = frame.wrapping_mul(p as u64).wrapping_add(k as u64);
            pkt[8..16].copy_from_slice(&index.to_le_bytes());
            pkt[24..32].copy_from_slice(&frame.to_le_bytes());
            let first_word = (k * pl / 8) as u64;
            for (w, out) in pkt[HEADER_LEN..].chunks_exact_mut(8).enumerate() {
                out.copy_from_slice(&pattern_word(frame, first_word + w as u64).to_le_bytes());
            }
            n += 1;
        }
        n
    }
}

/// Waits until CLOCK_MONOTONIC reaches `due_ns`: sleeps all but the last
/// `SPIN_NS` of a longer gap, spins the rest (sleep wakes up tens of µs
/// late). Returns how late it already was (0 if not).
fn wait_until(due_ns: u64) -> u64 {
    let now = monotonic_ns();
    if now >= due_ns {
        return now - due_ns;
    }
    let left = due_ns - now;
    if left > SPIN_NS {
        std::thread::sleep(Duration::from_nanos(left - SPIN_NS));
    }
    while monotonic_ns() < due_ns {
        std::hint::spin_loop();
    }
    0
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
