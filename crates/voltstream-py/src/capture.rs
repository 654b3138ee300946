//! `_core.Capture` and `_core.Chunk`: the socket capture engine and its chunks.
//!
//! Chunks are exported zero-copy through the buffer protocol. A chunk returns to
//! the pool on `release()` or when it is garbage collected; `release()` is refused
//! while an export (a NumPy array, a memoryview) is alive, so no Python object
//! can ever see a buffer the capture thread is refilling.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use voltstream_core::assemble::{AssemblerConfig, ChunkLayout};
use voltstream_core::capture::{
    Capture, CaptureConfig, Counter, SocketConfig, SocketEngine, COUNTER_HEADER_LEN,
};
use voltstream_core::ring::Lease;
use voltstream_core::stats::{Counters, Snapshot, StreamCounters};
use voltstream_core::wire::FormatSpec;

use crate::errors::{py_error, to_py};

/// Slack above the expected packet length, so over-long packets arrive flagged
/// as truncated rather than silently fitting.
const PACKET_MARGIN: usize = 64;
/// Longest uninterrupted wait in `next_chunk` before checking for Ctrl-C.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn config_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "ConfigError", msg))
}

fn capture_error(msg: String) -> PyErr {
    Python::attach(|py| py_error(py, "CaptureError", msg))
}

enum Format {
    Wire(FormatSpec),
    Counter(Counter),
}

impl Format {
    fn streams(&self) -> usize {
        match self {
            Format::Wire(f) => f.streams(),
            Format::Counter(c) => c.streams,
        }
    }

    fn payload_len(&self) -> usize {
        match self {
            Format::Wire(f) => f.payload_len(),
            Format::Counter(c) => c.payload_len,
        }
    }

    fn packet_len(&self) -> usize {
        match self {
            Format::Wire(f) => f.packet_len(),
            Format::Counter(c) => c.payload_len + COUNTER_HEADER_LEN,
        }
    }
}

/// A UDP capture (socket engine) assembling packets into chunks.
#[pyclass(module = "voltstream._core", name = "Capture", frozen)]
pub struct PyCapture {
    format: Format,
    config: CaptureConfig,
    socket: SocketConfig,
    running: Mutex<Option<Arc<Capture>>>,
}

#[pymethods]
impl PyCapture {
    #[new]
    #[pyo3(signature = (
        format, bind, packets_per_chunk, nchunks = 8, window = 2, vdif_threads = None,
        vdif_frame_len = None, frames_per_second = None, subband = None, rcvbuf = 64 << 20,
        station = None, resync_chunks = 64, streams = 1, payload_len = None, batch = 64
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
    ) -> PyResult<Self> {
        let format = match format {
            "ynao" => Format::Wire(FormatSpec::Ynao { subband }),
            "vdif" => {
                let missing = |what: &str| {
                    config_error(format!("format 'vdif' needs {what}; pass it to Capture()"))
                };
                Format::Wire(FormatSpec::Vdif {
                    threads: vdif_threads.ok_or_else(|| missing("vdif_threads (e.g. [0])"))?,
                    frame_len: vdif_frame_len
                        .ok_or_else(|| missing("vdif_frame_len (bytes, header included)"))?,
                    frames_per_second: frames_per_second
                        .ok_or_else(|| missing("frames_per_second"))?,
                    station,
                })
            }
            "counter" => {
                let payload_len = payload_len.ok_or_else(|| {
                    config_error("format 'counter' needs payload_len (bytes per packet)".into())
                })?;
                if streams == 0 || streams > u16::MAX as usize + 1 {
                    return Err(config_error(format!(
                        "format 'counter' needs 1..=65536 streams, got {streams}"
                    )));
                }
                Format::Counter(Counter {
                    streams,
                    payload_len,
                })
            }
            other => {
                return Err(config_error(format!(
                    "unknown capture format '{other}'; use 'vdif', 'ynao' or 'counter'"
                )))
            }
        };
        if let Format::Wire(spec) = &format {
            spec.validate().map_err(to_py)?;
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
        let mut socket = SocketConfig::new(bind);
        socket.rcvbuf = rcvbuf;
        socket.batch = batch;
        socket.max_packet = (format.packet_len() + PACKET_MARGIN).min(65_536);
        Ok(PyCapture {
            format,
            config: CaptureConfig { assembler, nchunks },
            socket,
            running: Mutex::new(None),
        })
    }

    /// Binds the socket, allocates the chunk pool and starts the capture thread.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let mut running = lock(&self.running);
        if running.is_some() {
            return Err(capture_error(
                "this Capture was already started; create a new Capture to capture again".into(),
            ));
        }
        let cap = py
            .detach(|| {
                let engine = SocketEngine::bind(&self.socket)?;
                match &self.format {
                    Format::Wire(spec) => Capture::start(engine, spec.locator()?, &self.config),
                    Format::Counter(c) => Capture::start(engine, *c, &self.config),
                }
            })
            .map_err(to_py)?;
        *running = Some(Arc::new(cap));
        Ok(())
    }

    /// Waits up to `timeout_s` seconds for the next chunk; None on timeout, or
    /// once the capture has stopped and every chunk was delivered.
    fn next_chunk(&self, py: Python<'_>, timeout_s: f64) -> PyResult<Option<PyChunk>> {
        if !(timeout_s >= 0.0 && timeout_s.is_finite()) {
            return Err(config_error(format!(
                "timeout_s must be a finite number of seconds >= 0, got {timeout_s}"
            )));
        }
        let cap = self.running()?;
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s.min(1e9));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let slice = left.min(SIGNAL_SLICE);
            if let Some(lease) = py.detach(|| cap.next_chunk(slice)) {
                return Ok(Some(PyChunk::new(lease)));
            }
            py.check_signals()?;
            let finished = !cap.is_running() && cap.consumer().is_finished();
            if left <= slice || finished {
                return Ok(None);
            }
        }
    }

    /// Stops the capture: drains what the kernel queued, flushes open chunks.
    /// Chunks already assembled stay available from next_chunk. Idempotent.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let cap = lock(&self.running).clone();
        match cap {
            Some(cap) => py.detach(|| cap.stop()).map_err(to_py),
            None => Ok(()),
        }
    }

    /// Counters: per-stream list, totals, capture-wide counters, kernel drops.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let cap = lock(&self.running).clone();
        let (snap, running) = match &cap {
            Some(c) => (c.stats(), c.is_running()),
            None => (
                Snapshot {
                    counters: Counters::new(self.format.streams()),
                    ..Default::default()
                },
                false,
            ),
        };
        stats_dict(py, &snap, running)
    }

    /// The bound address as "host:port" once started (useful with port 0).
    #[getter]
    fn address(&self) -> Option<String> {
        lock(&self.running)
            .as_ref()
            .and_then(|c| c.local_addr())
            .map(|a| a.to_string())
    }

    #[getter]
    fn nstreams(&self) -> usize {
        self.format.streams()
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
            slf.get().start(slf.py())?;
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
    fn running(&self) -> PyResult<Arc<Capture>> {
        lock(&self.running)
            .clone()
            .ok_or_else(|| capture_error("the capture is not started; call start() first".into()))
    }
}

