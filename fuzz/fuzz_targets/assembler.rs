//! The fuzz input is a small script of packets (well-formed, reordered,
//! duplicated with other bytes, late, far jumps, truncated, garbage, foreign)
//! pushed through a real [`Assembler`] with the sequence-counter locator and a
//! real chunk ring whose consumer holds and releases chunks (or starves the
//! assembler on purpose).
//!
//! Every packet is also fed to a reference model that states the module's
//! rules as plainly as possible, on sets and with 128-bit arithmetic so no
//! index can overflow. After each step the real counters must equal the
//! model's, every packet must land in exactly one bucket, and each chunk the
//! consumer pops must be the model's next chunk: same id, same presence bits,
//! and in each present slot the bytes of the first copy that arrived.
#![no_main]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use voltstream_core::assemble::{Assembler, AssemblerConfig, Chunk};
use voltstream_core::ring::{chunk_ring, Consumer, Lease, Producer};
use voltstream_core::stats::Counters;
use voltstream_core::wire::{counter, FormatSpec, Locator};

/// Reads the script; past its end every byte reads as 0, and the loop in
/// `fuzz_target!` stops before the next op.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.iter_mut().for_each(|x| *x = self.byte());
        u64::from_le_bytes(b)
    }
}

/// Recognisable bytes per (stream, index, copy), so a slot filled from the
/// wrong packet, or by a later copy, shows.
fn payload(stream: u16, index: u64, salt: u8, len: usize) -> Vec<u8> {
    let h = index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (stream as u64) << 56;
    (0..len)
        .map(|k| (h >> (8 * (k % 8))) as u8 ^ k as u8 ^ salt)
        .collect()
}

fn packet(stream: u16, index: u64, salt: u8, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; counter::HEADER_LEN];
    counter::Repr { index, stream }
        .emit(&mut counter::Packet::new_unchecked(&mut p[..]))
        .expect("the buffer holds a header");
    p.extend(payload(stream, index, salt, len));
    p
}

/// What the model expects a packet to be, read from its bytes independently
/// of the locator under test.
enum Class {
    Placed { stream: usize, index: u64 },
    Malformed,
    Foreign,
}

fn classify(p: &[u8], streams: usize, payload_len: usize) -> Class {
    if p.len() != counter::HEADER_LEN + payload_len {
        return Class::Malformed; // truncated or too long
    }
    let index = u64::from_be_bytes(p[..8].try_into().unwrap());
    let stream = u16::from_be_bytes([p[8], p[9]]) as usize;
    if stream >= streams {
        Class::Foreign
    } else {
        Class::Placed { stream, index }
    }
}

struct OpenChunk {
    /// Whether a free chunk was there when it opened (otherwise it is dropped).
    buffer: bool,
    /// (stream, position) -> bytes of the first copy.
    slots: BTreeMap<(usize, usize), Vec<u8>>,
}

/// A chunk as the consumer must see it.
struct Published {
    id: u64,
    slots: BTreeMap<(usize, usize), Vec<u8>>,
}

/// The assembler's contract (assemble/mod.rs), restated on plain sets.
struct Model {
    streams: usize,
    ppc: u128,
    window: u128,
    resync: u128,
    payload_len: usize,
    started: bool,
    head: u128,
    floor: u128,
    /// One past the highest index placed on this timeline.
    top: u128,
    open: BTreeMap<u128, OpenChunk>,
    /// Chunks in the ring's free list.
    free: usize,
    counters: Counters,
    out: VecDeque<Published>,
}

impl Model {
    fn push(&mut self, p: &[u8]) {
        match classify(p, self.streams, self.payload_len) {
            Class::Malformed => self.counters.malformed += 1,
            Class::Foreign => self.counters.foreign += 1,
            Class::Placed { stream, index } => {
                self.place(stream, index as u128, &p[counter::HEADER_LEN..])
            }
        }
    }

