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

/// Chunking parameters of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureConfig {
    pub assembler: AssemblerConfig,
    /// Chunks allocated at start-up (the pool); at least `window + 1` so that a
    /// consumer holding one chunk does not starve the assembler.
    pub nchunks: usize,
    /// CPU the capture thread pins itself to before it allocates the pool;
    /// `None`: wherever the scheduler puts it.
    pub cpu: Option<usize>,
}

impl CaptureConfig {
    /// Defaults: 8 chunks, window 2, resync beyond 64 chunks.
    pub fn new(packets_per_chunk: usize) -> Self {
        CaptureConfig {
            assembler: AssemblerConfig::new(packets_per_chunk),
            nchunks: 8,
            cpu: None,
        }
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
    /// Allocates the pool, then starts the capture thread.
    pub fn start<E: Engine, L: Locate + 'static>(
        engine: E,
        locate: L,
        config: &CaptureConfig,
    ) -> Result<Capture> {
        config.assembler.validate()?;
        let layout = ChunkLayout {
            streams: locate.streams(),
            packets_per_chunk: config.assembler.packets_per_chunk,
            payload_len: locate.payload_len(),
        };
        layout.validate()?;
        if config.nchunks <= config.assembler.window {
            return Err(Error::Config(format!(
                "nchunks ({}) must exceed the reorder window ({}): the assembler fills \
                 `window` chunks at once and consumers need at least one more",
                config.nchunks, config.assembler.window
            )));
        }
        if let Some(cpu) = config.cpu {
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
                        if let Some(cpu) = config.cpu {
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
                        let assembler = Assembler::new(locate, producer, &config.assembler)?;
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
            cpu: config.cpu,
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
        stats.publish(assembler.counters());
        stats.set_station(assembler.station());
        if last_drops.elapsed() >= DROPS_EVERY {
            stats.set_kernel_drops(engine.kernel_drops());
            stats.set_host(&host.sample());
            last_drops = Instant::now();
        }
    }
    if result.is_ok() {
        let t = Instant::now();
        while t.elapsed() < DRAIN_LIMIT {
            match engine.recv_batch(DRAIN_WAIT, |p| feed(assembler, p)) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{SocketConfig, SocketEngine};
    use crate::wire::FormatSpec;
    use std::net::UdpSocket;

    fn packet(stream: u16, index: u64, len: usize) -> Vec<u8> {
        let mut p = index.to_be_bytes().to_vec();
        p.extend_from_slice(&stream.to_be_bytes());
        p.extend((0..len).map(|k| (index as usize * 131 + k * 7 + stream as usize) as u8));
        p
    }

    #[test]
    fn loopback_capture_delivers_exact_chunks_and_counts() {
        const LEN: usize = 256;
        let engine = SocketEngine::bind(&SocketConfig::new("127.0.0.1:0")).unwrap();
        let mut cfg = CaptureConfig::new(16);
        cfg.nchunks = 64;
        let cap = Capture::start(
            engine,
            FormatSpec::Counter {
                streams: 2,
                payload_len: LEN,
            }
            .locator()
            .unwrap(),
            &cfg,
        )
        .unwrap();
        let to = cap.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0u64;
        for i in 0..320u64 {
            for s in 0..2u16 {
                if (i, s) == (37, 1) {
                    continue; // a gap
                }
                tx.send_to(&packet(s, i, LEN), to).unwrap();
                sent += 1;
            }
            if i == 100 {
                tx.send_to(&packet(0, 60, LEN), to).unwrap(); // behind the window
                tx.send_to(&packet(9, 100, LEN), to).unwrap(); // foreign stream
                tx.send_to(&[1, 2, 3], to).unwrap(); // truncated
                tx.send_to(&packet(1, 100, LEN), to).unwrap(); // duplicate
                sent += 4;
            }
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // stay under rcvbuf
            }
        }
        // The bounded sleep lets the thread receive everything before stop drains.
        std::thread::sleep(Duration::from_millis(50));
        cap.stop().unwrap();
        let s = cap.stats();
        let c = &s.counters;
        assert_eq!(s.kernel_drops, 0);
        assert_eq!(c.accounted(), sent);
        assert_eq!((c.streams[0].received, c.streams[1].received), (320, 319));
        assert_eq!((c.streams[0].late, c.streams[1].duplicate), (1, 1));
        assert_eq!((c.foreign, c.malformed), (1, 1));
        assert_eq!((c.streams[0].missing, c.streams[1].missing), (0, 1));
        assert_eq!(c.chunks_emitted, 20);
        let mut ids = Vec::new();
        while let Some(ch) = cap.next_chunk(Duration::from_millis(10)) {
            for s in 0..2 {
                for k in 0..16 {
                    let i = ch.first_index() + k as u64;
                    let present = (i, s) != (37, 1);
                    assert_eq!(ch.is_present(s, k), present);
                    if present {
                        assert_eq!(ch.payload(s, k).unwrap(), &packet(s as u16, i, LEN)[10..]);
                    }
                }
            }
            ids.push(ch.chunk_id());
        }
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
    }
}
