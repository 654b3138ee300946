//! `_core.Capture`: a capture engine (socket, packet ring, AF_XDP or DPDK)
//! assembling packets into chunks (the chunks themselves: chunk.rs).
//!
//! Adding a format: one arm in `Capture.__new__` (parse the kwargs into a
//! [`Format`] variant), the variant's three getters, and one arm in
//! [`start_capture`]; engines need no change.
//!
//! Chunks are exported zero-copy through the buffer protocol. A chunk returns to
//! the pool on `release()` or when it is garbage collected; `release()` is refused
//! while an export (a NumPy array, a memoryview) is alive, so no Python object
//! can ever see a buffer the capture thread is refilling.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voltstream_core::assemble::{AssemblerConfig, ChunkLayout};
use voltstream_core::capture::{
    multicast_plan, packet_ring_fanout, CaptureConfig, CaptureGroup, DpdkConfig, DpdkEngine,
    DpdkInfo, DpdkPort, Engine, GroupSnapshot, PacketRingConfig, PacketRingEngine, Received,
    SocketConfig, SocketEngine, ThreadsConfig, XdpConfig, XdpEngine, XdpInfo, XdpMode,
};
use voltstream_core::host_counters::HostCounters;
use voltstream_core::memory::MemoryReport;
use voltstream_core::stats::{Counters, Snapshot, StreamCounters};
use voltstream_core::wire::{Endian, FormatSpec, Layout, LayoutCheck, LayoutField, SpeadHeapIndex};

use crate::chunk::PyChunk;
use crate::errors::{py_error, to_py};

/// Slack above the expected packet length, so over-long packets arrive flagged
/// as truncated rather than silently fitting.
const PACKET_MARGIN: usize = 64;
/// Longest uninterrupted wait in `next_chunk` before checking for Ctrl-C.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn config_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "ConfigError", msg))
}

pub(crate) fn capture_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "CaptureError", msg))
}

/// Starts `engine` with the locator of `format`: the one place a new format
/// meets the (generic) capture thread. One engine is a group of one thread.
fn start_capture<E: Engine>(
    engine: E,
    format: &FormatSpec,
    config: &CaptureConfig,
    cpus: &[usize],
) -> voltstream_core::Result<CaptureGroup> {
    let owners = vec![0; format.streams()];
    CaptureGroup::start(vec![engine], format.locator()?, &owners, cpus, config)
}

/// Reads one `{offset, bytes, endian='big', shift=0, bits=0}` field of a layout.
fn layout_field(d: &Bound<'_, PyDict>, what: &str) -> PyResult<LayoutField> {
    let get = |k: &str| d.get_item(k);
    let need =
        |k: &str| get(k)?.ok_or_else(|| config_error(format!("layout field '{what}' needs '{k}'")));
    let endian = match get("endian")?
        .map(|v| v.extract::<String>())
        .transpose()?
        .as_deref()
    {
        None | Some("big") => Endian::Big,
        Some("little") => Endian::Little,
        Some(o) => {
            return Err(config_error(format!(
                "layout field '{what}': endian {o:?}; use 'big' or 'little'"
            )))
        }
    };
    let opt_u8 =
        |k: &str| -> PyResult<u8> { Ok(get(k)?.map(|v| v.extract()).transpose()?.unwrap_or(0)) };
    Ok(LayoutField {
        offset: need("offset")?.extract()?,
        bytes: need("bytes")?.extract()?,
        endian,
        shift: opt_u8("shift")?,
        bits: opt_u8("bits")?,
    })
}

