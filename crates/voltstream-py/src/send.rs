//! Bindings for the paced sender: buffer in, stats dict out, GIL released
//! while sending.

use std::net::{SocketAddr, ToSocketAddrs};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::send;

use crate::errors::{py_error, to_py};

fn resolve(py: Python<'_>, what: &str, addr: &str) -> PyResult<SocketAddr> {
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
    /// gigabits per second; 0 = as fast as possible). Returns a dict with
    /// packets, bytes, seconds, rate_gbps.
    fn send<'py>(
        &mut self,
        py: Python<'py>,
        buffer: &Bound<'py, PyAny>,
        packet_len: usize,
        rate_gbps: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let buf = PyBuffer::<u8>::get(buffer)?;
        if !buf.is_c_contiguous() {
            return Err(py_error(
                py,
                "ConfigError",
                "packet buffer must be C-contiguous bytes (use numpy.ascontiguousarray)".into(),
            ));
        }
        let (ptr, len) = (buf.buf_ptr() as usize, buf.len_bytes());
        let sender = &mut self.inner;
        let stats = py
            .detach(|| {
                // SAFETY: `buf` holds the exporter's buffer (keeping it alive and
                // its address fixed) until after this closure returns; the
                // bytes are only read. Another Python thread writing the same
                // array meanwhile would send torn data, as with any
                // GIL-released NumPy reader, but cannot touch freed memory.
                let data = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
                sender.send(data, packet_len, rate_gbps * 1e9)
            })
            .map_err(to_py)?;
        drop(buf);
        let d = PyDict::new(py);
        d.set_item("packets", stats.packets)?;
        d.set_item("bytes", stats.bytes)?;
        d.set_item("seconds", stats.seconds)?;
        d.set_item("rate_gbps", stats.rate_bits_per_s / 1e9)?;
        d.set_item("gso", self.inner.gso_active())?;
        Ok(d)
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
