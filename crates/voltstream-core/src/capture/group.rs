//! Several capture threads over disjoint subsets of a capture's streams, or
//! over disjoint chunks of all of them.
//!
//! [`Spread::Chunks`]: thread `t` of `n` owns the chunk ids `c` with `c mod n
//! == t` of every stream (a kernel program computes the chunk from the index,
//! [`super::steer_chunks`]); each thread's assembler has the full locator and
//! counts its own chunks, and a consumer interleaves chunk ids. That is how ONE
//! stream (YNAO, a single flow) spreads over several cores. The rest of this
//! text is about [`Spread::Streams`].
//!
//! Each thread is a whole [`Capture`]: its own engine (a member of a kernel
//! fanout group that steers each packet by its stream id, see
//! [`super::steer`]), its own assembler, pool and chunk ring, and its own CPU.
//! Nothing is shared between threads on the hot path, so each thread's loss
//! accounting is exact on its own, and the totals are plain sums: every
//! packet reaches exactly one thread.
//!
//! A thread's assembler sees the capture's full locator wrapped in
//! [`Subset`], which renumbers the thread's streams `0..k` and counts a packet
//! of any other stream `foreign` (a packet the kernel could not steer: too
//! short, not one of our ids, or a mixed-stream GSO frame from a local sender,
//! which is steered whole by its first datagram). Its chunks hold only its
//! streams, in the order of [`CaptureGroup::thread_streams`].

use crate::memory::MemoryReport;
use std::time::Duration;

use super::{steer, Capture, ChunkConfig, Engine, PacketRingConfig, PacketRingEngine};
use crate::assemble::ChunkLayout;
use crate::ring::{Consumer, Lease};
use crate::stats::{add_fields, Counters, Snapshot};
use crate::wire::{Locate, Located, StreamKeyed, WireError};
use crate::{Error, Result};

const NOT_OURS: u32 = u32::MAX;
/// Packets each thread's stray inbox holds (threads taking turns by chunk): a
/// batch's worth of GSO tails, drained after every batch.
const STRAY_SLOTS: usize = 1024;

/// A locator restricted to some streams of another, renumbered `0..k`.
#[derive(Debug, Clone)]
pub struct Subset<L> {
    inner: L,
    /// Local index of each of the inner locator's streams, or `NOT_OURS`.
    local: Box<[u32]>,
    streams: usize,
}

impl<L: Locate> Subset<L> {
    /// `streams`: the inner stream indices this subset keeps, in local order.
    pub fn new(inner: L, streams: &[usize]) -> Result<Self> {
        let mut local = vec![NOT_OURS; inner.streams()].into_boxed_slice();
        for (k, &s) in streams.iter().enumerate() {
            match local.get_mut(s) {
                Some(slot) if *slot == NOT_OURS => *slot = k as u32,
                _ => {
                    return Err(Error::Config(format!(
                        "stream {s} is out of range or listed twice in a thread's streams"
                    )))
                }
            }
        }
        Ok(Subset {
            inner,
            local,
            streams: streams.len(),
        })
    }
}

impl<L: Locate> Locate for Subset<L> {
    fn streams(&self) -> usize {
        self.streams
    }

    fn payload_len(&self) -> usize {
        self.inner.payload_len()
    }

    fn station(&self) -> Option<u16> {
        self.inner.station()
    }

    #[inline]
    fn locate<'a>(&self, packet: &'a [u8]) -> core::result::Result<Located<'a>, WireError> {
        let local = |stream: usize| match self.local.get(stream) {
            Some(&k) if k != NOT_OURS => Some(k as usize),
            _ => None,
        };
        match self.inner.locate(packet) {
            Ok(mut l) => {
                l.stream = local(l.stream).ok_or(WireError::Foreign)?;
                Ok(l)
            }
            // An invalid frame of a stream this thread owns counts against it.
            Err(WireError::Invalid { stream }) => {
                Err(local(stream)
                    .map_or(WireError::Foreign, |stream| WireError::Invalid { stream }))
            }
            Err(e) => Err(e),
        }
    }
}