    fn place(&mut self, s: usize, i: u128, bytes: &[u8]) {
        let c = i / self.ppc;
        if !self.started {
            self.start(c, i);
        } else if c < self.head {
            if self.head - c > self.resync {
                self.resync_at(c, i);
            } else {
                self.counters.streams[s].late += 1;
                return;
            }
        } else if c >= self.head + self.window {
            if c - (self.head + self.window - 1) > self.resync {
                self.resync_at(c, i);
            } else {
                self.pass(c - (self.window - 1), u128::MAX);
            }
        }
        self.top = self.top.max(i + 1);
        if !self.open.contains_key(&c) {
            let buffer = self.free > 0;
            self.free -= buffer as usize;
            let slots = BTreeMap::new();
            self.open.insert(c, OpenChunk { buffer, slots });
        }
        let chunk = self.open.get_mut(&c).unwrap();
        let pos = (i - c * self.ppc) as usize;
        let sc = &mut self.counters.streams[s];
        if chunk.slots.contains_key(&(s, pos)) {
            sc.duplicate += 1;
            return;
        }
        chunk.slots.insert((s, pos), bytes.to_vec());
        if chunk.buffer {
            sc.received += 1;
            sc.bytes += bytes.len() as u64;
        } else {
            sc.dropped += 1;
        }
    }

    fn start(&mut self, c: u128, i: u128) {
        self.started = true;
        self.head = c;
        self.floor = i;
        self.top = i + 1;
    }

    fn resync_at(&mut self, c: u128, i: u128) {
        self.flush_all();
        self.counters.resyncs += 1;
        self.start(c, i);
    }

    /// Moves the oldest open chunk to `new_head`, closing every chunk before
    /// it: of the indices in those chunks from the timeline's first packet up
    /// to (not including) `due_until`, the ones no packet came for are missing.
    fn pass(&mut self, new_head: u128, due_until: u128) {
        let lo = (self.head * self.ppc).max(self.floor);
        let hi = (new_head * self.ppc).min(due_until);
        let due = hi.saturating_sub(lo);
        let passed: Vec<u128> = self.open.range(..new_head).map(|(&id, _)| id).collect();
        for (s, sc) in self.counters.streams.iter_mut().enumerate() {
            let present = passed
                .iter()
                .flat_map(|id| self.open[id].slots.keys().map(move |k| (*id, k)))
                .filter(|(id, (stream, pos))| {
                    let i = id * self.ppc + *pos as u128;
                    *stream == s && i >= lo && i < hi
                })
                .count() as u128;
            sc.missing += (due - present) as u64;
        }
        for id in passed {
            let ch = self.open.remove(&id).expect("a passed chunk is open");
            if ch.buffer {
                self.counters.chunks_emitted += 1;
                self.out.push_back(Published {
                    id: id as u64,
                    slots: ch.slots,
                });
            } else {
                self.counters.chunks_dropped += 1;
            }
        }
        self.head = new_head;
    }

    /// Closes every open chunk; the newest is due only up to the highest
    /// packet seen.
    fn flush_all(&mut self) {
        if let Some(&newest) = self.open.keys().next_back() {
            self.pass(newest + 1, self.top);
        }
    }

    fn finish(&mut self) {
        if self.started {
            self.flush_all();
        }
        self.started = false;
    }
}

/// The consumer end: holds up to `hold` chunks, releasing the oldest first.
struct Reader {
    consumer: Consumer,
    held: VecDeque<Lease>,
    hold: usize,
    seen: BTreeSet<(u64, u64)>,
    epoch: u64,
}

impl Reader {
    /// Takes every chunk the assembler emitted and checks it against the model.
    fn drain(&mut self, model: &mut Model) {
        while let Some(lease) = self.consumer.pop(Duration::ZERO) {
            let want = model
                .out
                .pop_front()
                .expect("the ring delivered a chunk the model did not publish");
            check_chunk(&lease, &want, model);
            assert!(
                self.seen.insert((self.epoch, lease.chunk_id())),
                "chunk {} published twice on one timeline",
                lease.chunk_id()
            );
            self.held.push_back(lease);
        }
        assert!(
            model.out.is_empty(),
            "a published chunk never reached the ring"
        );
        self.release_to(self.hold, model);
    }