/// Builds a declarative [`Layout`] from the `layout=` dict of `Capture()`.
fn layout_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Layout> {
    let need = |k: &str| {
        d.get_item(k)?
            .ok_or_else(|| config_error(format!("format 'layout' needs layout['{k}']")))
    };
    let sub = |k: &str| -> PyResult<Option<Bound<'_, PyDict>>> {
        Ok(d.get_item(k)?
            .map(|v| v.cast_into::<PyDict>())
            .transpose()?)
    };
    let index = sub("index")?.ok_or_else(|| {
        config_error("format 'layout' needs layout['index'] = {offset, bytes}".into())
    })?;
    let mut checks = Vec::new();
    if let Some(list) = d.get_item("checks")? {
        for item in list.try_iter()? {
            let item = item?.cast_into::<PyDict>()?;
            let value = item
                .get_item("value")?
                .ok_or_else(|| config_error("each layout check needs a 'value'".into()))?;
            checks.push(LayoutCheck {
                field: layout_field(&item, "checks")?,
                value: value.extract()?,
                foreign: item
                    .get_item("foreign")?
                    .map(|v| v.extract())
                    .transpose()?
                    .unwrap_or(false),
            });
        }
    }
    Ok(Layout {
        packet_len: need("packet_len")?.extract()?,
        index: layout_field(&index, "index")?,
        index_step: d
            .get_item("index_step")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or(1),
        stream: sub("stream")?
            .map(|f| layout_field(&f, "stream"))
            .transpose()?,
        stream_ids: d
            .get_item("stream_ids")?
            .map(|v| v.extract())
            .transpose()?
            .unwrap_or_default(),
        checks,
        payload_offset: need("payload_offset")?.extract()?,
        payload_len: need("payload_len")?.extract()?,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EngineKind {
    Socket,
    PacketRing,
    Xdp,
    Dpdk,
}

impl EngineKind {
    fn name(self) -> &'static str {
        match self {
            EngineKind::Socket => "socket",
            EngineKind::PacketRing => "packet_ring",
            EngineKind::Xdp => "xdp",
            EngineKind::Dpdk => "dpdk",
        }
    }
}

/// The order in which `engine="auto"` tries engines: the first that opens wins.
/// The packet ring comes first: in bench/capture.py it lost nothing at the
/// sender's limit where the socket engine lost 44%. It needs CAP_NET_RAW, so
/// an unprivileged capture falls back to the socket engine, which every host has.
/// The AF_XDP engine is not tried: it takes over the interface's XDP hook
/// (one program per interface, one socket per queue), on loopback it can only
/// run in generic mode, where local UDP-GSO senders' super-frames cannot be
/// split (the ring splits them), and over a veth its drain rate was below the
/// ring's (docs/architecture.md, "AF_XDP engine"). Ask for it with engine="xdp".
/// Nor is the DPDK engine (engine="dpdk", built with the cargo feature `dpdk`):
/// it takes the whole port and needs its device named.
const AUTO_ORDER: [EngineKind; 2] = [EngineKind::PacketRing, EngineKind::Socket];

/// An engine behind a gate: while closed, nothing is read and packets wait in
/// the kernel's queue (used to measure how fast a pre-filled queue drains).
struct Gated<E> {
    inner: E,
    open: Arc<AtomicBool>,
}

impl<E: Engine> Engine for Gated<E> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn recv_batch<F: FnMut(Received<'_>)>(
        &mut self,
        timeout: Duration,
        sink: F,
    ) -> voltstream_core::Result<usize> {
        if !self.open.load(Ordering::Acquire) {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return Ok(0);
        }
        self.inner.recv_batch(timeout, sink)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.inner.kernel_drops()
    }

    fn rcvbuf(&self) -> u64 {
        self.inner.rcvbuf()
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr()
    }

    fn interface(&self) -> Option<&str> {
        self.inner.interface()
    }
}

/// A UDP capture assembling packets into chunks; `engine` picks the backend.
#[pyclass(module = "voltstream._core", name = "Capture", frozen)]
pub struct PyCapture {
    format: FormatSpec,
    config: CaptureConfig,
    engines: Vec<EngineKind>,
    socket: SocketConfig,
    ring: PacketRingConfig,
    xdp: XdpConfig,
    /// The AF_XDP engine's settings and counters, once it runs.
    xdp_info: Mutex<Option<Arc<XdpInfo>>>,
    dpdk: DpdkConfig,
    /// The DPDK engine's settings and counters, once it runs.
    dpdk_info: Mutex<Option<Arc<DpdkInfo>>>,
    gate: Arc<AtomicBool>,
    /// Capture threads, their CPUs and the thread owning each stream.
    threads: ThreadsConfig,
    owners: Vec<usize>,
    running: Mutex<Option<Arc<CaptureGroup>>>,
    /// Thread `next_chunk(thread=None)` looks at first (round robin).
    next_thread: AtomicUsize,
}

