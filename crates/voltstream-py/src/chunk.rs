//! `_core.Chunk`: one assembled chunk handed to Python, its data exported zero-copy
//! through the buffer protocol (and its address, for a GPU copy), its presence bits,
//! and `release()` back to the capture's pool, refused while an export is alive.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use voltstream_core::assemble::ChunkLayout;
use voltstream_core::ring::Lease;

use crate::errors::capture_error;
use crate::lock::lock;

/// One assembled chunk: data `[stream][packet][payload byte]` through the buffer
/// protocol (`np.frombuffer(chunk, np.uint8)`), presence per stream x packet.
#[pyclass(module = "voltstream._core", name = "Chunk", frozen)]
pub struct PyChunk {
    lease: Mutex<Option<Lease>>,
    exports: AtomicUsize,
    layout: ChunkLayout,
    // The plain values Python reads as they are: their getters are pyo3's.
    #[pyo3(get)]
    chunk_id: u64,
    #[pyo3(get)]
    first_index: u64,
    #[pyo3(get)]
    present_count: usize,
    /// The capture thread that assembled this chunk.
    #[pyo3(get)]
    thread: usize,
    /// The capture's stream index of each of this chunk's streams (all of
    /// them, in order, with one thread).
    #[pyo3(get)]
    streams: Vec<usize>,
}

impl PyChunk {
    pub(crate) fn new(lease: Lease, thread: usize, streams: Vec<usize>) -> Self {
        PyChunk {
            thread,
            streams,
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

    /// Host address of the chunk's data (one of `Capture.chunk_buffers()`), for
    /// an asynchronous copy that must end before `release()`.
    #[getter]
    fn address(&self) -> PyResult<usize> {
        let guard = lock(&self.lease);
        let lease = guard.as_ref().ok_or_else(|| self.released())?;
        Ok(lease.data_ptr() as usize)
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
    m.add_class::<PyChunk>()?;
    Ok(())
}