    fn release_to(&mut self, keep: usize, model: &mut Model) {
        while self.held.len() > keep {
            self.held.pop_front().unwrap().release();
            model.free += 1;
        }
    }
}

fn check_chunk(chunk: &Chunk, want: &Published, model: &Model) {
    assert_eq!(chunk.chunk_id(), want.id);
    assert_eq!(chunk.present_count(), want.slots.len());
    let ppc = model.ppc as usize;
    for s in 0..model.streams {
        for k in 0..ppc {
            let expected = want.slots.get(&(s, k));
            assert_eq!(chunk.is_present(s, k), expected.is_some(), "slot {s}/{k}");
            if let Some(bytes) = expected {
                assert_eq!(chunk.payload(s, k).unwrap(), &bytes[..], "slot {s}/{k}");
            }
        }
    }
    // No bit beyond the layout is set.
    let bits: u32 = chunk.present_words().iter().map(|w| w.count_ones()).sum();
    assert_eq!(bits as usize, want.slots.len());
}

/// Buckets every pushed packet lands in (all but `missing`).
fn buckets(c: &Counters) -> Vec<u64> {
    let mut v = vec![c.malformed, c.foreign];
    for s in &c.streams {
        v.extend([s.received, s.late, s.duplicate, s.dropped]);
    }
    v
}

fn build(input: &mut Input) -> (Assembler<Locator, Producer>, Model, Reader) {
    let streams = 1 + input.byte() as usize % 3;
    // Up to 70 packets per chunk: bitmaps of several words, split mid-word.
    let ppc = 1 + input.byte() as usize % 70;
    let window = 1 + input.byte() as usize % 4;
    // Mostly a few chunks; sometimes up to 2^40, so long jumps stay below it
    // (the model's missing counts still fit in 64 bits).
    let resync = match input.byte() {
        b @ 0..=127 => 1 + b as u64 % 8,
        b => 1 << (b % 41),
    };
    // Pools smaller than window + 1 starve the assembler on purpose.
    let nchunks = 1 + input.byte() as usize % 6;
    let hold = input.byte() as usize % 4;
    let payload_len = 1 + input.byte() as usize % 16;

    let locator = FormatSpec::Counter {
        streams,
        payload_len,
    }
    .locator()
    .expect("a valid counter format");
    let layout = voltstream_core::assemble::ChunkLayout {
        streams,
        packets_per_chunk: ppc,
        payload_len,
    };
    let chunks = (0..nchunks)
        .map(|_| Chunk::new(layout).expect("a small chunk"))
        .collect();
    let (producer, consumer) = chunk_ring(chunks);
    let config = AssemblerConfig {
        packets_per_chunk: ppc,
        window,
        resync_chunks: resync,
        ..AssemblerConfig::new(ppc)
    };
    let assembler = Assembler::new(locator, producer, &config).expect("a valid config");
    let model = Model {
        streams,
        ppc: ppc as u128,
        window: window as u128,
        resync: resync as u128,
        payload_len,
        started: false,
        head: 0,
        floor: 0,
        top: 0,
        open: BTreeMap::new(),
        free: nchunks,
        counters: Counters::new(streams),
        out: VecDeque::new(),
    };
    let reader = Reader {
        consumer,
        held: VecDeque::new(),
        hold,
        seen: BTreeSet::new(),
        epoch: 0,
    };
    (assembler, model, reader)
}

