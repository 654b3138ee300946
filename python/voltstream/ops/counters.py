"""The counters table: every number of a verb's report as a named, typed, labelled
sample, the one conversion that the Prometheus collector, `voltstream status` and
the docs' metric list all use (so they cannot disagree with each other or with the
report).

A snapshot is the dict a verb prints as its report at the end (``--report``),
taken while it runs: the capture report (`CaptureReport.as_dict()`, the capture's
`stats()` under "engine"; also fold --listen), the recorder's ``{"capture": stats,
"record": ...}``, the F-engine's report, the replay report. Each section is found
by its keys, so a verb whose report grows a section gets its metrics without a
change here. An F-engine of several antennas reports ``{"antennas": [report, ...]}``:
each antenna's samples carry an ``antenna`` label. A value that is absent or None
gives no sample (never a made-up 0).

Names follow the Prometheus conventions: ``voltstream_`` prefix, ``_total`` on
counters, base units (bytes, seconds; the reports' ``_ms`` and per cent values are
converted), one metric per quantity with the breakdown (stream, thread, kind) as
labels.

Over 500 lines: one table of every report section's metrics, kept in one module so
that the collector, `voltstream status` and the docs read the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One metric value: ``kind`` is counter, gauge, info (an info's labels are its
    value, the value is 1) or histogram (the value is the sum; ``buckets``: (upper
    bound, cumulative count) pairs; ``count``: all observations)."""

    name: str
    kind: str
    help: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)
    buckets: tuple[tuple[float, int], ...] = ()
    count: int = 0


#: Packet counters per stream (and per thread), by kind: what each kind means.
STREAM_KINDS = {
    "received": "placed in a chunk",
    "missing": "never arrived by the time its chunk left the reorder window",
    "late": "arrived after its chunk had left",
    "duplicate": "arrived twice",
    "invalid": "flagged invalid by its own header",
    "dropped": "lost with a whole chunk dropped because no pool chunk was free",
}
#: Capture-wide only: packets no stream owns.
CAPTURE_KINDS = {
    "malformed": "could not be parsed as the format",
    "foreign": "a valid packet of another stream (station, thread, id)",
}
#: The kinds that mean data was lost: `voltstream status` shows them red when they rise.
LOSS_KINDS = ("missing", "late", "dropped", "invalid", "malformed")

# (key in the capture's stats(), metric, help): capture-wide, and per thread too.
_ENGINE_COUNTERS = (
    ("packets", "datagrams_total", "UDP datagrams the capture engine took in, of every kind"),
    ("kernel_drops", "kernel_drops_total",
     "packets the kernel dropped before the capture saw them (ring or socket buffer full)"),
    ("resyncs", "resyncs_total", "times the assembler restarted its time line on a jump"),
)  # fmt: skip
_HOST = (
    ("udp", "voltstream_host_udp_errors_total",
     "the kernel's UDP error counters during the run, whole network namespace (/proc/net/snmp)",
     ("rcvbuf_errors", "in_errors", "in_csum_errors", "no_ports")),
    ("softnet", "voltstream_host_softnet_total",
     "receive softirq drops and budget squeezes during the run, whole host (softnet_stat)",
     ("dropped", "time_squeeze")),
    ("interface", "voltstream_host_interface_rx_total",
     "the interface's receive drops during the run, every flow on it (/sys/class/net)",
     ("rx_dropped", "rx_missed_errors")),
)  # fmt: skip

#: The AF_XDP and DPDK engines' own counters (stats()["xdp"], ["dpdk"]), by kind.
_ENGINE_OWN = (
    ("xdp", ("matched", "cut", "no_socket", "rx_dropped", "rx_ring_full",
             "rx_fill_ring_empty_descs", "rx_invalid_descs"),
     "AF_XDP engine: the XDP program's counts (matched, cut, no_socket) and the "
     "kernel's AF_XDP socket drops (rx_dropped, rx_ring_full, rx_fill_ring_empty_descs, "
     "rx_invalid_descs)"),
    ("dpdk", ("frames", "other", "cut", "joined", "ipackets", "imissed", "ierrors",
              "rx_nombuf"),
     "DPDK engine: frames taken and sorted (frames, other, cut, joined) and the port's "
     "counters (ipackets, imissed: dropped by the NIC, ierrors, rx_nombuf)"),
)  # fmt: skip