fn stream_dict<'py>(py: Python<'py>, s: &StreamCounters) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("received", s.received)?;
    d.set_item("missing", s.missing)?;
    d.set_item("late", s.late)?;
    d.set_item("duplicate", s.duplicate)?;
    d.set_item("dropped", s.dropped)?;
    d.set_item("bytes", s.bytes)?;
    Ok(d)
}

fn stats_dict<'py>(
    py: Python<'py>,
    snap: &Snapshot,
    running: bool,
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
    d.set_item("engine", "socket")?;
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
    Ok(d)
}

/// One assembled chunk: data `[stream][packet][payload byte]` through the buffer
/// protocol (`np.frombuffer(chunk, np.uint8)`), presence per stream x packet.
#[pyclass(module = "voltstream._core", name = "Chunk", frozen)]
pub struct PyChunk {
    lease: Mutex<Option<Lease>>,
    exports: AtomicUsize,
    layout: ChunkLayout,
    chunk_id: u64,
    first_index: u64,
    present_count: usize,
}

impl PyChunk {
    fn new(lease: Lease) -> Self {
        PyChunk {
            layout: lease.layout(),
            chunk_id: lease.chunk_id(),
            first_index: lease.first_index(),
            present_count: lease.present_count(),
            exports: AtomicUsize::new(0),
            lease: Mutex::new(Some(lease)),
        }
    }

    fn released(&self) -> PyErr {
        capture_error(format!(
            "chunk {} was released back to the capture pool; copy what you need before \
             release()",
            self.chunk_id
        ))
    }
}

#[pymethods]
impl PyChunk {
    #[getter]
    fn chunk_id(&self) -> u64 {
        self.chunk_id
    }

    #[getter]
    fn first_index(&self) -> u64 {
        self.first_index
    }

    #[getter]
    fn nstreams(&self) -> usize {
        self.layout.streams
    }

    #[getter]
    fn packets_per_chunk(&self) -> usize {
        self.layout.packets_per_chunk
    }

    #[getter]
    fn payload_len(&self) -> usize {
        self.layout.payload_len
    }

    #[getter]
    fn present_count(&self) -> usize {
        self.present_count
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.layout.bytes()
    }

    /// One byte (0 or 1) per stream x packet, stream-major.
    #[getter]
    fn present<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let guard = lock(&self.lease);
        let lease = guard.as_ref().ok_or_else(|| self.released())?;
        let words = lease.present_words();
        let bits: Vec<u8> = (0..self.layout.packets())
            .map(|i| ((words[i / 64] >> (i % 64)) & 1) as u8)
            .collect();
        Ok(PyBytes::new(py, &bits))
    }

    #[getter(released)]
    fn is_released(&self) -> bool {
        lock(&self.lease).is_none()
    }

    /// Returns the chunk to the pool. Refused while a buffer export is alive.
    fn release(&self) -> PyResult<()> {
        let mut guard = lock(&self.lease);
        if self.exports.load(Ordering::Acquire) > 0 {
            return Err(capture_error(format!(
                "chunk {} is still exported to a NumPy array or memoryview; delete those \
                 (or copy the data) before release()",
                self.chunk_id
            )));
        }
        drop(guard.take());
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Chunk(chunk_id={}, streams={}, packets_per_chunk={}, payload_len={}, present={})",
            self.chunk_id,
            self.layout.streams,
            self.layout.packets_per_chunk,
            self.layout.payload_len,
            self.present_count
        )
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let guard = lock(&this.lease);
        let Some(lease) = guard.as_ref() else {
            return Err(this.released());
        };
        let len = lease.data().len() as ffi::Py_ssize_t;
        let ptr = lease.data_ptr() as *mut std::ffi::c_void;
        // SAFETY: `view` is the caller's Py_buffer; `ptr` stays valid for `len`
        // bytes while the lease lives, and the lease cannot be released while
        // `exports` > 0 (checked under the same lock in `release`). FillInfo takes
        // a new reference to `slf`, keeping the chunk alive for the export.
        let r = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr, len, 0, flags) };
        if r != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCapture>()?;
    m.add_class::<PyChunk>()?;
    Ok(())
}