#[pymethods]
impl PyCapture {
    #[new]
    #[pyo3(signature = (
        format, bind, packets_per_chunk, nchunks = 8, window = 2, vdif_threads = None,
        vdif_frame_len = None, frames_per_second = None, subband = None, rcvbuf = 64 << 20,
        station = None, resync_chunks = 64, streams = 1, payload_len = None, batch = 64,
        engine = "auto", interface = None, ring_block_size = 1 << 20, digitiser_ids = None,
        samples_per_heap = 4096, sample_bits = 10, heap_address_bits = 48,
        timestamp_id = 0x1600, digitiser_id_item = 0x3101, codif_threads = None,
        codif_frame_len = None, frames_per_period = None, group = None, layout = None,
        xdp_queue = 0, xdp_mode = "auto", packets_per_heap = 1, heap_bytes = None,
        heap_cnt_step = None, multicast = None, threads = 1, cpus = None, stream_threads = None,
        dpdk_port = None, dpdk_eal_args = None, vdif_legacy = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        format: &str,
        bind: String,
        packets_per_chunk: usize,
        nchunks: usize,
        window: usize,
        vdif_threads: Option<Vec<u16>>,
        vdif_frame_len: Option<usize>,
        frames_per_second: Option<u32>,
        subband: Option<u8>,
        rcvbuf: usize,
        station: Option<u16>,
        resync_chunks: u64,
        streams: usize,
        payload_len: Option<usize>,
        batch: usize,
        engine: &str,
        interface: Option<String>,
        ring_block_size: usize,
        digitiser_ids: Option<Vec<u64>>,
        samples_per_heap: u64,
        sample_bits: u8,
        heap_address_bits: u8,
        timestamp_id: u64,
        digitiser_id_item: u64,
        codif_threads: Option<Vec<u16>>,
        codif_frame_len: Option<usize>,
        frames_per_period: Option<u32>,
        group: Option<u16>,
        layout: Option<Bound<'_, PyDict>>,
        xdp_queue: u32,
        xdp_mode: &str,
        packets_per_heap: usize,
        heap_bytes: Option<usize>,
        heap_cnt_step: Option<u64>,
        multicast: Option<Vec<String>>,
        threads: usize,
        cpus: Option<Vec<usize>>,
        stream_threads: Option<Vec<usize>>,
        dpdk_port: Option<String>,
        dpdk_eal_args: Option<String>,
        vdif_legacy: bool,
    ) -> PyResult<Self> {
        let groups = multicast
            .unwrap_or_default()
            .iter()
            .map(|g| {
                g.trim().parse::<Ipv4Addr>().map_err(|_| {
                    config_error(format!("multicast group {g:?} is not an IPv4 address"))
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let engines = match engine {
            "auto" => AUTO_ORDER.to_vec(),
            "socket" => vec![EngineKind::Socket],
            "packet_ring" => vec![EngineKind::PacketRing],
            "xdp" => vec![EngineKind::Xdp],
            "dpdk" => vec![EngineKind::Dpdk],
            other => {
                return Err(config_error(format!(
                    "unknown capture engine '{other}'; use 'auto', 'socket', 'packet_ring', \
                     'xdp' or 'dpdk'"
                )))
            }
        };
        let xdp_mode = XdpMode::parse(xdp_mode).map_err(to_py)?;
        let needs = |fmt: &str, what: &str| {
            config_error(format!("format '{fmt}' needs {what}; pass it to Capture()"))
        };
        let format = match format {
            "ynao" => FormatSpec::Ynao { subband },
            "vdif" => FormatSpec::Vdif {
                threads: vdif_threads.ok_or_else(|| needs("vdif", "vdif_threads (e.g. [0])"))?,
                frame_len: vdif_frame_len
                    .ok_or_else(|| needs("vdif", "vdif_frame_len (bytes, header included)"))?,
                frames_per_second: frames_per_second
                    .ok_or_else(|| needs("vdif", "frames_per_second"))?,
                station,
                legacy: vdif_legacy,
            },
            "spead" => {
                let ids =
                    digitiser_ids.ok_or_else(|| needs("spead", "digitiser_ids (e.g. [0, 1])"))?;
                // Heap index from the heap counter when its step is given,
                // else from the time stamp item (docs/formats.md).
                let index = match heap_cnt_step {
                    Some(step) => SpeadHeapIndex::HeapCnt { step },
                    None => SpeadHeapIndex::Timestamp,
                };
                let mut spec = match heap_bytes {
                    Some(b) => FormatSpec::spead_heaps(ids, samples_per_heap, b, 1, index),
                    None => FormatSpec::spead_digitiser(ids, samples_per_heap, sample_bits),
                }
                .map_err(to_py)?;
                if let FormatSpec::Spead {
                    heap_address_bits: a,
                    timestamp_id: t,
                    digitiser_id_item: d,
                    packets_per_heap: n,
                    heap_index: h,
                    ..
                } = &mut spec
                {
                    (*a, *t, *d) = (heap_address_bits, timestamp_id, digitiser_id_item);
                    (*n, *h) = (packets_per_heap, index);
                }
                spec
            }
            "codif" => FormatSpec::Codif {
                threads: codif_threads.ok_or_else(|| needs("codif", "codif_threads (e.g. [0])"))?,
                frame_len: codif_frame_len
                    .ok_or_else(|| needs("codif", "codif_frame_len (bytes, header included)"))?,
                frames_per_period: frames_per_period
                    .ok_or_else(|| needs("codif", "frames_per_period"))?,
                station,
                group,
            },
            "counter" => FormatSpec::Counter {
                streams,
                payload_len: payload_len
                    .ok_or_else(|| needs("counter", "payload_len (bytes per packet)"))?,
            },
            "layout" => FormatSpec::Layout(layout_from_dict(
                &layout.ok_or_else(|| needs("layout", "layout={packet_len, index, ...}"))?,
            )?),
            other => {
                return Err(config_error(format!(
                    "unknown capture format '{other}'; use 'vdif', 'ynao', 'spead', 'codif', \
                     'counter' or 'layout'"
                )))
            }
        };
        format.validate().map_err(to_py)?;
        if packets_per_chunk % format.packets_per_heap() != 0 {
            return Err(config_error(format!(
                "packets_per_chunk ({packets_per_chunk}) must be a multiple of packets_per_heap \
                 ({}) so that each chunk holds whole heaps",
                format.packets_per_heap()
            )));
        }
        let assembler = AssemblerConfig {
            packets_per_chunk,
            window,
            resync_chunks,
        };
        assembler.validate().map_err(to_py)?;
        let layout = ChunkLayout {
            streams: format.streams(),
            packets_per_chunk,
            payload_len: format.payload_len(),
        };
        layout.validate().map_err(to_py)?;
        if nchunks <= window {
            return Err(config_error(format!(
                "nchunks ({nchunks}) must exceed window ({window}): the assembler keeps \
                 `window` chunks open and consumers need at least one more"
            )));
        }
        let threads = ThreadsConfig {
            threads,
            cpus: cpus.unwrap_or_default(),
            owners: stream_threads.unwrap_or_default(),
        };
        let owners = threads.owners(format.streams()).map_err(to_py)?;
        let engines = if threads.threads == 1 {
            engines
        } else if engines.contains(&EngineKind::PacketRing) {
            // Only packet rings are steered by stream id across threads.
            vec![EngineKind::PacketRing]
        } else {
            return Err(config_error(format!(
                "threads={} needs engine='packet_ring' (or 'auto'): only the packet ring \
                 steers streams to several threads",
                threads.threads
            )));
        };
        let max_packet = (format.packet_len() + PACKET_MARGIN).min(65_536);
        let mut xdp = XdpConfig::new(bind.clone());
        xdp.interface = interface.clone();
        xdp.queue = xdp_queue;
        xdp.mode = xdp_mode;
        // The UMEM takes the memory the socket engine would give its queue.
        xdp.frames = XdpConfig::frames_for(rcvbuf, xdp.frame_size);
        xdp.max_packet = max_packet;
        xdp.multicast = groups.clone();
        let mut dpdk = DpdkConfig::new(bind.clone());
        dpdk.port = match (dpdk_port, &interface) {
            (Some(p), _) => Some(DpdkPort::parse(&p).map_err(to_py)?),
            (None, Some(i)) => Some(DpdkPort::AfPacket {
                interface: i.clone(),
            }),
            (None, None) => None,
        };
        dpdk.eal_args = dpdk_eal_args
            .map(|a| a.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        // The receive queue takes the memory the socket engine would give its queue.
        dpdk.queue_bytes = rcvbuf;
        dpdk.max_packet = max_packet;
        let mut ring = PacketRingConfig::new(bind.clone());
        ring.interface = interface.clone();
        ring.multicast = groups.clone();
        ring.block_size = ring_block_size;
        // The ring takes the memory the socket engine would give its queue.
        ring.blocks = rcvbuf.div_ceil(ring_block_size.max(1)).max(2);
        ring.max_packet = max_packet;
        let mut socket = SocketConfig::new(bind);
        socket.rcvbuf = rcvbuf;
        socket.batch = batch;
        socket.max_packet = max_packet;
        if let Ok(addr) = socket.bind.parse::<SocketAddr>() {
            multicast_plan(addr, &groups).map_err(to_py)?; // bad groups fail here, not at start
        }
        socket.multicast = groups;
        socket.interface = interface;
        Ok(PyCapture {
            format,
            config: CaptureConfig {
                assembler,
                nchunks,
                cpu: None,
            },
            engines,
            socket,
            ring,
            xdp,
            xdp_info: Mutex::new(None),
            dpdk,
            dpdk_info: Mutex::new(None),
            gate: Arc::new(AtomicBool::new(true)),
            threads,
            owners,
            running: Mutex::new(None),
            next_thread: AtomicUsize::new(0),
        })
    }

    /// Opens the engine, allocates the chunk pool and starts the capture thread.
    /// With `paused=True` nothing is read (packets queue in the kernel) until
    /// `resume()`.
    #[pyo3(signature = (paused = false))]
    fn start(&self, py: Python<'_>, paused: bool) -> PyResult<()> {
        let mut running = lock(&self.running);
        if running.is_some() {
            return Err(capture_error(
                "this Capture was already started; create a new Capture to capture again".into(),
            ));
        }
        self.gate.store(!paused, Ordering::Release);
        let cap = py.detach(|| self.open_and_start()).map_err(to_py)?;
        *running = Some(Arc::new(cap));
        Ok(())
    }

    /// Lets a capture started with `paused=True` read what has queued. Idempotent.
    fn resume(&self) {
        self.gate.store(true, Ordering::Release);
    }

    /// Waits up to `timeout_s` seconds for the next chunk of capture thread
    /// `thread` (None: of any thread, taking turns); None on timeout, or once
    /// the capture has stopped and every chunk was delivered.
    #[pyo3(signature = (timeout_s, thread = None))]
    fn next_chunk(
        &self,
        py: Python<'_>,
        timeout_s: f64,
        thread: Option<usize>,
    ) -> PyResult<Option<PyChunk>> {
        if !(timeout_s >= 0.0 && timeout_s.is_finite()) {
            return Err(config_error(format!(
                "timeout_s must be a finite number of seconds >= 0, got {timeout_s}"
            )));
        }
        let cap = self.running()?;
        let n = cap.threads().len();
        if let Some(t) = thread.filter(|&t| t >= n) {
            return Err(config_error(format!(
                "thread {t} does not exist; this capture has threads 0..{n}"
            )));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.min(1e9));
        // Waiting on one thread's ring at a time: with several, wait in short
        // slices so that a chunk on any ring is seen within a slice.
        let slice_max = if thread.is_none() && n > 1 {
            Duration::from_millis(2)
        } else {
            SIGNAL_SLICE
        };
        let mut polls = 0usize;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = left.min(slice_max);
            let t = match thread {
                Some(t) => t,
                None => self.next_thread.fetch_add(1, Ordering::Relaxed) % n,
            };
            if let Some(lease) = py.detach(|| cap.next_chunk(t, slice)) {
                let streams = cap.thread_streams(t).to_vec();
                return Ok(Some(PyChunk::new(lease, t, streams)));
            }
            polls += 1;
            if polls % 16 == 0 || slice_max == SIGNAL_SLICE {
                py.check_signals()?;
            }
            let finished = match thread {
                Some(t) => {
                    !cap.threads()[t].is_running() && cap.threads()[t].consumer().is_finished()
                }
                None => {
                    !cap.is_running() && cap.threads().iter().all(|c| c.consumer().is_finished())
                }
            };
            if left <= slice || finished {
                return Ok(None);
            }
        }
    }

    /// (address, nbytes) of the data of every chunk in the pools of all capture
    /// threads, fixed while the capture object lives: register them once with a
    /// GPU driver (cudaHostRegister) and every chunk can be copied from directly.
    fn chunk_buffers(&self) -> PyResult<Vec<(usize, usize)>> {
        let cap = self.running()?;
        Ok(cap
            .threads()
            .iter()
            .flat_map(|c| c.pool_buffers().iter().copied())
            .collect())
    }

    /// Chunks of all threads' pools that are free (neither being filled, nor queued
    /// for a consumer, nor held by one): the pool's fill is 1 - free / pool size.
    fn free_chunks(&self) -> PyResult<usize> {
        let cap = self.running()?;
        Ok(cap
            .threads()
            .iter()
            .map(|c| c.consumer().free_count())
            .sum())
    }

    /// Stops the capture: drains what the kernel queued, flushes open chunks.
    /// Chunks already assembled stay available from next_chunk. Idempotent.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.resume(); // a paused capture still drains what queued
        let cap = lock(&self.running).clone();
        match cap {
            Some(cap) => py.detach(|| cap.stop()).map_err(to_py),
            None => Ok(()),
        }
    }

    /// Counters: per-stream list, totals, capture-wide counters, kernel drops.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let cap = lock(&self.running).clone();
        let (group, running) = match &cap {
            Some(c) => (Some(c.stats()), c.is_running()),
            None => (None, false),
        };
        let snap = group.as_ref().map_or_else(
            || Snapshot {
                counters: Counters::new(self.format.streams()),
                ..Default::default()
            },
            |g| g.total.clone(),
        );
        // Before start: the engine asked for ("auto" until one is chosen).
        let engine = match (&cap, self.engines.as_slice()) {
            (Some(c), _) => c.threads()[0].engine_name(),
            (None, [one]) => one.name(),
            (None, _) => "auto",
        };
        let d = stats_dict(py, &snap, running, engine)?;
        let interface = cap.as_ref().and_then(|c| c.interface().map(String::from));
        d.set_item("host", host_dict(py, &snap.host, interface.as_deref())?)?;
        let memory = cap.as_ref().map(|c| c.memory()).unwrap_or_default();
        d.set_item("memory", memory_dict(py, &memory)?)?;
        d.set_item("multicast", self.groups())?;
        d.set_item(
            "threads",
            threads_list(py, group.as_ref(), &self.threads, &self.owners)?,
        )?;
        if let Some(info) = lock(&self.xdp_info).as_ref() {
            d.set_item("xdp", xdp_dict(py, info)?)?;
        }
        if let Some(info) = lock(&self.dpdk_info).as_ref() {
            d.set_item("dpdk", dpdk_dict(py, info)?)?;
        }
        Ok(d)
    }

    /// The bound address as "host:port" once started (useful with port 0).
    #[getter]
    fn address(&self) -> Option<String> {
        lock(&self.running)
            .as_ref()
            .and_then(|c| c.threads()[0].local_addr())
            .map(|a| a.to_string())
    }

    #[getter]
    fn nstreams(&self) -> usize {
        self.format.streams()
    }

    /// Number of capture threads.
    #[getter]
    fn threads(&self) -> usize {
        self.threads.threads
    }

    /// For each capture thread, the (global) stream indices its chunks hold.
    #[getter]
    fn thread_streams(&self) -> Vec<Vec<usize>> {
        voltstream_core::capture::thread_streams(&self.owners, self.threads.threads)
    }

    #[getter]
    fn payload_len(&self) -> usize {
        self.format.payload_len()
    }

    #[getter]
    fn packet_len(&self) -> usize {
        self.format.packet_len()
    }

    #[getter]
    fn packets_per_chunk(&self) -> usize {
        self.config.assembler.packets_per_chunk
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let started = lock(&slf.get().running).is_some();
        if !started {
            slf.get().start(slf.py(), false)?;
        }
        Ok(slf)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}

impl PyCapture {
    /// Opens the first engine of `engines` that works. When none does, the
    /// error is the first (preferred) engine's, so its type and hint survive.
    fn open_and_start(&self) -> voltstream_core::Result<CaptureGroup> {
        if self.threads.threads > 1 {
            return self.start_fanout();
        }
        let mut first = None;
        for kind in &self.engines {
            let gate = self.gate.clone();
            let r = match kind {
                EngineKind::Socket => SocketEngine::bind(&self.socket).and_then(|e| {
                    let e = Gated {
                        inner: e,
                        open: gate,
                    };
                    start_capture(e, &self.format, &self.config, &self.threads.cpus)
                }),
                EngineKind::PacketRing => PacketRingEngine::open(&self.ring).and_then(|e| {
                    let e = Gated {
                        inner: e,
                        open: gate,
                    };
                    start_capture(e, &self.format, &self.config, &self.threads.cpus)
                }),
                EngineKind::Xdp => XdpEngine::open(&self.xdp).and_then(|e| {
                    let info = e.info();
                    let e = Gated {
                        inner: e,
                        open: gate,
                    };
                    let cap = start_capture(e, &self.format, &self.config, &self.threads.cpus)?;
                    *lock(&self.xdp_info) = Some(info);
                    Ok(cap)
                }),
                EngineKind::Dpdk => DpdkEngine::open(&self.dpdk).and_then(|e| {
                    let info = e.info();
                    let e = Gated {
                        inner: e,
                        open: gate,
                    };
                    let cap = start_capture(e, &self.format, &self.config, &self.threads.cpus)?;
                    *lock(&self.dpdk_info) = Some(info);
                    Ok(cap)
                }),
            };
            match r {
                Ok(cap) => return Ok(cap),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(first.unwrap_or_else(|| {
            voltstream_core::Error::Config("no capture engine was selected".into())
        }))
    }

    /// The multicast groups the capture joins (a group bind host included).
    fn groups(&self) -> Vec<String> {
        let addr = self.socket.bind.parse::<SocketAddr>().ok();
        let plan = addr.and_then(|a| multicast_plan(a, &self.socket.multicast).ok().flatten());
        plan.map_or_else(Vec::new, |p| {
            p.groups.iter().map(|g| g.to_string()).collect()
        })
    }

    /// Packet rings in one fanout group, one capture thread each.
    fn start_fanout(&self) -> voltstream_core::Result<CaptureGroup> {
        let locator = self.format.locator()?;
        let n = self.threads.threads;
        let engines = packet_ring_fanout(&self.ring, &locator, &self.owners, n)?
            .into_iter()
            .map(|e| Gated {
                inner: e,
                open: self.gate.clone(),
            })
            .collect();
        CaptureGroup::start(
            engines,
            locator,
            &self.owners,
            &self.threads.cpus,
            &self.config,
        )
    }

    fn running(&self) -> PyResult<Arc<CaptureGroup>> {
        lock(&self.running)
            .clone()
            .ok_or_else(|| capture_error("the capture is not started; call start() first".into()))
    }
}

/// How the AF_XDP engine runs, and the kernel's and the XDP program's counters
/// (as of the capture thread's last read, every few milliseconds).
fn xdp_dict<'py>(py: Python<'py>, info: &XdpInfo) -> PyResult<Bound<'py, PyDict>> {
    let c = info.counts();
    let d = PyDict::new(py);
    d.set_item("interface", &info.interface)?;
    d.set_item("queue", info.queue)?;
    d.set_item("mode", info.mode)?;
    d.set_item("zero_copy", info.zero_copy)?;
    d.set_item("multi_buffer", info.multi_buffer)?;
    d.set_item("huge_pages", info.huge_pages)?;
    d.set_item("frame_size", info.frame_size)?;
    d.set_item("frames", info.frames)?;
    d.set_item("matched", c.matched)?;
    d.set_item("cut", c.cut)?;
    d.set_item("no_socket", c.no_socket)?;
    d.set_item("rx_dropped", c.rx_dropped)?;
    d.set_item("rx_ring_full", c.rx_ring_full)?;
    d.set_item("rx_fill_ring_empty_descs", c.rx_fill_ring_empty_descs)?;
    d.set_item("rx_invalid_descs", c.rx_invalid_descs)?;
    Ok(d)
}

/// The kernel's counters outside the capture, as changes since it started, each
/// group labelled with how far it reaches: context for the capture's own
/// counters, not its loss. `None` where the kernel has no such counter.
fn host_dict<'py>(
    py: Python<'py>,
    h: &HostCounters,
    interface: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let udp = PyDict::new(py);
    udp.set_item("scope", "network namespace")?;
    udp.set_item("rcvbuf_errors", h.udp_rcvbuf_errors)?;
    udp.set_item("in_errors", h.udp_in_errors)?;
    udp.set_item("in_csum_errors", h.udp_in_csum_errors)?;
    udp.set_item("no_ports", h.udp_no_ports)?;
    let softnet = PyDict::new(py);
    softnet.set_item("scope", "host")?;
    softnet.set_item("dropped", h.softnet_dropped)?;
    softnet.set_item("time_squeeze", h.softnet_time_squeeze)?;
    let d = PyDict::new(py);
    d.set_item("udp", udp)?;
    d.set_item("softnet", softnet)?;
    match interface {
        Some(name) => {
            let i = PyDict::new(py);
            i.set_item("scope", "interface")?;
            i.set_item("name", name)?;
            i.set_item("rx_dropped", h.if_rx_dropped)?;
            i.set_item("rx_missed_errors", h.if_rx_missed_errors)?;
            d.set_item("interface", i)?;
        }
        None => d.set_item("interface", py.None())?,
    }
    Ok(d)
}

/// How the chunk pool was placed.
fn memory_dict<'py>(py: Python<'py>, m: &MemoryReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bytes", m.bytes)?;
    d.set_item("huge_pages", m.huge_pages)?;
    d.set_item("locked", m.locked)?;
    d.set_item("numa_node", m.numa_node)?;
    d.set_item("warnings", m.warnings.clone())?;
    Ok(d)
}

