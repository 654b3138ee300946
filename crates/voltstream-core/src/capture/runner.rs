use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Engine, Received};
use crate::assemble::{Assembler, AssemblerConfig, Chunk, ChunkLayout};
use crate::host_counters::HostSampler;
use crate::memory::{MemoryReport, Placement};
use crate::ring::{chunk_ring, Consumer, Lease};
use crate::stats::{Snapshot, Stats};
use crate::wire::Locate;
use crate::{Error, Result};

/// How long the capture thread waits for packets before checking for a stop.
const POLL: Duration = Duration::from_millis(100);
/// How often the kernel's drop counter is read (a system call) while running.
const DROPS_EVERY: Duration = Duration::from_millis(50);
/// Longest time `stop` keeps draining packets the kernel already queued.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// How long the drain waits for more before it ends: longer than the packet ring's
/// block retire timeout (4 ms), so packets in a block the kernel has not yet handed
/// over at stop are read and counted, not left uncounted in the ring.
const DRAIN_WAIT: Duration = Duration::from_millis(20);

/// How a capture assembles packets into chunks, and how many chunks it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    pub assembler: AssemblerConfig,
    /// Chunks allocated at start-up (the pool); at least `window + 1` so that a
    /// consumer holding one chunk does not starve the assembler.
    pub nchunks: usize,
    /// Each packet's slot holds the whole packet (the UDP payload, format header
    /// included) instead of its sample bytes: frames as received, for recorders
    /// of VLBI layouts. Needs a format whose packets have one length.
    pub whole_packets: bool,
}

impl ChunkConfig {
    /// Packets per stream per chunk when a capture does not say.
    pub const DEFAULT_PACKETS_PER_CHUNK: usize = 256;

    /// Defaults: 16 chunks, the assembler's window (4) and resync bound (64),
    /// sample bytes only.
    pub fn new(packets_per_chunk: usize) -> Self {
        ChunkConfig {
            assembler: AssemblerConfig::new(packets_per_chunk),
            nchunks: 16,
            whole_packets: false,
        }
    }

    /// Checks the assembler's settings and that the pool outnumbers the window.
    pub fn validate(&self) -> Result<()> {
        self.assembler.validate()?;
        if self.nchunks <= self.assembler.window {
            return Err(Error::Config(format!(
                "nchunks ({}) must exceed window ({}): the assembler keeps `window` chunks \
                 open and consumers need at least one more",
                self.nchunks, self.assembler.window
            )));
        }
        Ok(())
    }
}

impl Default for ChunkConfig {
    /// [`ChunkConfig::new`] with [`ChunkConfig::DEFAULT_PACKETS_PER_CHUNK`].
    fn default() -> Self {
        ChunkConfig::new(Self::DEFAULT_PACKETS_PER_CHUNK)
    }
}

/// A running capture: one engine and one assembler on their own thread, chunks
/// delivered through a ring. Stops (and joins) on [`Capture::stop`] or drop.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<Result<()>>>>,
    stats: Arc<Stats>,
    consumer: Consumer,
    layout: ChunkLayout,
    engine: &'static str,
    local: Option<SocketAddr>,
    memory: MemoryReport,
    interface: Option<String>,
    /// Kernel thread id of the capture thread.
    tid: i32,
    cpu: Option<usize>,
    /// Address and length of every chunk's data in the pool, fixed for the
    /// capture's life (for registering the pool with a GPU driver).
    pool: Vec<(usize, usize)>,
}