def samples(snapshot: dict[str, Any]) -> list[Sample]:
    """Every sample of a snapshot (see the module's docstring for the shapes)."""
    out: list[Sample] = []
    # Several F-engine antennas in one process (fengine/antennas.py): each one's
    # samples, labelled by its index.
    for k, antenna in enumerate(snapshot.get("antennas") or []):
        if isinstance(antenna, dict):
            out += [replace(s, labels=s.labels | {"antenna": str(k)}) for s in samples(antenna)]
    if isinstance(snapshot.get("engine"), dict) and "streams" in snapshot["engine"]:
        out += _capture(snapshot["engine"], snapshot)  # capture / fold report
        out += _capture_report(snapshot)
    elif isinstance(snapshot.get("capture"), dict):
        out += _capture(snapshot["capture"], snapshot)  # record / fengine
    if isinstance(snapshot.get("pipeline"), dict):
        out += _gpu_stage(snapshot["pipeline"])
    if isinstance(snapshot.get("dumps"), dict):
        out += _dumps(snapshot["dumps"])
    if isinstance(snapshot.get("search"), dict):
        out += _search(snapshot["search"])
    if isinstance(snapshot.get("record"), dict):
        out += _record(snapshot["record"])
    if "heaps_paired" in snapshot:
        out += _fengine(snapshot)
    if "dest" in snapshot and "packets" in snapshot:
        out += _replay(snapshot)
    if isinstance(snapshot.get("cluster"), dict):
        out += _cluster(snapshot["cluster"])
    if isinstance(snapshot.get("latency"), dict):
        out += _flat(snapshot["latency"], "voltstream_latency_",
                     "latency mode (docs/latency.md): ")  # fmt: skip
    for stage, h in (snapshot.get("stage_seconds") or {}).items():
        out.append(Sample("voltstream_stage_seconds", "histogram",
                          "seconds per item of a stage (consumer: the consumer's Python per "
                          "chunk, from the capture loop)", h["sum"], {"stage": stage},
                          tuple((le, n) for le, n in h["le"]), h["count"]))  # fmt: skip
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_samples(run: dict[str, Any]) -> Iterator[Sample]:
    """The run itself, from `RunStatus.status()`: start, age, end, configuration."""
    if _num(run.get("start_time")):
        yield Sample("voltstream_run_start_time_seconds", "gauge",
                     "when the run started, Unix time", run["start_time"])  # fmt: skip
    if _num(run.get("seconds")):
        yield Sample("voltstream_run_seconds", "gauge", "how long the run has run", run["seconds"])
    if "finished" in run:
        yield Sample("voltstream_run_finished", "gauge",
                     "1 once the run ended (the numbers are its final report)",
                     float(bool(run["finished"])))  # fmt: skip
    if isinstance(run.get("config"), dict):
        labels = {"verb": str(run.get("verb", ""))}
        labels |= {k: _text(v) for k, v in run["config"].items() if v is not None}
        yield Sample("voltstream_run", "info", "the run's verb and configuration", 1.0, labels)