/// How the DPDK engine runs, our frame counters and the port's `rte_eth_stats`
/// (as of the capture thread's last read, every few milliseconds).
fn dpdk_dict<'py>(py: Python<'py>, info: &DpdkInfo) -> PyResult<Bound<'py, PyDict>> {
    let c = info.counts();
    let d = PyDict::new(py);
    d.set_item("device", &info.device)?;
    d.set_item("driver", &info.driver)?;
    d.set_item("port_id", info.port_id)?;
    d.set_item("numa_node", info.numa_node)?;
    d.set_item("pool_numa_node", info.pool_numa_node)?;
    d.set_item("huge_pages", info.huge_pages)?;
    d.set_item("mbufs", info.mbufs)?;
    d.set_item("mbuf_data_room", info.mbuf_data_room)?;
    d.set_item("rx_descriptors", info.rx_descriptors)?;
    if let Some(r) = info.af_packet {
        d.set_item("framesz", r.framesz)?;
        d.set_item("blocksz", r.blocksz)?;
        d.set_item("framecnt", r.framecnt)?;
    }
    d.set_item("eal_args", info.eal_args.join(" "))?;
    d.set_item("frames", c.frames)?;
    d.set_item("other", c.other)?;
    d.set_item("cut", c.cut)?;
    d.set_item("joined", c.joined)?;
    d.set_item("ipackets", c.ipackets)?;
    d.set_item("imissed", c.imissed)?;
    d.set_item("ierrors", c.ierrors)?;
    d.set_item("rx_nombuf", c.rx_nombuf)?;
    Ok(d)
}

