//! Bindings for the paced sender: buffer in, stats dict out, GIL released
//! while sending.

use std::net::{SocketAddr, ToSocketAddrs};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::send;

use crate::errors::{py_error, to_py};

pub(crate) fn resolve(py: Python<'_>, what: &str, addr: &str) -> PyResult<SocketAddr> {
    let bad = |why: String| {
        py_error(
            py,
            "ConfigError",
            format!("{what} {addr:?} is not a usable HOST:PORT ({why}); e.g. 127.0.0.1:7148"),
        )
    };
    let mut it = addr.to_socket_addrs().map_err(|e| bad(e.to_string()))?;
    it.next().ok_or_else(|| bad("no address found".into()))
}

/// A paced UDP sender to one destination ("host:port").
#[pyclass(module = "voltstream._core")]
pub struct Sender {
    inner: send::Sender,
}

#[pymethods]
impl Sender {
    #[new]
    #[pyo3(signature = (dest, bind=None))]
    fn new(py: Python<'_>, dest: &str, bind: Option<&str>) -> PyResult<Self> {
        let dest = resolve(py, "destination", dest)?;
        let bind = bind.map(|b| resolve(py, "bind address", b)).transpose()?;
        let inner = send::Sender::new(dest, bind).map_err(to_py)?;
        Ok(Sender { inner })
    }

    /// Sends a buffer of equal-length packets at `rate_gbps` (payload
    /// gigabits per second; 0 = as fast as possible). Alone, the call paces
    /// from its own start. With `at` (seconds), its first packet is due at `at`
    /// on the sender's clock, which carries across calls (`restart_clock`);
    /// with `times` (float64 seconds, one per packet) each packet is due at its
    /// own time on that clock. Returns a dict with packets, bytes, seconds,
    /// rate_gbps, gso, late_s, refused (the sender's bursts answered "port
    /// unreachable" and sent once more; a few in a row fail the send).
    #[pyo3(signature = (buffer, packet_len, rate_gbps, at=None, times=None))]
    fn send<'py>(
        &mut self,
        py: Python<'py>,
        buffer: &Bound<'py, PyAny>,
        packet_len: usize,
        rate_gbps: f64,
        at: Option<f64>,
        times: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let buf = PyBuffer::<u8>::get(buffer)?;
        let not_contiguous = |what: &str| {
            py_error(
                py,
                "ConfigError",
                format!("{what} must be C-contiguous (use numpy.ascontiguousarray)"),
            )
        };
        if !buf.is_c_contiguous() {
            return Err(not_contiguous("packet buffer"));
        }
        let times = times.map(PyBuffer::<f64>::get).transpose()?;
        if times.as_ref().is_some_and(|t| !t.is_c_contiguous()) {
            return Err(not_contiguous("send times (float64)"));
        }
        if at.is_some() && times.is_some() {
            return Err(py_error(
                py,
                "ConfigError",
                "give the send either a start time (at) or per-packet times, not both".into(),
            ));
        }
        let (ptr, len) = (buf.buf_ptr() as usize, buf.len_bytes());
        let times_at = times
            .as_ref()
            .map(|t| (t.buf_ptr() as usize, t.item_count()));
        let sender = &mut self.inner;
        let stats = py
            .detach(|| {
                // SAFETY: `buf` and `times` hold their exporters' buffers (keeping
                // them alive and their addresses fixed) until after this closure
                // returns; the bytes are only read. Another Python thread writing
                // the same array meanwhile would send torn data, as with any
                // GIL-released NumPy reader, but cannot touch freed memory.
                let data = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
                match (times_at, at) {
                    (Some((tptr, n)), _) => {
                        // SAFETY: as above; a float64 buffer of `n` items.
                        let t = unsafe { std::slice::from_raw_parts(tptr as *const f64, n) };
                        sender.send_paced(data, packet_len, send::Pace::Times(t))
                    }
                    (None, Some(at_s)) if rate_gbps != 0.0 => {
                        let pace = send::Pace::Rate {
                            bits_per_s: rate_gbps * 1e9,
                            at_s,
                        };
                        sender.send_paced(data, packet_len, pace)
                    }
                    (None, Some(_)) => sender.send_paced(data, packet_len, send::Pace::Unpaced),
                    (None, None) => sender.send(data, packet_len, rate_gbps * 1e9),
                }
            })
            .map_err(to_py)?;
        drop(buf);
        drop(times);
        let d = PyDict::new(py);
        d.set_item("packets", stats.packets)?;
        d.set_item("bytes", stats.bytes)?;
        d.set_item("seconds", stats.seconds)?;
        d.set_item("rate_gbps", stats.rate_bits_per_s / 1e9)?;
        d.set_item("gso", self.inner.gso_active())?;
        d.set_item("late_s", stats.late_s)?;
        d.set_item("refused", self.inner.refused())?;
        Ok(d)
    }

    /// Restarts the pacing clock that sends with `at` or `times` follow.
    fn restart_clock(&mut self) {
        self.inner.restart_clock();
    }

    /// Seconds since the pacing clock (re)started.
    #[getter]
    fn clock(&self) -> f64 {
        self.inner.clock_s()
    }

    /// The destination, as "host:port".
    #[getter]
    fn dest(&self) -> String {
        self.inner.dest().to_string()
    }

    /// The local address the socket is bound to, as "host:port".
    #[getter]
    fn local_addr(&self) -> PyResult<String> {
        Ok(self.inner.local_addr().map_err(to_py)?.to_string())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Sender>()?;
    Ok(())
}
