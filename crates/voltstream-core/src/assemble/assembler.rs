use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Chunk, ChunkLayout, Strays};
use crate::stats::Counters;
use crate::wire::{Locate, WireError};
use crate::{Error, Result};

/// Largest accepted reorder window, in chunks (each open chunk holds a bitmap).
pub const MAX_WINDOW: usize = 4096;

/// Where assembled chunks come from and go to (the ring's producer in a capture).
pub trait ChunkSink {
    /// A free chunk, or `None` when consumers hold them all. Must not wait.
    fn acquire(&mut self) -> Option<Chunk>;
    /// Hands over a flushed chunk. Must not wait.
    fn emit(&mut self, chunk: Chunk);
}

/// Assembly parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblerConfig {
    pub packets_per_chunk: usize,
    /// Chunks open at once (reorder tolerance), `1..=MAX_WINDOW`.
    pub window: usize,
    /// A time-stamp jump of more than this many chunks restarts the timeline.
    pub resync_chunks: u64,
    /// Threads that share the chunk timeline by chunk id (1: this assembler
    /// sees every chunk). With `n`, this one owns the chunk ids `c` with
    /// `c % n == chunk_member` (`capture::steer_chunks` steers them here) and
    /// its window, resync bound and missing counts are in its own chunks.
    pub chunk_stride: u64,
    pub chunk_member: u64,
    /// A chunk open this long (from the batch its first packet came in) is
    /// flushed by [`Assembler::tick`], with every older one, though packets of it
    /// may still come (they count late): what a crash of a recorder can lose is
    /// bounded in time at any packet rate. None: chunks wait for the window only.
    pub flush_age: Option<Duration>,
}

impl AssemblerConfig {
    /// Defaults: a window of 4 chunks, resync on jumps beyond 64 chunks, no
    /// flush age (a recording sets one). These are every capture's defaults (the
    /// Python settings read them from here through `_core.capture_defaults()`;
    /// docs/architecture.md, "One source").
    pub fn new(packets_per_chunk: usize) -> Self {
        AssemblerConfig {
            packets_per_chunk,
            window: 4,
            resync_chunks: 64,
            chunk_stride: 1,
            chunk_member: 0,
            flush_age: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(Error::Config(format!(
                "reorder window must be 1..={MAX_WINDOW} chunks, got {}",
                self.window
            )));
        }
        if self.chunk_stride == 0 || self.chunk_member >= self.chunk_stride {
            return Err(Error::Config(format!(
                "chunk member {} of {} threads does not exist",
                self.chunk_member, self.chunk_stride
            )));
        }
        if self.resync_chunks == 0 {
            return Err(Error::Config(
                "resync bound must be at least 1 chunk".into(),
            ));
        }
        if self.flush_age == Some(Duration::ZERO) {
            return Err(Error::Config(
                "flush age must be more than 0 seconds".into(),
            ));
        }
        Ok(())
    }
}

/// One open chunk of the window. The bitmap lives here rather than in the chunk
/// so that a chunk dropped for lack of a free buffer still detects duplicates
/// and counts its gaps.
struct Slot {
    id: u64,
    open: bool,
    bits: Box<[u64]>,
    count: usize,
    chunk: Option<Chunk>,
    /// When the chunk opened: the first `tick` after its first packet.
    opened: Option<Instant>,
}

/// Places packets into chunks; see the module docs for the rules.
pub struct Assembler<L, S> {
    locate: L,
    sink: S,
    layout: ChunkLayout,
    resync: u64,
    /// `AssemblerConfig::chunk_stride` and `chunk_member`: slot ids, `head`
    /// and the window count this assembler's own chunks (`global / stride`).
    stride: u64,
    member: u64,
    /// Where a packet of another thread's chunk goes (threads taking turns).
    strays: Option<Arc<Strays>>,
    slots: Box<[Slot]>,
    /// Oldest chunk id of the window.
    head: u64,
    started: bool,
    /// Index of the packet that (re)started the timeline.
    floor: u64,
    /// Highest index placed on this timeline: when the timeline ends (stop or
    /// resync), positions after it were never due, so not missing. Kept
    /// inclusive (not one past) so that index u64::MAX needs no special case.
    last: u64,
    counters: Counters,
    flush_age: Option<Duration>,
    /// A chunk opened since the last `tick` (not yet stamped).
    fresh: bool,
    /// The earliest time an open, stamped chunk reaches the flush age (it may
    /// have been flushed by the window since: then `tick` finds none aged).
    due: Option<Instant>,
    /// The newest chunk, flushed by age before the stream passed it, and its
    /// first position not counted missing: those positions become due (missing)
    /// once a later chunk's packet comes, never if the timeline ends first.
    owed: Option<(u64, usize)>,
}

