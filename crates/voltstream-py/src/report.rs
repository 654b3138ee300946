//! The capture's report as Python dicts: counters per stream, per thread and in
//! total, the host's own counters, the chunk pool's placement, and the AF_XDP and
//! DPDK engines' settings and counters. Only conversion: every value is computed
//! in voltstream-core.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use voltstream_core::capture::{DpdkInfo, GroupSnapshot, ThreadsConfig, XdpInfo};
use voltstream_core::host_counters::HostCounters;
use voltstream_core::memory::MemoryReport;
use voltstream_core::stats::{Counters, Snapshot, StreamCounters};

/// How the AF_XDP engine runs, and the kernel's and the XDP program's counters
/// (as of the capture thread's last read, every few milliseconds).
pub(crate) fn xdp_dict<'py>(py: Python<'py>, info: &XdpInfo) -> PyResult<Bound<'py, PyDict>> {
    let c = info.counts();
    let d = PyDict::new(py);
    set_fields!(
        d,
        info,
        [interface, queue, mode, zero_copy, multi_buffer, huge_pages]
    );
    set_fields!(d, info, [frame_size, frames]);
    set_fields!(d, c, [matched, cut, no_socket, rx_dropped, rx_ring_full]);
    set_fields!(d, c, [rx_fill_ring_empty_descs, rx_invalid_descs]);
    Ok(d)
}

/// The kernel's counters outside the capture, as changes since it started, each
/// group labelled with how far it reaches: context for the capture's own
/// counters, not its loss. `None` where the kernel has no such counter.
pub(crate) fn host_dict<'py>(
    py: Python<'py>,
    h: &HostCounters,
    interface: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let udp = PyDict::new(py);
    udp.set_item("scope", "network namespace")?;
    udp.set_item("rcvbuf_errors", h.udp.rcvbuf_errors)?;
    udp.set_item("in_errors", h.udp.in_errors)?;
    udp.set_item("in_csum_errors", h.udp.in_csum_errors)?;
    udp.set_item("no_ports", h.udp.no_ports)?;
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
pub(crate) fn memory_dict<'py>(py: Python<'py>, m: &MemoryReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    set_fields!(d, m, [bytes, huge_pages, locked, numa_node, warnings]);
    Ok(d)
}

/// How the DPDK engine runs, our frame counters and the port's `rte_eth_stats`
/// (as of the capture thread's last read, every few milliseconds).
pub(crate) fn dpdk_dict<'py>(py: Python<'py>, info: &DpdkInfo) -> PyResult<Bound<'py, PyDict>> {
    let c = info.counts();
    let d = PyDict::new(py);
    set_fields!(
        d,
        info,
        [
            device,
            driver,
            port_id,
            numa_node,
            pool_numa_node,
            huge_pages
        ]
    );
    set_fields!(d, info, [mbufs, mbuf_data_room, rx_descriptors]);
    if let Some(r) = info.af_packet {
        set_fields!(d, r, [framesz, blocksz, framecnt]);
    }
    d.set_item("eal_args", info.eal_args.join(" "))?;
    set_fields!(
        d,
        c,
        [frames, other, cut, joined, ipackets, imissed, ierrors, rx_nombuf]
    );
    Ok(d)
}

pub(crate) fn stream_dict<'py>(
    py: Python<'py>,
    s: &StreamCounters,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    set_fields!(
        d,
        s,
        [received, missing, late, duplicate, dropped, bytes, invalid]
    );
    Ok(d)
}

/// One dict per capture thread: where it runs, its streams (global indices)
/// and its own counters, which add up to the capture's.
pub(crate) fn threads_list<'py>(
    py: Python<'py>,
    group: Option<&GroupSnapshot>,
    config: &ThreadsConfig,
    streams: &[Vec<usize>],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
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
        capture_counters(&d, snap)?;
        list.append(d)?;
    }
    Ok(list)
}

pub(crate) fn stats_dict<'py>(
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
    set_fields!(totals, c, [malformed, foreign]);
    let d = PyDict::new(py);
    d.set_item("engine", engine)?;
    d.set_item("running", running)?;
    d.set_item("streams", streams)?;
    d.set_item("totals", totals)?;
    capture_counters(&d, snap)?;
    d.set_item("rcvbuf", snap.rcvbuf)?;
    Ok(d)
}

/// The counters a whole capture and each of its threads report alike.
fn capture_counters(d: &Bound<'_, PyDict>, snap: &Snapshot) -> PyResult<()> {
    let c = &snap.counters;
    d.set_item("packets", c.accounted())?;
    set_fields!(
        d,
        c,
        [malformed, foreign, chunks_emitted, chunks_dropped, resyncs]
    );
    // VDIF: the station accepted, given or learnt from the first frame.
    set_fields!(d, snap, [kernel_drops, station]);
    Ok(())
}