/// Next packet of the script, or `None` for a control step (already done).
fn next_packet(
    input: &mut Input,
    cursor: &mut u64,
    recent: &mut VecDeque<Vec<u8>>,
    a: &mut Assembler<Locator, Producer>,
    model: &mut Model,
    reader: &mut Reader,
) -> Option<Vec<u8>> {
    let op = input.byte();
    let arg = op & 0x1f;
    let len = model.payload_len;
    let stream = ((arg & 0x0f) as usize % model.streams) as u16;
    let salt = input.byte();
    let p = match op >> 5 {
        // In order: this stream at the cursor, then maybe advance it.
        0 | 1 => {
            let p = packet(stream, *cursor, salt, len);
            if arg & 0x10 != 0 {
                *cursor = cursor.wrapping_add(1);
            }
            p
        }
        // Reordered or late: a few packets either side of the cursor.
        2 => {
            let d = input.byte() as i8 as i64;
            packet(stream, cursor.wrapping_add_signed(d), salt, len)
        }
        // A gap or a step back of up to some chunks (crossing the resync
        // bound), or (arg bit 4) of up to 2^55 packets.
        3 => {
            let d = input.u16() as i16 as i64;
            let shift = if arg & 0x10 != 0 {
                input.byte() % 40
            } else {
                0
            };
            *cursor = cursor.wrapping_add_signed(d << shift);
            packet(stream, *cursor, salt, len)
        }
        // Anywhere on the 64-bit timeline, including its very end.
        4 => {
            *cursor = match arg & 3 {
                0 => u64::MAX - input.byte() as u64,
                _ => input.u64(),
            };
            packet(stream, *cursor, salt, len)
        }
        // A repeat of a recent packet, same bytes or (odd arg) new bytes.
        5 => {
            let mut p = recent.get(arg as usize % recent.len().max(1))?.clone();
            if let (1, Some(body)) = (arg & 1, p.get_mut(counter::HEADER_LEN..)) {
                body.iter_mut().for_each(|b| *b ^= salt | 1);
            }
            p
        }
        // Not ours (stream id out of range), cut short, too long, or garbage.
        6 => {
            let mut p = packet(stream, *cursor, salt, len);
            match arg & 3 {
                0 => p[8..10]
                    .copy_from_slice(&(model.streams as u16 + input.u16() % 9).to_be_bytes()),
                1 => p.truncate(input.byte() as usize % p.len()),
                2 => p.extend(std::iter::repeat_n(salt, 1 + arg as usize / 4)),
                _ => {
                    let n = input.byte() as usize % (counter::HEADER_LEN + len + 2);
                    p = (0..n).map(|_| input.byte()).collect();
                }
            }
            p
        }
        // Control: end the timeline, let the consumer let go, or hold more.
        _ => {
            match arg & 3 {
                0 => {
                    a.finish();
                    model.finish();
                    reader.drain(model);
                    reader.epoch += 1;
                }
                1 => reader.release_to(0, model),
                _ => reader.hold = arg as usize / 4 % 4,
            }
            return None;
        }
    };
    Some(p)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let (mut a, mut model, mut reader) = build(&mut input);
    let mut cursor = input.u64() >> 40;
    let mut recent: VecDeque<Vec<u8>> = VecDeque::with_capacity(16);
    let mut pushed = 0u64;
    while !input.0.is_empty() {
        let resyncs = model.counters.resyncs;
        let before = buckets(a.counters());
        let Some(p) = next_packet(
            &mut input,
            &mut cursor,
            &mut recent,
            &mut a,
            &mut model,
            &mut reader,
        ) else {
            assert_eq!(a.counters(), &model.counters);
            continue;
        };
        a.push(&p);
        model.push(&p);
        pushed += 1;
        // Exactly one bucket went up, by one.
        let after = buckets(a.counters());
        let moved: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
        assert_eq!(moved.iter().sum::<u64>(), 1, "{moved:?}");
        assert_eq!(a.counters(), &model.counters, "after packet {pushed}");
        // Chunks emitted by this push belong to the timeline it started from.
        reader.drain(&mut model);
        if model.counters.resyncs != resyncs {
            reader.epoch += 1;
        }
        if recent.len() == 16 {
            recent.pop_front();
        }
        recent.push_back(p);
    }
    a.finish();
    model.finish();
    reader.drain(&mut model);
    let c = a.counters();
    assert_eq!(c, &model.counters);
    assert_eq!(c.accounted(), pushed);
    let t = c.total();
    assert_eq!(t.bytes, t.received * model.payload_len as u64);
    assert_eq!(c.chunks_emitted, reader.seen.len() as u64);
    // Replaying inputs (`cargo fuzz run assembler FILE`) with this set shows
    // which buckets a script reaches.
    if std::env::var_os("VS_FUZZ_SHOW").is_some() {
        eprintln!("{c:?}");
    }
});