impl<L: Locate, S: ChunkSink> Assembler<L, S> {
    pub fn new(locate: L, sink: S, config: &AssemblerConfig) -> Result<Self> {
        config.validate()?;
        let layout = ChunkLayout {
            streams: locate.streams(),
            packets_per_chunk: config.packets_per_chunk,
            payload_len: locate.payload_len(),
        };
        layout.validate()?;
        let slots = (0..config.window)
            .map(|_| Slot {
                id: 0,
                open: false,
                bits: vec![0; layout.words()].into_boxed_slice(),
                count: 0,
                chunk: None,
                opened: None,
            })
            .collect();
        Ok(Assembler {
            counters: Counters::new(layout.streams),
            locate,
            sink,
            layout,
            resync: config.resync_chunks,
            stride: config.chunk_stride,
            member: config.chunk_member,
            strays: None,
            slots,
            head: 0,
            started: false,
            floor: 0,
            last: 0,
            flush_age: config.flush_age,
            fresh: false,
            due: None,
            owed: None,
        })
    }

    pub fn layout(&self) -> ChunkLayout {
        self.layout
    }

    /// Packets of chunks another thread owns go to its inbox in `strays`
    /// (else they count `dropped`).
    pub fn set_strays(&mut self, strays: Arc<Strays>) {
        self.strays = Some(strays);
    }

    /// Places forwarded packets if any wait (one relaxed load when none do):
    /// called after each received packet, so a stray is placed within a packet
    /// of its arrival rather than after a whole batch.
    #[inline]
    pub fn poll_strays(&mut self) {
        if self
            .strays
            .as_ref()
            .is_some_and(|s| s.waiting(self.member as usize))
        {
            self.take_strays(false);
        }
    }

