//! `_core.Capture`'s one argument, section for section the core's
//! [`CaptureSpec`]:
//!
//! ```text
//! {"format":  {"name": "counter", "payload_len": 1024, ...},   # format_args.rs
//!  "network": {"bind": "127.0.0.1:0", "interface", "multicast", "queue_bytes",
//!              "more_binds"},
//!  "engine":  {"kind", "batch", "ring_block_size", "xdp_queue", "xdp_mode",
//!              "dpdk_port", "dpdk_eal_args"},
//!  "chunks":  {"packets_per_chunk", "nchunks", "window", "resync_chunks",
//!              "whole_packets", "flush_age_s"},
//!  "threads": {"count", "cpus", "stream_threads", "spread"}}
//! ```
//!
//! Only `format.name` (with its format's own keys) and `network.bind` are
//! needed; whatever else is absent keeps [`CaptureSpec::new`]'s default, the
//! one place a capture's defaults live (`capture_defaults()` shows them to
//! Python, whose settings read them). The core validates the whole.

use std::net::IpAddr;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use voltstream_core::capture::{CaptureSpec, DpdkPort, EngineChoice, Spread, XdpMode};
use voltstream_core::wire::FormatSpec;

use crate::errors::{config_error, to_py};
use crate::format_args::{format_spec, FormatArgs};
use crate::sections::{need, section, set, spec_dict, Section};

const WHAT: &str = "capture spec";

section! {
    /// Where the packets come from, and how much kernel memory may queue them.
    struct NetworkArgs("network") {
        bind: String,
        interface: String,
        multicast: Vec<String>,
        queue_bytes: usize,
        more_binds: Vec<String>,
    }
}

section! {
    /// Which engine reads the packets, and the options only one engine reads.
    struct EngineArgs("engine") {
        kind: String,
        batch: usize,
        ring_block_size: usize,
        xdp_queue: u32,
        xdp_mode: String,
        dpdk_port: String,
        dpdk_eal_args: Vec<String>,
    }
}

section! {
    /// How packets are assembled into chunks.
    struct ChunkArgs("chunks") {
        packets_per_chunk: usize,
        nchunks: usize,
        window: usize,
        resync_chunks: u64,
        whole_packets: bool,
        flush_age_s: f64,
    }
}

section! {
    /// How the capture is spread over threads.
    struct ThreadArgs("threads") {
        count: usize,
        cpus: Vec<usize>,
        stream_threads: Vec<usize>,
        spread: String,
    }
}

/// The [`CaptureSpec`] a Python spec describes (not yet validated).
pub(crate) fn capture_spec(spec: &Bound<'_, PyAny>) -> PyResult<CaptureSpec> {
    let sections = [
        FormatArgs::NAME,
        NetworkArgs::NAME,
        EngineArgs::NAME,
        ChunkArgs::NAME,
        ThreadArgs::NAME,
    ];
    let d = spec_dict(spec, WHAT, &sections)?;
    let format = format_spec(section::<FormatArgs>(&d, WHAT)?)?;
    let net: NetworkArgs = section(&d, WHAT)?;
    let mut spec = CaptureSpec::new(format, need(net.bind, WHAT, "network.bind")?);
    set(&mut spec.network.interface, net.interface.map(Some));
    if let Some(groups) = net.multicast {
        spec.network.multicast = groups.iter().map(|g| group(g)).collect::<PyResult<_>>()?;
    }
    set(&mut spec.network.queue_bytes, net.queue_bytes);
    set(&mut spec.network.more_binds, net.more_binds);

    let engine: EngineArgs = section(&d, WHAT)?;
    if let Some(kind) = engine.kind {
        spec.engine = EngineChoice::parse(&kind).map_err(to_py)?;
    }
    let o = &mut spec.options;
    set(&mut o.batch, engine.batch);
    set(&mut o.ring_block_size, engine.ring_block_size);
    set(&mut o.xdp_queue, engine.xdp_queue);
    if let Some(mode) = engine.xdp_mode {
        o.xdp_mode = XdpMode::parse(&mode).map_err(to_py)?;
    }
    if let Some(port) = engine.dpdk_port {
        o.dpdk_port = Some(DpdkPort::parse(&port).map_err(to_py)?);
    }
    set(&mut o.dpdk_eal_args, engine.dpdk_eal_args);

    let chunks: ChunkArgs = section(&d, WHAT)?;
    let c = &mut spec.chunks;
    set(&mut c.assembler.packets_per_chunk, chunks.packets_per_chunk);
    set(&mut c.nchunks, chunks.nchunks);
    set(&mut c.assembler.window, chunks.window);
    set(&mut c.assembler.resync_chunks, chunks.resync_chunks);
    set(&mut c.whole_packets, chunks.whole_packets);
    if let Some(s) = chunks.flush_age_s {
        c.assembler.flush_age = Some(flush_age(s)?);
    }

    let threads: ThreadArgs = section(&d, WHAT)?;
    set(&mut spec.threads.threads, threads.count);
    set(&mut spec.threads.cpus, threads.cpus);
    set(&mut spec.threads.owners, threads.stream_threads);
    if let Some(spread) = threads.spread {
        spec.threads.spread = Spread::parse(&spread).map_err(to_py)?;
    }
    Ok(spec)
}

