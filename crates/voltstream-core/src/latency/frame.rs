//! The frame assembler: packets of one stream into frames of P packets, each
//! handed to a [`FrameSink`] the moment its last packet arrives.
//!
//! Frame model (design section 1). Without a frame field the locator's index
//! counts packets: frame `index / P`, place `k = index % P` (any existing
//! format, e.g. `counter`). With [`FrameConfig::frame_field`] (RTMS-like) the
//! frame number is that field and the locator's index is `k`; `k >= P` is
//! malformed. One stream only.
//!
//! Rules, all decided per packet with no allocation:
//! - A frame *opens* when a packet of a frame newer than every frame seen
//!   arrives (the first packet opens the first). Opening claims the next
//!   hand-over sequence number (`1, 2, 3, ...`, dense, in opening order). A
//!   refused claim (GPU busy) tracks the frame as dropped: its packets are
//!   counted (`dropped`, `duplicate`), nothing is written or published, the
//!   same seq is claimed by the next frame, and `frames_gpu_busy` counts it
//!   when it closes, like every other frame (so the frame identities below
//!   hold at any time); its holes count `missing` as any frame's do.
//! - The packet of an open frame whose place is taken is a `duplicate` (not
//!   rewritten); otherwise its payload goes to `k * payload_len` of the frame.
//! - The last packet completes the frame: published `Whole` during that very
//!   push. Frames may therefore be published out of seq order (frame 2
//!   completes while frame 1 waits for a straggler): the GPU side processes
//!   seq strictly in order and needs each seq published exactly once, so
//!   holding frame 2 back would only add latency.
//! - A frame closes `Incomplete` (published so that the GPU skips it; never
//!   whole) when it leaves the window, when its deadline passes (`timeout_ns`
//!   after its first packet; checked by [`FrameAssembler::poll`] and at each
//!   push), at a resync, or at [`FrameAssembler::finish`]. Its holes count
//!   `missing`. The window is the `window` newest frame *numbers*
//!   (`newest - window < frame <= newest`), so at most `window` frames are
//!   open and opening frame f closes every open frame `<= f - window`. A
//!   window of open frames counted regardless of their numbers would let one
//!   incomplete frame stay open for ever while the frames after it complete
//!   and close at once; its seq would then never be published, and the GPU,
//!   which takes seqs strictly in order, would stall behind it.
//! - Frames skipped entirely between the newest and a new frame are
//!   `frames_lost` (P `missing` each) and get no seq; a packet of a frame that
//!   is not open but not newer than the newest (closed, lost, or given up on)
//!   is `late`. A run that starts mid-frame publishes that frame incomplete
//!   (the places before its first packet count `missing`).
//! - Resync: a frame more than `resync_frames` after the newest, or more than
//!   `resync_frames` before it (a sender that restarted its counter: a
//!   smaller step back is just a late packet), closes every open frame and
//!   restarts the timeline there; frames between are not counted lost.
//!
//! Counter identities (asserted by the tests): every packet pushed lands in
//! exactly one of `received, dropped, duplicate, late, malformed, truncated,
//! foreign` ([`FrameCounters::packets`]); at any time `received + dropped +
//! missing == P * (closed frames + frames_lost) + present packets of open
//! frames`, closed = `frames_complete + frames_incomplete + frames_gpu_busy`.

use super::{FrameDone, FrameKind, FrameSink};
use crate::wire::layout::Field;
use crate::wire::{Locate, WireError};
use crate::{Error, Result};

#[path = "frame_config.rs"]
mod config;
pub use config::{FrameConfig, FrameCounters, MAX_PACKETS_PER_FRAME, MAX_WINDOW};

/// One frame of the window. The bitmap lives here, not in the sink, so a
/// frame dropped for a busy GPU still finds its duplicates and holes.
struct Open {
    open: bool,
    frame: u64,
    seq: u64,
    /// The claim was refused: count, never write or publish.
    busy: bool,
    bits: Box<[u64]>,
    count: u32,
    t_first_ns: u64,
    t_send_ns: Option<u64>,
}

/// Places packets into frames; see the module docs for the rules.
pub struct FrameAssembler<L> {
    locate: L,
    /// Packets per frame.
    p: u64,
    payload_len: usize,
    frame_bytes: u32,
    timeout_ns: u64,
    resync: u64,
    frame_field: Option<Field>,
    send_time: Option<Field>,
    /// Shortest packet holding the frame and send-time fields.
    min_len: usize,
    slots: Box<[Open]>,
    /// Frames open now.
    open: usize,
    started: bool,
    /// Newest frame opened on this timeline.
    newest: u64,
    /// The seq the next frame claims.
    next_seq: u64,
    counters: FrameCounters,
}