    /// Places the packets other threads forwarded here; with `close`, this
    /// thread is finishing and takes no more (later ones count `dropped` there).
    pub fn take_strays(&mut self, close: bool) {
        if let Some(strays) = self.strays.clone() {
            strays.drain(self.member as usize, close, |p| self.push(p));
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Classifies and places one packet.
    #[inline]
    pub fn push(&mut self, packet: &[u8]) {
        match self.locate.locate(packet) {
            Ok(loc) => {
                if loc.stream >= self.layout.streams || loc.payload.len() != self.layout.payload_len
                {
                    // A Locate breaking its contract: the packet cannot be placed.
                    self.counters.malformed += 1;
                } else if self.stride > 1 && self.owner(loc.index) != self.member {
                    // Another thread's chunk (a stray, see `Strays`): to its owner.
                    let to = self.owner(loc.index) as usize;
                    if !self.strays.as_ref().is_some_and(|s| s.send(to, packet)) {
                        self.counters.streams[loc.stream].dropped += 1;
                    }
                } else {
                    self.place(loc.stream, loc.index, loc.payload);
                }
            }
            Err(WireError::Foreign) => self.counters.foreign += 1,
            Err(WireError::Invalid { stream }) if stream < self.layout.streams => {
                // Not placed: its slot stays empty, so its samples count missing.
                self.counters.streams[stream].invalid += 1
            }
            Err(WireError::Truncated | WireError::Malformed | WireError::Invalid { .. }) => {
                self.counters.malformed += 1
            }
        }
    }

    /// The station the locator accepts (given, or learnt from the first frame).
    pub fn station(&self) -> Option<u16> {
        self.locate.station()
    }

    /// Counts a packet the engine saw cut short (larger than its receive buffer).
    pub fn push_truncated(&mut self) {
        self.counters.malformed += 1;
    }

    /// Flushes every open chunk (partially filled, gaps counted missing) and
    /// forgets the timeline; the next packet starts a new one.
    pub fn finish(&mut self) {
        self.flush_all();
        self.started = false;
    }

    /// The assembler's clock, read by the caller once per batch (and after a wait
    /// that brought none), never per packet: chunks opened since the last call
    /// are stamped `now`, and those open for the flush age or longer are flushed,
    /// with every older chunk. Nothing to do without a flush age; with one, the
    /// slots are looked at only when a chunk opened or one may have aged.
    pub fn tick(&mut self, now: Instant) {
        let Some(age) = self.flush_age else {
            return;
        };
        if !self.started {
            return;
        }
        self.settle_owed();
        if self.fresh {
            self.fresh = false;
            for slot in self
                .slots
                .iter_mut()
                .filter(|s| s.open && s.opened.is_none())
            {
                slot.opened = Some(now);
            }
            if let Some(at) = now.checked_add(age) {
                self.due = Some(self.due.map_or(at, |d| d.min(at)));
            }
        }
        if self.due.is_some_and(|d| d <= now) {
            self.flush_aged(now, age);
        }
    }

    /// Flushes the newest chunk open for `age` or longer and every chunk before
    /// it; sets when the next one is due.
    fn flush_aged(&mut self, now: Instant, age: Duration) {
        let aged = |s: &Slot| {
            s.open
                && s.opened
                    .is_some_and(|t| now.saturating_duration_since(t) >= age)
        };
        let last_aged = self.slots.iter().filter(|s| aged(s)).map(|s| s.id).max();
        let newest = self.slots.iter().filter(|s| s.open).map(|s| s.id).max();
        match (last_aged, newest) {
            // A later chunk has packets: this one and those before it are due in full.
            (Some(id), Some(newest)) if id < newest => {
                while self.head <= id {
                    self.flush_head();
                }
            }
            // The chunk that ends the 64-bit timeline waits for `finish` (its
            // head could not move past it).
            (Some(id), _) if id < u64::MAX => {
                while self.head < id {
                    self.flush_head();
                }
                let end = self.emit_newest(id);
                self.owed = (end < self.layout.packets_per_chunk).then_some((id, end));
                self.head = id + 1;
            }
            _ => {}
        }
        self.due = self
            .slots
            .iter()
            .filter(|s| s.open)
            .filter_map(|s| s.opened)
            .min()
            .and_then(|t| t.checked_add(age));
    }

    /// Counts the owed positions (see `owed`) missing once the stream has passed
    /// their chunk.
    fn settle_owed(&mut self) {
        let ppc = self.layout.packets_per_chunk;
        if let Some((id, from)) = self.owed {
            if self.last / ppc as u64 / self.stride > id {
                for s in &mut self.counters.streams {
                    s.missing += (ppc - from) as u64;
                }
                self.owed = None;
            }
        }
    }

    fn place(&mut self, stream: usize, index: u64, payload: &[u8]) {
        let ppc = self.layout.packets_per_chunk as u64;
        let window = self.slots.len() as u64;
        // `push` hands other threads' chunks to `strays`: this one is ours. One
        // stride (the common case) costs no division here.
        let global = index / ppc;
        let c = if self.stride == 1 {
            global
        } else {
            global / self.stride
        };
        if !self.started {
            self.restart(c, index);
        } else if c < self.head {
            if self.head - c > self.resync {
                self.flush_all();
                self.counters.resyncs += 1;
                self.restart(c, index);
            } else {
                self.counters.streams[stream].late += 1;
                return;
            }
        } else if c - self.head >= window {
            let excess = c - self.head - (window - 1);
            if excess > self.resync {
                self.flush_all();
                self.counters.resyncs += 1;
                self.restart(c, index);
            } else {
                self.advance_head(c - (window - 1));
            }
        }

        self.last = self.last.max(index);
        let slot = &mut self.slots[(c % window) as usize];
        if !slot.open {
            slot.open = true;
            slot.id = c;
            slot.chunk = self.sink.acquire();
            self.fresh = true;
        }
        let pos = stream * self.layout.packets_per_chunk + (index - global * ppc) as usize;
        let (word, mask) = (pos / 64, 1u64 << (pos % 64));
        let counters = &mut self.counters.streams[stream];
        let Some(bits) = slot.bits.get_mut(word) else {
            return; // unreachable: pos < streams * packets_per_chunk
        };
        if *bits & mask != 0 {
            counters.duplicate += 1;
            return;
        }
        *bits |= mask;
        slot.count += 1;
        let len = self.layout.payload_len;
        match slot.chunk.as_mut() {
            Some(chunk) => {
                if let Some(dst) = chunk
                    .data
                    .as_mut_slice()
                    .get_mut(pos * len..(pos + 1) * len)
                {
                    dst.copy_from_slice(payload);
                }
                counters.received += 1;
                counters.bytes += len as u64;
            }
            None => counters.dropped += 1,
        }
    }

    fn restart(&mut self, c: u64, index: u64) {
        self.started = true;
        self.head = c;
        self.floor = index;
        self.last = index;
    }

    /// First position (within each stream) whose absence counts as missing.
    fn first_counted(&self, id: u64) -> usize {
        let ppc = self.layout.packets_per_chunk as u64;
        if id == self.floor / ppc / self.stride {
            (self.floor % ppc) as usize
        } else {
            0
        }
    }

    /// Emits (or counts as a gap) the oldest chunk of the window and advances it.
    fn flush_head(&mut self) {
        let id = self.head;
        let i = (id % self.slots.len() as u64) as usize;
        if self.slots[i].open && self.slots[i].id == id {
            self.emit(i, self.layout.packets_per_chunk);
        } else {
            let start = self.first_counted(id);
            let gap = (self.layout.packets_per_chunk - start) as u64;
            for s in &mut self.counters.streams {
                s.missing += gap;
            }
        }
        self.head += 1;
    }

    /// Moves the oldest chunk of the window to `new_head`. Only the `window`
    /// chunks from the current head can be open: those are flushed one by one,
    /// and the chunks after them, which never opened, are counted missing in one
    /// step, so that a jump of up to `resync_chunks` chunks (a user setting,
    /// possibly huge) costs at most `window` flushes, not one per chunk.
    fn advance_head(&mut self, new_head: u64) {
        let open_end = new_head.min(self.head.saturating_add(self.slots.len() as u64));
        while self.head < open_end {
            self.flush_head();
        }
        if self.head < new_head {
            // The head moved at least once above, so it is past the floor's chunk
            // and every one of these chunks is due in full.
            let ppc = self.layout.packets_per_chunk as u64;
            let gap = (new_head - self.head).saturating_mul(ppc);
            for s in &mut self.counters.streams {
                s.missing = s.missing.saturating_add(gap);
            }
            self.head = new_head;
        }
    }

    /// Flushes the window up to its newest open chunk (gaps before it are missing,
    /// chunks after it were never expected yet).
    fn flush_all(&mut self) {
        if !self.started {
            return;
        }
        self.settle_owed();
        self.owed = None; // the timeline ends where it was: never due
        let newest = self.slots.iter().filter(|s| s.open).map(|s| s.id).max();
        if let Some(newest) = newest {
            while self.head < newest {
                self.flush_head();
            }
            self.emit_newest(newest);
            // Saturates for the chunk that ends the 64-bit timeline; a restart
            // or `finish` follows every `flush_all`, so the value is not used.
            self.head = self.head.saturating_add(1);
        }
    }

    /// The thread (of `stride`) owning the chunk of packet `index`.
    #[inline]
    fn owner(&self, index: u64) -> u64 {
        index / self.layout.packets_per_chunk as u64 % self.stride
    }

    /// The chunk id all threads share, of this assembler's chunk `local`.
    fn global_id(&self, local: u64) -> u64 {
        local
            .saturating_mul(self.stride)
            .saturating_add(self.member)
    }

    /// Emits the newest open chunk, which holds the highest packet seen (`last`):
    /// its positions after that one are not yet due, so not counted missing.
    /// Returns the first of them.
    fn emit_newest(&mut self, newest: u64) -> usize {
        let ppc = self.layout.packets_per_chunk as u64;
        let start = self.global_id(newest).saturating_mul(ppc);
        let end = self.last.saturating_sub(start).min(ppc - 1) as usize + 1;
        let end = end.max(self.first_counted(newest));
        self.emit((newest % self.slots.len() as u64) as usize, end);
        end
    }

    /// Emits slot `i`, counting its absent positions before `end` as missing.
    fn emit(&mut self, i: usize, end: usize) {
        let start = self.first_counted(self.slots[i].id);
        let ppc = self.layout.packets_per_chunk;
        let end = end.max(start);
        let slot = &mut self.slots[i];
        for (s, counters) in self.counters.streams.iter_mut().enumerate() {
            let present = count_ones(&slot.bits, s * ppc + start, s * ppc + end);
            counters.missing += (end - start - present) as u64;
        }
        match slot.chunk.take() {
            Some(mut chunk) => {
                chunk.present.copy_from_slice(&slot.bits);
                chunk.chunk_id = slot.id * self.stride + self.member;
                chunk.present_count = slot.count;
                self.sink.emit(chunk);
                self.counters.chunks_emitted += 1;
            }
            None => self.counters.chunks_dropped += 1,
        }
        slot.bits.fill(0);
        slot.count = 0;
        slot.open = false;
        slot.opened = None;
    }
}

/// Set bits of `bits` in positions `lo..hi`.
fn count_ones(bits: &[u64], lo: usize, hi: usize) -> usize {
    let mut n = 0;
    let mut i = lo;
    while i < hi {
        let (w, b) = (i / 64, i % 64);
        let take = (64 - b).min(hi - i);
        let mask = if take == 64 {
            !0
        } else {
            ((1u64 << take) - 1) << b
        };
        n += (bits.get(w).copied().unwrap_or(0) & mask).count_ones() as usize;
        i += take;
    }
    n
}

#[cfg(test)]
#[path = "assembler_tests.rs"]
mod tests;