/// Seconds as a flush age: positive and finite (the core refuses zero).
fn flush_age(s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            config_error(format!(
                "chunks.flush_age_s must be a positive number of seconds, got {s}"
            ))
        })
}

fn group(g: &str) -> PyResult<IpAddr> {
    g.trim()
        .parse()
        .map_err(|_| config_error(format!("multicast group {g:?} is not an IP address")))
}

/// Every section of `spec` but the format, as `Capture()` takes them: what a
/// capture runs with, the core's defaults filled in.
pub(crate) fn settings_dict<'py>(
    py: Python<'py>,
    spec: &CaptureSpec,
) -> PyResult<Bound<'py, PyDict>> {
    let net = &spec.network;
    let network = PyDict::new(py);
    network.set_item("bind", &net.bind)?;
    network.set_item("interface", &net.interface)?;
    let groups: Vec<String> = net.multicast.iter().map(|g| g.to_string()).collect();
    network.set_item("multicast", groups)?;
    network.set_item("queue_bytes", net.queue_bytes)?;
    network.set_item("more_binds", &net.more_binds)?;

    let (o, engine) = (&spec.options, PyDict::new(py));
    engine.set_item("kind", spec.engine.name())?;
    set_fields!(engine, o, [batch, ring_block_size, xdp_queue]);
    engine.set_item("xdp_mode", o.xdp_mode.name())?;
    let port = o.dpdk_port.as_ref().map(|p| match p {
        DpdkPort::AfPacket { interface } => interface.clone(),
        DpdkPort::Device(device) => device.clone(),
    });
    engine.set_item("dpdk_port", port)?;
    engine.set_item("dpdk_eal_args", &o.dpdk_eal_args)?;

    let (c, chunks) = (&spec.chunks, PyDict::new(py));
    let a = &c.assembler;
    set_fields!(chunks, a, [packets_per_chunk, window, resync_chunks]);
    set_fields!(chunks, c, [nchunks, whole_packets]);
    chunks.set_item("flush_age_s", a.flush_age.map(|d| d.as_secs_f64()))?;

    let (t, threads) = (&spec.threads, PyDict::new(py));
    threads.set_item("count", t.threads)?;
    threads.set_item("cpus", &t.cpus)?;
    threads.set_item("stream_threads", &t.owners)?;
    threads.set_item("spread", t.spread.name())?;

    let d = PyDict::new(py);
    d.set_item("network", network)?;
    d.set_item("engine", engine)?;
    d.set_item("chunks", chunks)?;
    d.set_item("threads", threads)?;
    Ok(d)
}

/// The defaults of every section but the format (and of the network but its
/// bind address, which has none): [`CaptureSpec::new`]'s, the one source.
#[pyfunction]
fn capture_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    // Any format will do: no default depends on it, and it is not reported.
    let spec = CaptureSpec::new(FormatSpec::Ynao { subband: None }, "");
    let d = settings_dict(py, &spec)?;
    d.get_item("network")?
        .expect("set above")
        .del_item("bind")?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(capture_defaults, m)?)?;
    Ok(())
}