def _text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def _capture(st: dict[str, Any], snap: dict[str, Any]) -> list[Sample]:
    """The capture engine's stats(): per stream, per thread, capture-wide, the kernel's."""
    out: list[Sample] = []
    labels: list[Any] = snap["streams"] if isinstance(snap.get("streams"), list) else []
    for i, s in enumerate(st.get("streams", [])):
        lab = {"stream": str(s.get("stream", i))}
        if i < len(labels) and isinstance(labels[i], dict) and labels[i].get("label"):
            lab["label"] = str(labels[i]["label"])
        for kind in STREAM_KINDS:
            if _num(s.get(kind)):
                out.append(Sample("voltstream_stream_packets_total", "counter",
                                  "packets of one stream, by kind: " + _kinds(STREAM_KINDS),
                                  s[kind], lab | {"kind": kind}))  # fmt: skip
        if _num(s.get("bytes")):
            out.append(Sample("voltstream_stream_bytes_total", "counter",
                              "payload bytes placed, per stream", s["bytes"], lab))  # fmt: skip
    totals = st.get("totals", {})
    for kind in (*STREAM_KINDS, *CAPTURE_KINDS):
        if _num(totals.get(kind)):
            out.append(Sample("voltstream_capture_packets_total", "counter",
                              "packets of the capture, by kind: "
                              + _kinds(STREAM_KINDS | CAPTURE_KINDS),
                              totals[kind], {"kind": kind}))  # fmt: skip
    if _num(totals.get("bytes")):
        text = "payload bytes placed in chunks, all streams"
        out.append(Sample("voltstream_capture_bytes_total", "counter", text, totals["bytes"]))
    out += _engine_counters(st, "voltstream_capture_", {})
    for th in st.get("threads", []):
        cpu = th.get("cpu")  # "" (no label) when the thread is not pinned
        lab = {"thread": str(th.get("thread")), "cpu": "" if cpu is None else str(cpu)}
        out += _engine_counters(th, "voltstream_thread_", lab)
        tot = th.get("totals", {})
        for kind in STREAM_KINDS:
            if _num(tot.get(kind)):
                out.append(Sample("voltstream_thread_packets_total", "counter",
                                  "packets of one capture thread's streams, by kind",
                                  tot[kind], lab | {"kind": kind}))  # fmt: skip
        for kind in CAPTURE_KINDS:
            if _num(th.get(kind)):
                out.append(Sample("voltstream_thread_packets_total", "counter",
                                  "packets of one capture thread's streams, by kind",
                                  th[kind], lab | {"kind": kind}))  # fmt: skip
    host = st.get("host") or {}
    for section, name, text, keys in _HOST:
        part = host.get(section) or {}
        extra = {"interface": str(part["name"])} if part.get("name") else {}
        for k in keys:
            if _num(part.get(k)):
                out.append(Sample(name, "counter", text, part[k], extra | {"kind": k}))
    for engine, kinds, text in _ENGINE_OWN:
        part = st.get(engine) or {}
        out += [
            Sample(f"voltstream_capture_{engine}_total", "counter", text, part[k], {"kind": k})
            for k in kinds if _num(part.get(k))
        ]  # fmt: skip
    mem = st.get("memory") or {}
    if _num(mem.get("bytes")):
        out.append(Sample("voltstream_capture_pool_bytes", "gauge",
                          "bytes of the capture's chunk pool", mem["bytes"]))  # fmt: skip
    if _num(st.get("rcvbuf")):
        out.append(Sample("voltstream_capture_kernel_buffer_bytes", "gauge",
                          "kernel-side buffer of the capture (ring, socket buffer)",
                          st["rcvbuf"]))  # fmt: skip
    free, pool = snap.get("free_chunks", -1), snap.get("pool_chunks", 0)
    if _num(free) and free >= 0:
        out.append(
            Sample(
                "voltstream_capture_free_chunks",
                "gauge",
                "pool chunks free (not filling, queued or held by a consumer)",
                free,
            )
        )
    if _num(pool) and pool:
        out.append(Sample("voltstream_capture_pool_chunks", "gauge", "chunks in the pool", pool))
    if _num(free) and free >= 0 and _num(pool) and pool:
        out.append(Sample("voltstream_capture_ring_fill_ratio", "gauge",
                          "share of the pool's chunks in use: 1 - free / pool",
                          1.0 - free / pool))  # fmt: skip
    return out


#: The merger's counters (cluster/merger.py `Merger.status`): name, help.
_MERGE = (
    ("rows_written", "rows of the merged archive on disk"),
    ("rows_complete", "rows written with every node's channels"),
    ("late", "node rows that came after their row was written (dropped)"),
    ("duplicate", "second copies of a node's row (a rerun's; ignored)"),
    ("malformed", "node rows of a wrong shape or an unknown node (dropped)"),
)
#: Per node, as the merger saw it.
_MERGE_NODE = (
    ("rows_received", "counter", "rows this node sent the merger"),
    ("rows_missing", "counter", "merged rows written without this node (weight 0 there)"),
    ("restarts", "counter", "times this node's worker left the cluster (a kill, a lost host)"),
    ("last_row", "gauge", "the newest row this node sent"),
)