/// How several capture threads divide the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spread {
    /// Streams when the format has at least as many as there are threads and
    /// says where their ids are; chunks otherwise.
    #[default]
    Auto,
    /// Each thread owns whole streams.
    Streams,
    /// Each thread owns every `n`-th chunk of every stream.
    Chunks,
}

impl Spread {
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "auto" => Spread::Auto,
            "streams" => Spread::Streams,
            "chunks" => Spread::Chunks,
            other => {
                return Err(Error::Config(format!(
                    "unknown spread '{other}'; use 'auto', 'streams' or 'chunks'"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Spread::Auto => "auto",
            Spread::Streams => "streams",
            Spread::Chunks => "chunks",
        }
    }
}

/// How a capture is spread over threads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadsConfig {
    /// Number of capture threads (each with its own engine and chunk ring).
    pub threads: usize,
    /// CPU of each thread (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Thread owning each stream (empty: contiguous blocks of streams).
    pub owners: Vec<usize>,
    /// Whether threads own streams or chunks.
    pub spread: Spread,
}

impl ThreadsConfig {
    pub fn new(threads: usize) -> Self {
        ThreadsConfig {
            threads,
            ..Default::default()
        }
    }

    /// Whether the threads own chunks (true) or streams, for a format of
    /// `streams` streams whose ids a steering program can (`keyed`) read.
    pub fn by_chunks(&self, streams: usize, keyed: bool) -> Result<bool> {
        let n = self.threads;
        if n <= 1 {
            return Ok(false);
        }
        match self.spread {
            Spread::Chunks => Ok(true),
            Spread::Auto => Ok(!keyed || n > streams),
            Spread::Streams if !keyed => Err(Error::Config(
                "this format keeps its stream id at no fixed place (SPEAD) or has one stream \
                 (YNAO), so threads cannot own streams; use spread='chunks'"
                    .into(),
            )),
            Spread::Streams => Ok(false),
        }
    }

    /// The owner of each of `streams` streams, checked; with `by_chunks`,
    /// every thread sees every stream and only the CPUs are checked.
    pub fn owners(&self, streams: usize, by_chunks: bool) -> Result<Vec<usize>> {
        let n = self.threads;
        if n == 0 || (n > streams && !by_chunks) {
            return Err(Error::Config(format!(
                "{n} capture threads for {streams} streams: each thread owns whole streams, \
                 so use 1 to {streams} threads (or spread='chunks')"
            )));
        }
        if !self.cpus.is_empty() && self.cpus.len() != n {
            return Err(Error::Config(format!(
                "{} CPUs given for {n} capture threads; give one CPU per thread",
                self.cpus.len()
            )));
        }
        // Two threads on one CPU is allowed (a small test machine), if slow.
        for c in &self.cpus {
            super::pin::check_cpu(*c)?;
        }
        if by_chunks {
            return Ok(vec![0; streams]);
        }
        if self.owners.is_empty() {
            return Ok(steer::contiguous_owners(streams, n));
        }
        if self.owners.len() != streams {
            return Err(Error::Config(format!(
                "the stream-to-thread map has {} entries for {streams} streams",
                self.owners.len()
            )));
        }
        for t in 0..n {
            if !self.owners.contains(&t) {
                return Err(Error::Config(format!(
                    "capture thread {t} owns no stream; every thread needs at least one"
                )));
            }
        }
        if let Some(bad) = self.owners.iter().find(|&&t| t >= n) {
            return Err(Error::Config(format!(
                "stream owner {bad} is not a thread (threads are 0..{n})"
            )));
        }
        Ok(self.owners.clone())
    }
}

/// The global stream indices each thread owns, in the thread's local order.
pub fn thread_streams(owners: &[usize], threads: usize) -> Vec<Vec<usize>> {
    let mut v = vec![Vec::new(); threads];
    for (s, &t) in owners.iter().enumerate() {
        v[t].push(s);
    }
    v
}

/// Opens one packet ring per thread in a fanout group steered by the stream
/// id of `locate`'s format: element `t` receives the streams `owners` gives `t`.
pub fn packet_ring_fanout<L: StreamKeyed>(
    ring: &PacketRingConfig,
    locate: &L,
    owners: &[usize],
    threads: usize,
) -> Result<Vec<PacketRingEngine>> {
    let key = locate.stream_key().ok_or_else(|| {
        Error::Config(
            "this format keeps its stream id at no fixed place (SPEAD) or has one stream \
             (YNAO), so packets cannot be steered to threads; use threads=1"
                .into(),
        )
    })?;
    let prog = steer::program(&steer::Load::new(&key)?, owners)?;
    PacketRingEngine::open_fanout(ring, threads, &prog)
}

/// Opens one packet ring per thread in a fanout group that gives thread `t`
/// the chunks `c` (`index / packets_per_chunk`) with `c mod threads == t`.
pub fn packet_ring_chunk_fanout<L: StreamKeyed>(
    ring: &PacketRingConfig,
    locate: &L,
    packets_per_chunk: usize,
    threads: usize,
) -> Result<Vec<PacketRingEngine>> {
    let key = locate.index_key().ok_or_else(|| {
        Error::Config(
            "this format keeps its packet index at no fixed place (SPEAD heaps of several \
             packets, or samples per heap not a power of two) or computes it (scaled layout \
             indices), so chunks cannot be steered to threads; use threads=1"
                .into(),
        )
    })?;
    let prog = super::steer_chunks::chunk_program(&key, packets_per_chunk, threads)?;
    PacketRingEngine::open_fanout(ring, threads, &prog)
}

/// One capture thread's counters, in its own stream numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSnapshot {
    /// Global stream index of each of the thread's streams.
    pub streams: Vec<usize>,
    pub snapshot: Snapshot,
    /// Kernel thread id and pinned CPU of the capture thread.
    pub tid: i32,
    pub cpu: Option<usize>,
}