impl<L: Locate> FrameAssembler<L> {
    /// Validates `cfg` against the locator; allocates the whole window.
    pub fn new(locate: L, cfg: FrameConfig) -> Result<Self> {
        cfg.validate()?;
        if locate.streams() != 1 {
            return Err(Error::Config(format!(
                "frame assembly takes one stream, the format accepts {}; \
                 configure a single stream (one stream id, or none)",
                locate.streams()
            )));
        }
        let payload_len = locate.payload_len();
        let frame_bytes = payload_len
            .checked_mul(cfg.packets_per_frame)
            .and_then(|b| u32::try_from(b).ok())
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::Config(format!(
                    "a frame of {} packets of {payload_len} bytes must be 1 byte to 4 GiB; \
                     use fewer packets per frame",
                    cfg.packets_per_frame
                ))
            })?;
        let end = |f: &Option<Field>| f.map_or(0, |f| f.offset.saturating_add(f.bytes as usize));
        let words = cfg.packets_per_frame.div_ceil(64);
        let slots = (0..cfg.window)
            .map(|_| Open {
                open: false,
                frame: 0,
                seq: 0,
                busy: false,
                bits: vec![0; words].into_boxed_slice(),
                count: 0,
                t_first_ns: 0,
                t_send_ns: None,
            })
            .collect();
        Ok(FrameAssembler {
            locate,
            p: cfg.packets_per_frame as u64,
            payload_len,
            frame_bytes,
            timeout_ns: cfg.timeout_ns,
            resync: cfg.resync_frames,
            frame_field: cfg.frame_field,
            send_time: cfg.send_time,
            min_len: end(&cfg.frame_field).max(end(&cfg.send_time)),
            slots,
            open: 0,
            started: false,
            newest: 0,
            next_seq: 1,
            counters: FrameCounters::default(),
        })
    }

    pub fn counters(&self) -> &FrameCounters {
        &self.counters
    }

    /// The seq the next frame will claim (a STOP hand-over takes this one).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Frames open now.
    pub fn frames_open(&self) -> usize {
        self.open
    }

    /// Payload bytes of a whole frame.
    pub fn frame_bytes(&self) -> u32 {
        self.frame_bytes
    }

    /// Classifies and places one packet received at `now_ns`; publishes the
    /// frames it completes or pushes out.
    #[inline]
    pub fn push<S: FrameSink>(&mut self, packet: &[u8], now_ns: u64, sink: &mut S) {
        self.expire(now_ns, sink);
        match self.classify(packet) {
            Ok((frame, k, payload)) => self.place(frame, k, payload, packet, now_ns, sink),
            Err(WireError::Truncated) => self.counters.truncated += 1,
            Err(WireError::Foreign) => self.counters.foreign += 1,
            // A packet its sender flagged invalid is not used: its place
            // stays a hole (this assembler keeps no per-stream counters).
            Err(WireError::Malformed | WireError::Invalid { .. }) => self.counters.malformed += 1,
        }
    }

    /// Counts a packet the engine saw cut short (larger than its buffer).
    pub fn push_truncated(&mut self) {
        self.counters.truncated += 1;
    }

    /// The deadline check, for the receive loop when no packet came.
    pub fn poll<S: FrameSink>(&mut self, now_ns: u64, sink: &mut S) {
        self.expire(now_ns, sink);
    }

    /// Closes every open frame (incomplete: whole ones are already out) and
    /// forgets the timeline; the next packet starts a new one. Seqs go on.
    pub fn finish<S: FrameSink>(&mut self, now_ns: u64, sink: &mut S) {
        self.close_all(now_ns, sink);
        self.started = false;
    }

    /// (frame, k, payload) of a packet, or why it cannot be placed.
    #[inline]
    fn classify<'a>(
        &self,
        packet: &'a [u8],
    ) -> core::result::Result<(u64, usize, &'a [u8]), WireError> {
        let loc = self.locate.locate(packet)?;
        // A Locate breaking its contract, or a packet too short for our fields.
        if loc.stream != 0 || loc.payload.len() != self.payload_len || packet.len() < self.min_len {
            return Err(WireError::Malformed);
        }
        let (frame, k) = match &self.frame_field {
            None => (loc.index / self.p, loc.index % self.p),
            Some(f) => (f.read(packet).ok_or(WireError::Malformed)?, loc.index),
        };
        if k >= self.p {
            return Err(WireError::Malformed);
        }
        Ok((frame, k as usize, loc.payload))
    }

    fn place<S: FrameSink>(
        &mut self,
        frame: u64,
        k: usize,
        payload: &[u8],
        packet: &[u8],
        now: u64,
        sink: &mut S,
    ) {
        let i = if !self.started {
            self.started = true;
            self.open_frame(frame, packet, now, sink)
        } else if frame > self.newest {
            let lost = frame - self.newest - 1;
            if lost >= self.resync {
                self.resync(now, sink);
            } else {
                let c = &mut self.counters;
                c.frames_lost += lost;
                c.missing = c.missing.saturating_add(lost.saturating_mul(self.p));
            }
            self.open_frame(frame, packet, now, sink)
        } else if let Some(i) = self.find(frame) {
            i
        } else if self.newest - frame > self.resync {
            self.resync(now, sink);
            self.open_frame(frame, packet, now, sink)
        } else {
            self.counters.late += 1;
            return;
        };
        let Some(s) = self.slots.get_mut(i) else {
            return; // unreachable: slot indices come from the window
        };
        let (word, mask) = (k / 64, 1u64 << (k % 64));
        let Some(bits) = s.bits.get_mut(word) else {
            return; // unreachable: k < P
        };
        if *bits & mask != 0 {
            self.counters.duplicate += 1;
            return;
        }
        *bits |= mask;
        s.count += 1;
        if s.busy {
            self.counters.dropped += 1;
        } else {
            sink.write(s.seq, k * self.payload_len, payload);
            self.counters.received += 1;
        }
        if s.count as u64 == self.p {
            self.close(i, now, sink);
        }
    }

    /// Opens `frame` as the newest, claiming its seq; returns its slot.
    fn open_frame<S: FrameSink>(
        &mut self,
        frame: u64,
        packet: &[u8],
        now: u64,
        sink: &mut S,
    ) -> usize {
        // Frames that leave the window give way, oldest first (incomplete:
        // a whole frame closed on its last packet). This also frees slot
        // `frame % window`, whose previous frame is at least a window older.
        let w = self.slots.len() as u64;
        let lo = frame.saturating_sub(w - 1);
        while let Some(i) = self.oldest().filter(|&i| self.slots[i].frame < lo) {
            self.close(i, now, sink);
        }
        let i = (frame % w) as usize;
        let seq = self.next_seq;
        let busy = !sink.claim(seq);
        if !busy {
            self.next_seq += 1;
        }
        let t_send_ns = self.send_time.and_then(|f| f.read(packet));
        if let Some(s) = self.slots.get_mut(i) {
            // The bitmap is already clear (`close` clears it).
            s.open = true;
            s.frame = frame;
            s.seq = seq;
            s.busy = busy;
            s.count = 0;
            s.t_first_ns = now;
            s.t_send_ns = t_send_ns;
            self.open += 1;
        }
        self.newest = frame;
        i
    }

    /// The slot of open frame `frame`.
    #[inline]
    fn find(&self, frame: u64) -> Option<usize> {
        let i = (frame % self.slots.len() as u64) as usize;
        self.slots
            .get(i)
            .filter(|s| s.open && s.frame == frame)
            .map(|_| i)
    }

    /// The slot of the oldest open frame.
    fn oldest(&self) -> Option<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].open)
            .min_by_key(|&i| self.slots[i].frame)
    }

    /// Closes open frames whose deadline has passed, oldest first.
    #[inline]
    fn expire<S: FrameSink>(&mut self, now: u64, sink: &mut S) {
        if self.timeout_ns == 0 || self.open == 0 {
            return;
        }
        while let Some(i) = self.oldest() {
            if now.saturating_sub(self.slots[i].t_first_ns) < self.timeout_ns {
                break;
            }
            self.close(i, now, sink);
        }
    }

    fn resync<S: FrameSink>(&mut self, now: u64, sink: &mut S) {
        self.close_all(now, sink);
        self.counters.resyncs += 1;
    }

    /// Closes every open frame, oldest first (so in seq order).
    fn close_all<S: FrameSink>(&mut self, now: u64, sink: &mut S) {
        while let Some(i) = self.oldest() {
            self.close(i, now, sink);
        }
    }

    /// Closes slot `i`: counts it and publishes it unless it was dropped.
    fn close<S: FrameSink>(&mut self, i: usize, now: u64, sink: &mut S) {
        let Some(s) = self.slots.get_mut(i).filter(|s| s.open) else {
            return;
        };
        s.open = false;
        self.open -= 1;
        let c = &mut self.counters;
        c.missing += self.p - s.count as u64;
        if s.busy {
            c.frames_gpu_busy += 1;
        } else {
            let kind = if s.count as u64 == self.p {
                c.frames_complete += 1;
                FrameKind::Whole
            } else {
                c.frames_incomplete += 1;
                FrameKind::Incomplete
            };
            sink.publish(&FrameDone {
                seq: s.seq,
                frame: s.frame,
                kind,
                present: s.count,
                bytes: self.frame_bytes,
                t_first_ns: s.t_first_ns,
                t_done_ns: now,
                t_send_ns: s.t_send_ns,
            });
        }
        s.bits.fill(0);
        s.count = 0;
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