def _cluster(c: dict[str, Any]) -> list[Sample]:
    """A cluster observation (voltstream demo --nodes, fold --scheduler): the merger's
    counters, and per node (label ``node``) its merge counters and the capture
    counters it last sent with a row, under the capture metrics' own names."""
    out = [
        Sample(f"voltstream_cluster_{k}_total", "counter", "cluster merger: " + text, c[k])
        for k, text in _MERGE if _num(c.get(k))
    ]  # fmt: skip
    lat = c.get("merge_latency_s") or {}
    if _num(lat.get("p50")) and lat["p50"] == lat["p50"]:  # NaN before the first row
        out.append(Sample("voltstream_cluster_merge_latency_seconds", "gauge",
                          "median time from the part that completed a row to the row on "
                          "disk", lat["p50"]))  # fmt: skip
    for node, st in (c.get("nodes") or {}).items():
        lab = {"node": str(node)}
        for k, kind, text in _MERGE_NODE:
            if _num(st.get(k)):
                out.append(Sample(f"voltstream_cluster_node_{k}" + ("_total" if kind ==
                                  "counter" else ""), kind, text, st[k], lab))  # fmt: skip
        cap = (st.get("counters") or {}).get("capture")
        if isinstance(cap, dict) and isinstance(cap.get("engine"), dict):
            out += [replace(x, labels=x.labels | lab) for x in _capture(cap["engine"], cap)]
    return out