impl Capture {
    /// Allocates the pool, then starts the capture thread, pinned to `cpu` when
    /// given (before it allocates, so the pool's pages are on that CPU's node).
    pub fn start<E: Engine, L: Locate + 'static>(
        engine: E,
        locate: L,
        config: &ChunkConfig,
        cpu: Option<usize>,
    ) -> Result<Capture> {
        Self::start_with_strays(engine, locate, config, cpu, None)
    }

    /// [`Capture::start`] for one of several threads taking turns by chunk:
    /// packets of the others' chunks go to their inboxes in `strays`, and
    /// this thread places what they forward to it.
    pub fn start_with_strays<E: Engine, L: Locate + 'static>(
        engine: E,
        locate: L,
        config: &ChunkConfig,
        cpu: Option<usize>,
        strays: Option<Arc<crate::assemble::Strays>>,
    ) -> Result<Capture> {
        config.validate()?;
        let layout = ChunkLayout {
            streams: locate.streams(),
            packets_per_chunk: config.assembler.packets_per_chunk,
            payload_len: locate.payload_len(),
        };
        layout.validate()?;
        if let Some(cpu) = cpu {
            super::pin::check_cpu(cpu)?;
        }
        // The pool goes on huge pages and the NIC's NUMA node (faulted and locked
        // by the capture thread, after it pinned itself).
        let placement = Placement::near(engine.interface());
        let stats = Arc::new(Stats::new(layout.streams));
        stats.set_rcvbuf(engine.rcvbuf());
        let stop = Arc::new(AtomicBool::new(false));
        let (name, local) = (engine.name(), engine.local_addr());
        let interface = engine.interface().map(String::from);
        // Baseline of the kernel's other counters, before any traffic is read.
        let mut host = HostSampler::start(engine.interface());
        stats.set_host(&host.sample());
        // The thread pins itself, then allocates (and so first-touches) its
        // pool, and reports back: the pool's pages belong to its CPU's node.
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread = {
            let (stats, stop, config) = (stats.clone(), stop.clone(), *config);
            std::thread::Builder::new()
                .name("vs-capture".into())
                .spawn(move || {
                    let setup = || -> Result<_> {
                        if let Some(cpu) = cpu {
                            super::pin::pin_current_thread(cpu)?;
                        }
                        let chunks = (0..config.nchunks)
                            .map(|_| Chunk::placed(layout, &placement))
                            .collect::<Result<Vec<_>>>()?;
                        let memory = MemoryReport::of(chunks.iter().map(Chunk::buffer));
                        let pool = chunks
                            .iter()
                            .map(|c| (c.data_ptr() as usize, c.data().len()))
                            .collect::<Vec<_>>();
                        let (producer, consumer) = chunk_ring(chunks);
                        let mut assembler = Assembler::new(locate, producer, &config.assembler)?;
                        if let Some(strays) = strays {
                            assembler.set_strays(strays);
                        }
                        Ok((assembler, consumer, memory, pool))
                    };
                    match setup() {
                        Ok((mut assembler, consumer, memory, pool)) => {
                            let tid = super::pin::current_tid();
                            let _ = ready_tx.send(Ok((consumer, tid, memory, pool)));
                            run(engine, &mut assembler, &stats, &stop, &mut host)
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            Ok(())
                        }
                    }
                })
                .map_err(|e| Error::io("cannot start the capture thread", e))?
        };
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err(Error::io(
                "the capture thread ended during start-up; this is a bug, please report it",
                std::io::Error::other("capture thread start-up failed"),
            ))
        });
        let (consumer, tid, memory, pool) = match ready {
            Ok(r) => r,
            Err(e) => {
                let _ = thread.join();
                return Err(e);
            }
        };
        Ok(Capture {
            stop,
            thread: Mutex::new(Some(thread)),
            stats,
            consumer,
            layout,
            engine: name,
            local,
            memory,
            interface,
            tid,
            cpu,
            pool,
        })
    }

    /// Waits up to `timeout` for the next filled chunk; `None` on timeout or once
    /// the capture has stopped and every chunk was taken.
    pub fn next_chunk(&self, timeout: Duration) -> Option<Lease> {
        self.consumer.pop(timeout)
    }

    /// (address, length) of every chunk's data in the pool. The memory stays
    /// mapped, at the same address, until the capture is dropped.
    pub fn pool_buffers(&self) -> &[(usize, usize)] {
        &self.pool
    }

    /// Another handle on the chunk queue, for a consumer thread.
    pub fn consumer(&self) -> Consumer {
        self.consumer.clone()
    }

    pub fn stats(&self) -> Snapshot {
        self.stats.snapshot()
    }

    pub fn layout(&self) -> ChunkLayout {
        self.layout
    }

    pub fn engine_name(&self) -> &'static str {
        self.engine
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// How the chunk pool was placed (huge pages, lock, NUMA node, warnings).
    pub fn memory(&self) -> &MemoryReport {
        &self.memory
    }

    /// The interface the engine receives on, when it knows it.
    pub fn interface(&self) -> Option<&str> {
        self.interface.as_deref()
    }

    /// Kernel thread id of the capture thread (for `/proc/self/task/<tid>`).
    pub fn thread_id(&self) -> i32 {
        self.tid
    }

    /// The CPU the capture thread is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// True until the capture thread has ended (stopped, or failed).
    pub fn is_running(&self) -> bool {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        t.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stops the thread: packets the kernel already queued are drained (for at
    /// most a second), open chunks are flushed, then the ring closes. Returns the
    /// error that ended the thread early, if any. Later calls return `Ok`.
    pub fn stop(&self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        match handle.map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::io(
                "the capture thread panicked; this is a bug, please report it",
                std::io::Error::other("capture thread panicked"),
            )),
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run<E: Engine, L: Locate, S: crate::assemble::ChunkSink>(
    mut engine: E,
    assembler: &mut Assembler<L, S>,
    stats: &Stats,
    stop: &AtomicBool,
    host: &mut HostSampler,
) -> Result<()> {
    let mut last_drops = Instant::now();
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = engine.recv_batch(POLL, |p| feed(assembler, p)) {
            result = Err(e);
            break;
        }
        // The one clock read per batch: chunks past their flush age go out.
        let now = Instant::now();
        assembler.tick(now);
        assembler.take_strays(false);
        stats.publish(assembler.counters());
        stats.set_station(assembler.station());
        if now.duration_since(last_drops) >= DROPS_EVERY {
            stats.set_kernel_drops(engine.kernel_drops());
            stats.set_host(&host.sample());
            last_drops = now;
        }
    }
    if result.is_ok() {
        let t = Instant::now();
        while t.elapsed() < DRAIN_LIMIT {
            let got = engine.recv_batch(DRAIN_WAIT, |p| feed(assembler, p));
            assembler.take_strays(false);
            match got {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
    }
    assembler.take_strays(true);
    assembler.finish();
    stats.publish(assembler.counters());
    stats.set_station(assembler.station());
    stats.set_kernel_drops(engine.kernel_drops());
    stats.set_host(&host.sample());
    result
}

#[inline]
fn feed<L: Locate, S: crate::assemble::ChunkSink>(a: &mut Assembler<L, S>, p: Received<'_>) {
    match p {
        Received::Packet(b) => a.push(b),
        Received::Truncated => a.push_truncated(),
    }
    a.poll_strays();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Fault, FaultPlan, InMemoryEngine, SocketConfig, SocketEngine};
    use crate::wire::FormatSpec;
    use std::net::UdpSocket;

    const LEN: usize = 256;

    fn packet(stream: u16, index: u64, len: usize) -> Vec<u8> {
        let mut p = index.to_be_bytes().to_vec();
        p.extend_from_slice(&stream.to_be_bytes());
        p.extend((0..len).map(|k| (index as usize * 131 + k * 7 + stream as usize) as u8));
        p
    }

    /// Two streams of `n` packets each, index-major: packet (s, i) is at
    /// position 2 * i + s.
    fn two_streams(n: u64) -> Vec<Vec<u8>> {
        (0..n)
            .flat_map(|i| (0..2u16).map(move |s| packet(s, i, LEN)))
            .collect()
    }

    /// A packet of stream 9, which a 2-stream capture does not have.
    fn foreign(p: &[u8]) -> Vec<u8> {
        let mut q = p.to_vec();
        q[8..10].copy_from_slice(&9u16.to_be_bytes());
        q
    }

    fn counter_locator() -> crate::wire::Locator {
        FormatSpec::Counter {
            streams: 2,
            payload_len: LEN,
        }
        .locator()
        .unwrap()
    }

    /// Checks every chunk's presence and bytes: present unless `lost(stream, index)`;
    /// returns the chunk ids.
    fn check_chunks(cap: &Capture, lost: impl Fn(usize, u64) -> bool) -> Vec<u64> {
        let mut ids = Vec::new();
        while let Some(ch) = cap.next_chunk(Duration::from_millis(10)) {
            for s in 0..2 {
                for k in 0..16 {
                    let i = ch.first_index() + k as u64;
                    let present = !lost(s, i);
                    assert_eq!(ch.is_present(s, k), present, "stream {s} index {i}");
                    if present {
                        assert_eq!(ch.payload(s, k).unwrap(), &packet(s as u16, i, LEN)[10..]);
                    }
                }
            }
            ids.push(ch.chunk_id());
        }
        ids
    }

    #[test]
    fn loopback_capture_delivers_exact_chunks_and_counts() {
        let engine = SocketEngine::bind(&SocketConfig::new("127.0.0.1:0")).unwrap();
        let mut cfg = ChunkConfig::new(16);
        cfg.nchunks = 64;
        cfg.assembler.window = 2; // the late copy below is 3 chunks behind
        let cap = Capture::start(engine, counter_locator(), &cfg, None).unwrap();
        let to = cap.local_addr().unwrap();
        // One of each fault, at known places (packet (s, i) is at 2 * i + s).
        let mut faults = FaultPlan::new(0)
            .at(2 * 37 + 1, Fault::Drop) // a gap
            // A copy of (0, 60) after (1, 100), 81 packets on: behind the window.
            .at(2 * 60, Fault::Duplicate { delay: 81 })
            .at(2 * 100, Fault::Foreign) // stream 9
            .at(2 * 100 + 1, Fault::Duplicate { delay: 0 })
            .at(2 * 101, Fault::Truncate) // a 3-byte datagram
            .cut_to(3)
            .foreign(foreign)
            .injector()
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for (k, d) in faults.apply(two_streams(320)).iter().enumerate() {
            tx.send_to(d.bytes().unwrap(), to).unwrap();
            if k % 128 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // stay under rcvbuf
            }
        }
        // The bounded sleep lets the thread receive everything before stop drains.
        std::thread::sleep(Duration::from_millis(50));
        cap.stop().unwrap();
        let n = faults.injected();
        let s = cap.stats();
        let c = &s.counters;
        assert_eq!(s.kernel_drops, 0);
        assert_eq!(c.accounted(), n.delivered);
        assert_eq!((c.streams[0].received, c.streams[1].received), (319, 319));
        assert_eq!((c.streams[0].late, c.streams[1].duplicate), (1, 1));
        assert_eq!((c.foreign, c.malformed), (1, 1));
        assert_eq!((c.streams[0].missing, c.streams[1].missing), (1, 1));
        assert_eq!(c.chunks_emitted, 20);
        let ids = check_chunks(&cap, |s, i| (s, i) == (1, 37) || (s, i) == (0, 101));
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
    }

    /// The whole capture thread, fed from memory through random faults: every
    /// counter equals what the injector says it did, with no network or sleep.
    #[test]
    fn random_faults_are_counted_exactly_by_the_capture() {
        const N: u64 = 640;
        for seed in 1..4 {
            let (inner, feed) = InMemoryEngine::new();
            for p in two_streams(N / 2) {
                feed.send(p);
            }
            feed.kernel_drops(5);
            // Delays (8 packets) stay far inside the window (2 chunks of 16
            // packets, 64 positions), so nothing is late; the first and last
            // packets are spared, so the timeline's ends are the clean ones.
            let plan = FaultPlan::new(seed)
                .rate(Fault::Delay(8), 0.05)
                .rate(Fault::Drop, 0.02)
                .rate(Fault::Truncate, 0.01)
                .rate(Fault::Duplicate { delay: 8 }, 0.02)
                .rate(Fault::Garbage, 0.01)
                .rate(Fault::Foreign, 0.01)
                .foreign(foreign)
                .between(1..N - 1);
            let engine = crate::capture::Faults::new(inner, plan).unwrap();
            let report = engine.report();
            let mut cfg = ChunkConfig::new(16);
            cfg.nchunks = 64;
            cfg.assembler.window = 2;
            let cap = Capture::start(engine, counter_locator(), &cfg, None).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while report.injected().packets < N && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            cap.stop().unwrap();
            let n = report.injected();
            assert_eq!(n.packets, N, "seed {seed}");
            assert!(
                n.dropped + n.duplicated + n.delayed > 20,
                "seed {seed}: {n:?}"
            );
            let s = cap.stats();
            let (c, t) = (&s.counters, s.counters.total());
            assert_eq!(s.kernel_drops, 5);
            assert_eq!(cap.engine_name(), "in-memory");
            assert_eq!(c.accounted(), n.delivered, "seed {seed}");
            assert_eq!(t.received, n.intact(), "seed {seed}");
            assert_eq!(t.duplicate, n.duplicated, "seed {seed}");
            assert_eq!(t.late, 0, "seed {seed}");
            assert_eq!(
                t.missing,
                n.dropped + n.truncated + n.garbage,
                "seed {seed}"
            );
            assert_eq!(c.malformed, n.truncated + n.garbage, "seed {seed}");
            assert_eq!(c.foreign, n.foreign, "seed {seed}");
            assert_eq!(c.chunks_emitted, 20);
            // The chunks hold exactly the packets that arrived intact.
            let lost: Vec<(usize, u64)> = report
                .log()
                .iter()
                .filter(|(_, f)| matches!(f, Fault::Drop | Fault::Truncate | Fault::Garbage))
                .map(|&(at, _)| ((at % 2) as usize, at / 2))
                .collect();
            assert_eq!(lost.len() as u64, t.missing);
            let ids = check_chunks(&cap, |s, i| lost.contains(&(s, i)));
            assert_eq!(ids, (0..20).collect::<Vec<_>>(), "seed {seed}");
        }
    }
}
