//! `_core.Capture`: a capture engine (socket, packet ring, AF_XDP or DPDK)
//! assembling packets into chunks (the chunks themselves: chunk.rs).
//!
//! `Capture(spec)` only converts: each section of `spec` becomes one part of
//! the core library's `CaptureSpec` (capture_spec.rs), which fills in the
//! defaults, validates the whole and opens the engine. Adding a format: one
//! arm in format_args.rs that builds its `FormatSpec`.
//!
//! Chunks are exported zero-copy through the buffer protocol. A chunk returns to
//! the pool on `release()` or when it is garbage collected; `release()` is refused
//! while an export (a NumPy array, a memoryview) is alive, so no Python object
//! can ever see a buffer the capture thread is refilling.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::capture::{CaptureGroup, CaptureSpec, DpdkInfo, XdpInfo};
use voltstream_core::stats::{Counters, Snapshot};

use crate::capture_spec::{capture_spec, settings_dict};
use crate::chunk::PyChunk;
use crate::errors::{capture_error, config_error, to_py};
use crate::lock::lock;
use crate::report::{dpdk_dict, host_dict, memory_dict, stats_dict, threads_list, xdp_dict};

/// Longest uninterrupted wait in `next_chunk` before checking for Ctrl-C.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// A UDP capture assembling packets into chunks; `engine` picks the backend.
#[pyclass(module = "voltstream._core", name = "Capture", frozen)]
pub struct PyCapture {
    /// Everything about the capture, validated by the core library.
    spec: CaptureSpec,
    /// The global streams of each thread's chunks, and the chunk stride
    /// (`CaptureSpec::placement`).
    streams: Vec<Vec<usize>>,
    chunk_stride: usize,
    /// The AF_XDP engine's settings and counters, once it runs.
    xdp_info: Mutex<Option<Arc<XdpInfo>>>,
    /// The DPDK engine's settings and counters, once it runs.
    dpdk_info: Mutex<Option<Arc<DpdkInfo>>>,
    gate: Arc<AtomicBool>,
    running: Mutex<Option<Arc<CaptureGroup>>>,
    /// Thread `next_chunk(thread=None)` looks at first (round robin).
    next_thread: AtomicUsize,
}

#[pymethods]
impl PyCapture {
    /// A capture of `spec`, one dict of sections (capture_spec.rs); the core
    /// fills in what it leaves out and validates the whole. Nothing opens yet.
    #[new]
    #[pyo3(signature = (spec, /))]
    fn new(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        let spec = capture_spec(spec)?;
        let (streams, chunk_stride) = spec.placement().map_err(to_py)?;
        Ok(PyCapture {
            spec,
            streams,
            chunk_stride,
            xdp_info: Mutex::new(None),
            dpdk_info: Mutex::new(None),
            gate: Arc::new(AtomicBool::new(true)),
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
        let started = py.detach(|| self.spec.start(&self.gate)).map_err(to_py)?;
        *lock(&self.xdp_info) = started.xdp;
        *lock(&self.dpdk_info) = started.dpdk;
        *running = Some(Arc::new(started.group));
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
                counters: Counters::new(self.spec.format.streams()),
                ..Default::default()
            },
            |g| g.total.clone(),
        );
        // Before start: the engine asked for ("auto" until one is chosen).
        let candidates = self.spec.engines();
        let engine = match (&cap, candidates.as_deref()) {
            (Some(c), _) => c.threads()[0].engine_name(),
            (None, Ok([one])) => one.name(),
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
            threads_list(py, group.as_ref(), &self.spec.threads, &self.streams)?,
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
        self.spec.streams()
    }

    /// Every thread's bound address as "host:port" once started (with several
    /// listen addresses, one per address, in stream order).
    #[getter]
    fn addresses(&self) -> Vec<String> {
        lock(&self.running).as_ref().map_or_else(Vec::new, |c| {
            c.threads()
                .iter()
                .filter_map(|t| t.local_addr())
                .map(|a| a.to_string())
                .collect()
        })
    }

    /// Number of capture threads.
    #[getter]
    fn threads(&self) -> usize {
        self.spec.threads.threads
    }

    /// For each capture thread, the (global) stream indices its chunks hold.
    #[getter]
    pub(crate) fn thread_streams(&self) -> Vec<Vec<usize>> {
        self.streams.clone()
    }

    /// Capture threads own chunk ids modulo this: chunk `c` comes from thread
    /// `c % chunk_stride` alone, holding every stream (1: threads own streams).
    #[getter]
    fn chunk_stride(&self) -> usize {
        self.chunk_stride
    }

    #[getter]
    fn payload_len(&self) -> usize {
        self.spec.format.payload_len()
    }

    /// Bytes of each packet's slot in a chunk: `packet_len` with
    /// `whole_packets=True`, else `payload_len`.
    #[getter]
    fn slot_len(&self) -> usize {
        self.spec.slot_len()
    }

    #[getter]
    pub(crate) fn whole_packets(&self) -> bool {
        self.spec.chunks.whole_packets
    }

    #[getter]
    fn packet_len(&self) -> usize {
        self.spec.format.packet_len()
    }

    #[getter]
    fn packets_per_chunk(&self) -> usize {
        self.spec.chunks.assembler.packets_per_chunk
    }

    /// Every section of the spec but the format, as the capture runs with it
    /// (what the spec left out filled in with the core's defaults).
    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        settings_dict(py, &self.spec)
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
    /// The multicast groups the capture joins (a group bind host included).
    fn groups(&self) -> Vec<String> {
        let groups = self.spec.network.groups().unwrap_or_default();
        groups.iter().map(|g| g.to_string()).collect()
    }

    /// The running capture threads, for the recorder.
    pub(crate) fn running_group(&self) -> PyResult<Arc<CaptureGroup>> {
        self.running()
    }

    fn running(&self) -> PyResult<Arc<CaptureGroup>> {
        lock(&self.running)
            .clone()
            .ok_or_else(|| capture_error("the capture is not started; call start() first".into()))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCapture>()?;
    Ok(())
}