def _kinds(kinds: dict[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in kinds.items())


def _engine_counters(d: dict[str, Any], prefix: str, lab: dict[str, str]) -> list[Sample]:
    out = []
    for key, name, text in _ENGINE_COUNTERS:
        if _num(d.get(key)):
            out.append(Sample(prefix + name, "counter", text, d[key], lab))
    for state in ("emitted", "dropped"):
        if _num(d.get(f"chunks_{state}")):
            out.append(Sample(prefix + "chunks_total", "counter",
                              "chunks the assembler finished, by state (emitted to the ring, "
                              "dropped: no consumer took it in time)",
                              d[f"chunks_{state}"], lab | {"state": state}))  # fmt: skip
    return out


def _capture_report(r: dict[str, Any]) -> list[Sample]:
    """What the capture verb's consumer counted (capture alone: counted only)."""
    rows = (
        ("chunks", "voltstream_consumer_chunks_total", "time-ordered blocks the consumer took"),
        ("samples_written", "voltstream_consumer_samples_total",
         "samples the consumer took (written to the file, or counted)"),
        ("bytes_written", "voltstream_consumer_bytes_total", "bytes of those samples"),
        ("discontinuities", "voltstream_timeline_discontinuities_total",
         "time line restarts (jumps beyond the resync bound)"),
    )  # fmt: skip
    return [Sample(n, "counter", t, r[k]) for k, n, t in rows if _num(r.get(k))]


def _gpu_stage(p: dict[str, Any]) -> list[Sample]:
    """fold --listen --device gpu: the GPU stage's report (pipeline/gpu.py)."""
    rows = (
        ("blocks", "voltstream_gpu_blocks_total", "counter", 1, "blocks copied to the GPU"),
        ("gaps", "voltstream_gpu_gaps_total", "counter", 1, "gaps fed (chunks that never came)"),
        ("samples_fed", "voltstream_gpu_samples_total", "counter", 1, "samples fed to the GPU"),
        ("bytes_fed", "voltstream_gpu_bytes_total", "counter", 1, "bytes copied to the GPU"),
        ("lost_samples", "voltstream_gpu_lost_samples_total", "counter", 1,
         "samples fed as lost (missing packets, gaps)"),
        ("copies_in_flight", "voltstream_gpu_chunks_in_flight", "gauge", 1,
         "pool chunks held while their copy to the GPU runs"),
        ("max_copies_in_flight", "voltstream_gpu_chunks_in_flight_max", "gauge", 1,
         "most chunks in flight to the GPU at once"),
        ("registered_bytes", "voltstream_gpu_registered_bytes", "gauge", 1,
         "bytes of the pool page-locked for the GPU"),
        ("gpu_busy_ms", "voltstream_gpu_busy_seconds_total", "counter", 1e-3,
         "seconds the GPU spent in the stage's kernels (its rate: the busy fraction)"),
        ("gpu_busy_pct", "voltstream_gpu_busy_ratio", "gauge", 1e-2,
         "busy fraction of the GPU over the whole run (final report)"),
        ("host_wait_s", "voltstream_gpu_host_wait_seconds_total", "counter", 1,
         "seconds the host waited on the GPU"),
    )  # fmt: skip
    return [Sample(n, k, t, p[key] * f) for key, n, k, f, t in rows if _num(p.get(key))]


#: A trigger's outcome (record/dumps.py's counts): what each means.
TRIGGER_OUTCOMES = {
    "dumps": "dumped (whole, or partial where asked)",
    "refused_gone": "refused 410: the window is no longer in the ring",
    "refused_not_yet": "refused 409: the window is not yet in the ring",
    "malformed": "refused 400: a malformed trigger",
    "busy": "refused 503: dumps waiting for the disk",
}


#: A live search candidate's dump, by outcome (record/candidate_triggers.py's counts).
CANDIDATE_OUTCOMES = ("below_threshold", "waited", "dumped", "expired", "at_end",
                      "refused_gone", "busy", "failed")  # fmt: skip


def _dumps(d: dict[str, Any]) -> list[Sample]:
    """--ring-seconds: triggers by outcome, dumps by fate, samples, the ring, candidates."""
    out = [Sample("voltstream_dump_triggers_total", "counter",
                  f"triggers by outcome: {_kinds(TRIGGER_OUTCOMES)}", d[k], {"outcome": k})
           for k in TRIGGER_OUTCOMES if _num(d.get(k))]  # fmt: skip
    out += [Sample("voltstream_dumps_total", "counter", "dumps by fate: written, failed, "
                   "partial (also written or failed)", d[k], {"state": k})
            for k in ("written", "failed", "partial") if _num(d.get(k))]  # fmt: skip
    rows = (
        ("samples", "voltstream_dump_samples_total", "samples dumped"),
        ("lost_samples", "voltstream_dump_lost_samples_total",
         "samples dumped as lost (zeros: packets that never came, gaps, overwritten)"),
    )  # fmt: skip
    out += [Sample(n, "counter", t, d[k]) for k, n, t in rows if _num(d.get(k))]
    cands = d.get("candidates") or {}  # search --listen: docs/search.md says each outcome
    out += [Sample("voltstream_dump_candidates_total", "counter", "live search candidates "
                   "by what their dump did", cands[k], {"outcome": k})
            for k in CANDIDATE_OUTCOMES if _num(cands.get(k))]  # fmt: skip
    ring = d.get("ring") or {}
    if _num(ring.get("bytes")):
        out.append(Sample("voltstream_dump_ring_bytes", "gauge",
                          "host memory of the voltage ring", ring["bytes"]))  # fmt: skip
    return out


#: search --listen (the report's ``search``): key, metric, type, meaning.
_SEARCH = (
    ("samples", "samples_total", "counter", "filterbank samples fed to the search"),
    ("lost_samples", "lost_samples_total", "counter", "of them lost (masked: missing packets)"),
    ("searched_samples", "searched_samples_total", "counter",
     "arrival times searched (gulps' own parts)"),
    ("gulps", "gulps_total", "counter", "gulps searched"),
    ("giants", "giants_total", "counter", "giants (one per DM trial, boxcar and run)"),
    ("n_candidates", "candidates_total", "counter", "candidate lines written"),
    ("search_seconds", "engine_seconds_total", "counter",
     "seconds the search engine spent on gulps"),
    ("seconds_behind_max", "behind_seconds_max", "gauge",
     "the most the search lagged the stream (newest sample's arrival to a gulp's end)"),
)  # fmt: skip


def _search(r: dict[str, Any]) -> list[Sample]:
    """search --listen: rows in, gulps, giants, candidates, the engine's time, latency."""
    out = [Sample("voltstream_search_" + n, kind, t, r[k])
           for k, n, kind, t in _SEARCH if _num(r.get(k))]  # fmt: skip
    out += [Sample("voltstream_search_latency_seconds", "gauge",
                   "detection latency of the candidates so far, by quantile (docs/search.md)",
                   r[k], {"quantile": q})
            for k, q in (("latency_p50_s", "0.5"), ("latency_p99_s", "0.99"),
                         ("latency_max_s", "1")) if _num(r.get(k))]  # fmt: skip
    return out


def _record(r: dict[str, Any]) -> list[Sample]:
    """record: the recorder's report (chunks written, unwritten, lost with a disk)."""
    rows = (
        ("chunks_written", "voltstream_record_chunks_total", "written"),
        ("chunks_unwritten", "voltstream_record_chunks_total", "unwritten"),
        ("chunks_lost", "voltstream_record_chunks_total", "lost"),
    )
    out = [
        Sample(n, "counter", "chunks by fate: written; unwritten (no disk had room); lost "
               "(with a failed disk)", r[k], {"state": s})
        for k, n, s in rows if _num(r.get(k))
    ]  # fmt: skip
    if _num(r.get("bytes_written")):
        out.append(Sample("voltstream_record_bytes_total", "counter", "bytes written to disks",
                          r["bytes_written"]))  # fmt: skip
    if _num(r.get("filled_packets")):
        out.append(Sample("voltstream_record_filled_packets_total", "counter",
                          "packet slots filled because the packet never came",
                          r["filled_packets"]))  # fmt: skip
    for w in r.get("writers", []):
        lab = {"dir": str(w.get("dir"))}
        for key, name, text in (
            ("chunks", "voltstream_record_writer_chunks_total", "chunks one disk wrote"),
            ("bytes", "voltstream_record_writer_bytes_total", "bytes one disk wrote"),
            ("lost_chunks", "voltstream_record_writer_lost_chunks_total",
             "chunks lost with this disk"),
        ):  # fmt: skip
            if _num(w.get(key)):
                out.append(Sample(name, "counter", text, w[key], lab))
        if "failed" in w:
            out.append(Sample("voltstream_record_writer_failed", "gauge",
                              "1 once the disk failed and was taken out", float(bool(w["failed"])),
                              lab))  # fmt: skip
    return out


#: F-engine report counters of its own (besides capture, engine, output sections).
_FENGINE = ("chunks", "blocks", "samples_fed", "heaps_paired", "heaps_absent",
            "timeline_restarts", "chunks_out_of_order", "heaps_not_sent_capture_stopped",
            "control_updates")  # fmt: skip


def _fengine(r: dict[str, Any]) -> list[Sample]:
    out = [
        Sample(f"voltstream_fengine_{k}_total", "counter", f"F-engine report: {k}", r[k])
        for k in _FENGINE if _num(r.get(k))
    ]  # fmt: skip
    for pol, n in enumerate(r.get("heaps_unpaired") or []):
        out.append(
            Sample(
                "voltstream_fengine_heaps_unpaired_total",
                "counter",
                "heaps that came in one polarisation only",
                n,
                {"pol": str(pol)},
            )
        )
    if _num(r.get("copies_in_flight")):
        out.append(Sample("voltstream_gpu_chunks_in_flight", "gauge",
                          "pool chunks held while their copy to the GPU runs",
                          r["copies_in_flight"]))  # fmt: skip
    out += _flat(r.get("engine") or {}, "voltstream_fengine_engine_", "F-engine engine: ")
    out += _flat(r.get("output") or {}, "voltstream_fengine_output_", "F-engine output: ")
    return out


def _flat(d: dict[str, Any], prefix: str, text: str) -> list[Sample]:
    """An engine's own counters, whatever they are: ``x_s`` become seconds, lists a
    ``pol`` (``heaps_per_destination``: ``dest``) label; ``calls`` and the like stay."""
    out = []
    for k, v in d.items():
        name, unit = k, 1.0
        if k.endswith("_s"):
            name = k[:-2] + "_seconds"
        elif k.endswith("_ms"):
            name, unit = k[:-3] + "_seconds", 1e-3
        if _num(v):
            out.append(Sample(f"{prefix}{name}_total", "counter", text + k, v * unit))
        elif isinstance(v, list) and all(_num(x) for x in v):
            label = "dest" if "destination" in k else "pol"
            out += [
                Sample(f"{prefix}{name}_total", "counter", text + k, x * unit, {label: str(i)})
                for i, x in enumerate(v)
            ]
    return out


def _replay(r: dict[str, Any]) -> list[Sample]:
    out = []
    for key, name, text in (
        ("packets", "voltstream_replay_packets_total", "packets sent"),
        ("bytes", "voltstream_replay_bytes_total", "bytes sent"),
        ("loops_done", "voltstream_replay_loops_total", "passes over the recording finished"),
    ):
        if _num(r.get(key)):
            out.append(Sample(name, "counter", text, r[key]))
    if _num(r.get("late_s")):
        out.append(Sample("voltstream_replay_late_seconds", "gauge",
                          "furthest any burst fell behind its due time", r["late_s"]))  # fmt: skip
    known = {"packets", "bytes", "loops", "loops_done", "late_s", "seconds", "wall_s",
             "rate_gbps", "asked_gbps", "pacing_error"}  # fmt: skip
    rest = {k: v for k, v in r.items() if k not in known and _num(v)}
    return out + _flat(rest, "voltstream_replay_source_", "replay source: ")