fn stream_dict<'py>(py: Python<'py>, s: &StreamCounters) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("received", s.received)?;
    d.set_item("missing", s.missing)?;
    d.set_item("late", s.late)?;
    d.set_item("duplicate", s.duplicate)?;
    d.set_item("dropped", s.dropped)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("invalid", s.invalid)?;
    Ok(d)
}

/// One dict per capture thread: where it runs, its streams (global indices)
/// and its own counters, which add up to the capture's.
fn threads_list<'py>(
    py: Python<'py>,
    group: Option<&GroupSnapshot>,
    config: &ThreadsConfig,
    owners: &[usize],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    let streams = voltstream_core::capture::thread_streams(owners, config.threads);
    for (t, mine) in streams.iter().enumerate() {
        let th = group.and_then(|g| g.threads.get(t));
        let empty = Snapshot {
            counters: Counters::new(mine.len()),
            ..Default::default()
        };
        let snap = th.map_or(&empty, |th| &th.snapshot);
        let c = &snap.counters;
        let d = PyDict::new(py);
        d.set_item("thread", t)?;
        d.set_item("cpu", config.cpus.get(t).copied())?;
        d.set_item("tid", th.map(|th| th.tid))?;
        d.set_item("streams", mine)?;
        let per = PyList::empty(py);
        for (k, s) in c.streams.iter().enumerate() {
            let sd = stream_dict(py, s)?;
            sd.set_item("stream", mine[k])?;
            per.append(sd)?;
        }
        d.set_item("stream_counters", per)?;
        d.set_item("totals", stream_dict(py, &c.total())?)?;
        d.set_item("packets", c.accounted())?;
        d.set_item("malformed", c.malformed)?;
        d.set_item("foreign", c.foreign)?;
        d.set_item("chunks_emitted", c.chunks_emitted)?;
        d.set_item("chunks_dropped", c.chunks_dropped)?;
        d.set_item("resyncs", c.resyncs)?;
        d.set_item("kernel_drops", snap.kernel_drops)?;
        d.set_item("station", snap.station)?;
        list.append(d)?;
    }
    Ok(list)
}

