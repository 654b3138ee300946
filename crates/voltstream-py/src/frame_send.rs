//! Binding for the low-latency benchmark's frame source: paced, stamped
//! frames of P packets (format in voltstream-core `send/frames.rs`), GIL
//! released while sending.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::send;

use crate::errors::to_py;
use crate::send::resolve;

/// Sends frames of `packets_per_frame` packets ("VLAT" header, pattern
/// payload of `payload_len` bytes, a multiple of 8) to `dest` ("host:port").
#[pyclass(module = "voltstream._core")]
pub struct FrameSender {
    inner: send::FrameSender,
}

#[pymethods]
impl FrameSender {
    #[new]
    #[pyo3(signature = (dest, packets_per_frame, payload_len, bind=None))]
    fn new(
        py: Python<'_>,
        dest: &str,
        packets_per_frame: usize,
        payload_len: usize,
        bind: Option<&str>,
    ) -> PyResult<Self> {
        let dest = resolve(py, "destination", dest)?;
        let bind = bind.map(|b| resolve(py, "bind address", b)).transpose()?;
        let inner =
            send::FrameSender::new(dest, bind, packets_per_frame, payload_len).map_err(to_py)?;
        Ok(FrameSender { inner })
    }

    /// Sends frames `first_frame .. first_frame + count` at `rate_hz` frames
    /// per second (0 = as fast as possible), each stamped with
    /// CLOCK_MONOTONIC ns (`time.monotonic_ns()`) just before its first
    /// packet. `skip=(n, k)` leaves out packet k of frames whose number is a
    /// multiple of n; `reverse` sends each frame's packets last first.
    /// Returns a dict: frames, packets, bytes, seconds, late_max_ns,
    /// t_first_send_ns, t_last_send_ns.
    #[pyo3(signature = (first_frame, count, rate_hz, skip=None, reverse=false))]
    fn send_frames<'py>(
        &mut self,
        py: Python<'py>,
        first_frame: u64,
        count: u64,
        rate_hz: f64,
        skip: Option<(u64, u16)>,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let sender = &mut self.inner;
        let st = py
            .detach(|| sender.send_frames(first_frame, count, rate_hz, skip, reverse))
            .map_err(to_py)?;
        let d = PyDict::new(py);
        set_fields!(
            d,
            st,
            [
                frames,
                packets,
                bytes,
                seconds,
                late_max_ns,
                t_first_send_ns,
                t_last_send_ns
            ]
        );
        Ok(d)
    }

    #[getter]
    fn packets_per_frame(&self) -> usize {
        self.inner.packets_per_frame()
    }

    #[getter]
    fn payload_len(&self) -> usize {
        self.inner.payload_len()
    }

    /// Bytes per packet: the 32-byte header and the payload.
    #[getter]
    fn packet_len(&self) -> usize {
        self.inner.packet_len()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FrameSender>()?;
    Ok(())
}