/// Counters of a whole group: per thread, and summed in global stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub threads: Vec<ThreadSnapshot>,
    pub total: Snapshot,
}

/// Capture threads over disjoint stream subsets; stops them all on drop.
pub struct CaptureGroup {
    threads: Vec<Capture>,
    streams: Vec<Vec<usize>>,
    nstreams: usize,
    /// Threads own chunk ids modulo this (1: each owns its streams' every chunk).
    chunk_stride: usize,
}

impl CaptureGroup {
    /// Starts one [`Capture`] per engine: engine `t` must receive the streams
    /// `owners` gives thread `t`, and its thread is pinned to `cpus[t]`.
    pub fn start<E: Engine, L: Locate + Clone + 'static>(
        engines: Vec<E>,
        locate: L,
        owners: &[usize],
        cpus: &[usize],
        config: &ChunkConfig,
    ) -> Result<CaptureGroup> {
        let nstreams = locate.streams();
        let streams = thread_streams(owners, engines.len());
        let mut threads = Vec::with_capacity(engines.len());
        for (t, engine) in engines.into_iter().enumerate() {
            let subset = Subset::new(locate.clone(), &streams[t])?;
            threads.push(Capture::start(
                engine,
                subset,
                config,
                cpus.get(t).copied(),
            )?);
        }
        Ok(CaptureGroup {
            threads,
            streams,
            nstreams,
            chunk_stride: 1,
        })
    }

    /// Starts one [`Capture`] per engine, each with the whole format on its own
    /// listen address: thread `a`'s streams are `a * k .. (a + 1) * k` of the
    /// capture (`k` the format's), all on one chunk timeline.
    pub fn start_addresses<E: Engine, L: Locate + Clone + 'static>(
        engines: Vec<E>,
        locate: L,
        cpus: &[usize],
        config: &ChunkConfig,
    ) -> Result<CaptureGroup> {
        let k = locate.streams();
        let n = engines.len();
        let mut threads = Vec::with_capacity(n);
        for (a, engine) in engines.into_iter().enumerate() {
            threads.push(Capture::start(
                engine,
                locate.clone(),
                config,
                cpus.get(a).copied(),
            )?);
        }
        Ok(CaptureGroup {
            threads,
            streams: (0..n).map(|a| (a * k..(a + 1) * k).collect()).collect(),
            nstreams: n * k,
            chunk_stride: 1,
        })
    }

    /// Starts one [`Capture`] per engine over every stream: engine `t` must
    /// receive the chunks `c` with `c mod engines == t`
    /// ([`packet_ring_chunk_fanout`]). The pool (`config.nchunks`) is shared
    /// out, each thread keeping its window and two more.
    pub fn start_chunks<E: Engine, L: Locate + Clone + 'static>(
        engines: Vec<E>,
        locate: L,
        cpus: &[usize],
        config: &ChunkConfig,
        max_packet: usize,
    ) -> Result<CaptureGroup> {
        let n = engines.len();
        let strays = std::sync::Arc::new(crate::assemble::Strays::new(n, STRAY_SLOTS, max_packet));
        let nstreams = locate.streams();
        let all: Vec<usize> = (0..nstreams).collect();
        let mut threads = Vec::with_capacity(n);
        for (t, engine) in engines.into_iter().enumerate() {
            let mut c = *config;
            c.assembler.chunk_stride = n as u64;
            c.assembler.chunk_member = t as u64;
            c.nchunks = config.nchunks.div_ceil(n).max(config.assembler.window + 2);
            let cpu = cpus.get(t).copied();
            let s = Some(strays.clone());
            threads.push(Capture::start_with_strays(
                engine,
                locate.clone(),
                &c,
                cpu,
                s,
            )?);
        }
        Ok(CaptureGroup {
            threads,
            streams: vec![all; n],
            nstreams,
            chunk_stride: n,
        })
    }

    /// Threads own chunk ids modulo this: a consumer's chunk `c` comes from
    /// thread `c % chunk_stride` alone (1: every thread has a part of each).
    pub fn chunk_stride(&self) -> usize {
        self.chunk_stride
    }

    pub fn threads(&self) -> &[Capture] {
        &self.threads
    }

    /// Global stream index of each stream of thread `t`'s chunks.
    pub fn thread_streams(&self, t: usize) -> &[usize] {
        &self.streams[t]
    }

    /// Waits up to `timeout` for thread `t`'s next chunk.
    pub fn next_chunk(&self, t: usize, timeout: Duration) -> Option<Lease> {
        self.threads.get(t)?.next_chunk(timeout)
    }

    pub fn consumer(&self, t: usize) -> Option<Consumer> {
        self.threads.get(t).map(Capture::consumer)
    }

    pub fn layout(&self, t: usize) -> Option<ChunkLayout> {
        self.threads.get(t).map(Capture::layout)
    }

    pub fn is_running(&self) -> bool {
        self.threads.iter().any(Capture::is_running)
    }

    /// Stops every thread; returns the first error.
    pub fn stop(&self) -> Result<()> {
        let mut first = Ok(());
        for c in &self.threads {
            let r = c.stop();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    pub fn stats(&self) -> GroupSnapshot {
        let mut total = Snapshot {
            counters: Counters::new(self.nstreams),
            ..Default::default()
        };
        let mut threads = Vec::with_capacity(self.threads.len());
        for (c, streams) in self.threads.iter().zip(&self.streams) {
            let snap = c.stats();
            let (t, s) = (&mut total.counters, &snap.counters);
            for (local, &global) in streams.iter().enumerate() {
                let (sum, one) = (&mut t.streams[global], &s.streams[local]);
                add_fields!(sum, one; received, missing, late, duplicate, dropped, bytes, invalid);
            }
            add_fields!(t, s; malformed, foreign, chunks_emitted, chunks_dropped, resyncs);
            add_fields!(total, snap; kernel_drops, rcvbuf);
            total.station = total.station.or(snap.station);
            threads.push(ThreadSnapshot {
                streams: streams.clone(),
                snapshot: snap,
                tid: c.thread_id(),
                cpu: c.cpu(),
            });
        }
        // Namespace/host-wide context: every thread samples the same counters.
        if let Some(first) = threads.first() {
            total.host = first.snapshot.host;
        }
        GroupSnapshot { threads, total }
    }

    /// How the threads' chunk pools were placed, summed over the threads.
    pub fn memory(&self) -> MemoryReport {
        let mut all = MemoryReport {
            huge_pages: !self.threads.is_empty(),
            locked: !self.threads.is_empty(),
            ..Default::default()
        };
        for c in &self.threads {
            let m = c.memory();
            all.bytes += m.bytes;
            all.huge_pages &= m.huge_pages;
            all.locked &= m.locked;
            all.numa_node = all.numa_node.or(m.numa_node);
            for w in &m.warnings {
                if !all.warnings.contains(w) {
                    all.warnings.push(w.clone());
                }
            }
        }
        all
    }

    /// The interface the engines receive on, when they know it.
    pub fn interface(&self) -> Option<&str> {
        self.threads.first().and_then(Capture::interface)
    }
}

#[cfg(test)]
#[path = "group_chunks_tests.rs"]
mod chunks_tests;

#[cfg(test)]
#[path = "group_spead_chunks_tests.rs"]
mod spead_chunks_tests;

impl Drop for CaptureGroup {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::pin::affinity;
    use crate::capture::{Fault, FaultPlan};
    use crate::wire::{FormatSpec, Locator};
    use std::net::UdpSocket;

    const LEN: usize = 64;
    const STREAMS: usize = 5;

    fn packet(stream: u16, index: u64) -> Vec<u8> {
        let mut p = index.to_be_bytes().to_vec();
        p.extend_from_slice(&stream.to_be_bytes());
        p.extend((0..LEN).map(|k| (index as usize * 31 + k * 3 + stream as usize) as u8));
        p
    }

    /// The locator of `streams` counter streams of `payload_len` bytes, and small,
    /// quickly retired packet rings on a loopback port (for this file's tests and
    /// chunks_tests).
    pub(super) fn counter_rings(streams: usize, payload_len: usize) -> (Locator, PacketRingConfig) {
        let locator = FormatSpec::Counter {
            streams,
            payload_len,
        }
        .locator()
        .unwrap();
        let mut ring = PacketRingConfig::new("127.0.0.1:0");
        ring.blocks = 4;
        ring.block_size = 128 << 10;
        ring.retire_ms = 2;
        (locator, ring)
    }

    /// Input packets lost to the faults of `run_group`: the gap and the truncation.
    fn lost(s: usize, i: u64) -> bool {
        (i, s) == (37, 3) || (i, s) == (51, 0)
    }

    /// Sends 5 streams x 80 packets with one gap, one late, one duplicate,
    /// one foreign and one truncated packet to a group of `n` threads, and
    /// checks every counter of every thread.
    fn run_group(n: usize) {
        let (locator, ring) = counter_rings(STREAMS, LEN);
        let tc = ThreadsConfig {
            threads: n,
            cpus: (0..n).map(|t| affinity(0).unwrap()[t % 2]).collect(),
            ..Default::default()
        };
        let owners = tc.owners(STREAMS, false).unwrap();
        let engines = packet_ring_fanout(&ring, &locator, &owners, n).unwrap();
        let to = engines[0].local_addr().unwrap();
        let mut cfg = ChunkConfig::new(8);
        cfg.nchunks = 32;
        let group = CaptureGroup::start(engines, locator, &owners, &tc.cpus, &cfg).unwrap();
        // Packet (s, i) is at position 5 * i + s.
        let mut faults = FaultPlan::new(0)
            .at(5 * 37 + 3, Fault::Drop) // a gap
            // A copy of (4, 10) about 40 indices on: behind the window, late.
            .at(5 * 10 + 4, Fault::Duplicate { delay: 200 })
            .at(5 * 50 + 1, Fault::Duplicate { delay: 0 })
            .at(5 * 50 + 2, Fault::Foreign) // stream 9
            .at(5 * 51, Fault::Truncate) // a 3-byte datagram: malformed
            .cut_to(3)
            .foreign(|p| [&p[..8], &9u16.to_be_bytes(), &p[10..]].concat())
            .injector()
            .unwrap();
        let sent =
            faults.apply((0..80u64).flat_map(|i| (0..STREAMS as u16).map(move |s| packet(s, i))));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in &sent {
            tx.send_to(d.bytes().unwrap(), to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        // While the threads run: each is pinned to its CPU.
        for (t, th) in group.stats().threads.iter().enumerate() {
            assert_eq!(affinity(th.tid).unwrap(), [tc.cpus[t]], "thread {t} pinned");
        }
        group.stop().unwrap();
        let g = group.stats();
        let owner_of = |s: usize| owners[s];
        for (t, th) in g.threads.iter().enumerate() {
            let c = &th.snapshot.counters;
            assert_eq!(th.streams, thread_streams(&owners, n)[t]);
            assert_eq!(th.cpu, Some(tc.cpus[t]));
            assert_eq!(th.snapshot.kernel_drops, 0);
            for (k, &s) in th.streams.iter().enumerate() {
                let sc = &c.streams[k];
                let want_missing = (0..80).filter(|&i| lost(s, i)).count() as u64;
                assert_eq!(sc.received, 80 - want_missing, "thread {t} stream {s}");
                assert_eq!(sc.missing, want_missing);
                assert_eq!(sc.late, (s == 4) as u64);
                assert_eq!(sc.duplicate, (s == 1) as u64);
            }
            // Unsteerable packets go to thread 0, which counts them.
            assert_eq!((c.foreign, c.malformed), ((t == 0) as u64, (t == 0) as u64));
            assert_eq!(c.chunks_emitted, 10);
            let sent_here: u64 = th
                .streams
                .iter()
                .map(|&s| 80 - (0..80).filter(|&i| lost(s, i)).count() as u64)
                .sum::<u64>()
                + th.streams.iter().filter(|&&s| s == 4 || s == 1).count() as u64
                + 2 * (t == 0) as u64;
            assert_eq!(c.accounted(), sent_here, "thread {t}");
        }
        let tot = &g.total.counters;
        let injected = faults.injected();
        assert_eq!(tot.accounted(), injected.delivered);
        assert_eq!(tot.accounted(), 5 * 80 - 1 + 3);
        assert_eq!((tot.streams[3].missing, tot.streams[0].missing), (1, 1));
        let want = (injected.foreign, injected.truncated);
        assert_eq!((tot.foreign, tot.malformed), want);
        assert_eq!((tot.foreign, tot.malformed), (1, 1));
        // Each thread's chunks hold exactly its streams' packets.
        for t in 0..n {
            let mine = group.thread_streams(t).to_vec();
            let mut chunks = 0;
            while let Some(ch) = group.next_chunk(t, Duration::from_millis(10)) {
                assert_eq!(ch.layout().streams, mine.len());
                for (k, &s) in mine.iter().enumerate() {
                    assert_eq!(owner_of(s), t);
                    for j in 0..8 {
                        let i = ch.first_index() + j as u64;
                        let present = !lost(s, i);
                        assert_eq!(ch.is_present(k, j), present);
                        if present {
                            assert_eq!(ch.payload(k, j).unwrap(), &packet(s as u16, i)[10..]);
                        }
                    }
                }
                chunks += 1;
            }
            assert_eq!(chunks, 10);
        }
    }

    #[test]
    fn two_threads_split_the_streams_with_exact_counters() {
        run_group(2);
    }

    #[test]
    fn three_threads_split_the_streams_with_exact_counters() {
        run_group(3);
    }

    #[test]
    fn bad_thread_settings_are_clear_errors() {
        let e = ThreadsConfig::new(6)
            .owners(5, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 5 threads"), "{e}");
        let mut tc = ThreadsConfig::new(2);
        tc.cpus = vec![0];
        assert!(tc
            .owners(5, false)
            .unwrap_err()
            .to_string()
            .contains("one CPU per thread"));
        tc.cpus = vec![0, 4096];
        assert!(tc
            .owners(5, false)
            .unwrap_err()
            .to_string()
            .contains("CPU 4096"));
        tc.cpus = vec![];
        tc.owners = vec![0, 0, 0, 0, 0];
        assert!(tc
            .owners(5, false)
            .unwrap_err()
            .to_string()
            .contains("thread 1 owns no"));
        let ynao = FormatSpec::Ynao { subband: None }.locator().unwrap();
        let e = packet_ring_fanout(&PacketRingConfig::new("127.0.0.1:0"), &ynao, &[0], 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("threads=1"), "{e}");
    }
}