fn stats_dict<'py>(
    py: Python<'py>,
    snap: &Snapshot,
    running: bool,
    engine: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let c = &snap.counters;
    let streams = PyList::empty(py);
    for (i, s) in c.streams.iter().enumerate() {
        let d = stream_dict(py, s)?;
        d.set_item("stream", i)?;
        streams.append(d)?;
    }
    let totals = stream_dict(py, &c.total())?;
    totals.set_item("malformed", c.malformed)?;
    totals.set_item("foreign", c.foreign)?;
    let d = PyDict::new(py);
    d.set_item("engine", engine)?;
    d.set_item("running", running)?;
    d.set_item("streams", streams)?;
    d.set_item("totals", totals)?;
    d.set_item("packets", c.accounted())?;
    d.set_item("malformed", c.malformed)?;
    d.set_item("foreign", c.foreign)?;
    d.set_item("chunks_emitted", c.chunks_emitted)?;
    d.set_item("chunks_dropped", c.chunks_dropped)?;
    d.set_item("resyncs", c.resyncs)?;
    d.set_item("kernel_drops", snap.kernel_drops)?;
    d.set_item("rcvbuf", snap.rcvbuf)?;
    // VDIF: the station accepted, given or learnt from the first frame.
    d.set_item("station", snap.station)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCapture>()?;
    Ok(())
}
