"""Capture stage: drive a capture engine and hand its chunks to sinks.

The engine (Rust, `voltstream._core.Capture`) owns the socket, the assembler and
the chunk pool; this module only consumes finished chunks. Each chunk is laid out
[stream][packet][payload]; sinks turn it into time-channel-polarisation (TFP)
samples. Missing packets are zero-filled in what a sink writes (a pooled chunk
may hold stale bytes there) and counted, so nothing is silently lost.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voltstream.errors import CaptureError, ConfigError
from voltstream.formats import StreamFormat

COUNTER_NAMES = ("received", "missing", "late", "duplicate", "malformed", "foreign", "dropped")


def chunk_to_tfp(chunk, fmt: StreamFormat) -> tuple[np.ndarray, np.ndarray]:
    """Returns (int8 samples (nsamp, nchan, npol, 2), per-sample valid mask) for a chunk.

    Copies: the chunk goes back to the pool as soon as the caller releases it.
    """
    raw = chunk.array() if isinstance(chunk, MergedChunk) else np.frombuffer(chunk, np.uint8)
    npkt = chunk.packets_per_chunk
    present = np.frombuffer(chunk.present, dtype=np.uint8).reshape(chunk.nstreams, npkt) != 0
    per_stream = raw.reshape(chunk.nstreams, npkt, chunk.payload_len)
    samples = fmt.payload_to_tfp(per_stream, present)
    valid = np.repeat(present.all(axis=0), fmt.samples_per_packet)
    return samples, valid


@dataclass
class CaptureReport:
    """Everything a capture run counted, for the JSON report and the terminal."""

    format: str
    bind: str
    duration_s: float = 0.0
    chunks: int = 0
    samples_written: int = 0
    bytes_written: int = 0
    engine: dict = field(default_factory=dict)
    discontinuities: int = 0  # timeline restarts (jumps beyond the resync bound)

    @property
    def totals(self) -> dict[str, int]:
        tot = dict.fromkeys(COUNTER_NAMES, 0)
        for s in self.engine.get("streams", []):
            for k in COUNTER_NAMES:
                tot[k] += int(s.get(k, 0))
        for k in ("malformed", "foreign"):
            tot[k] = max(tot[k], int(self.engine.get(k, 0)))
        return tot

    @property
    def lost(self) -> int:
        t = self.totals
        return t["missing"] + t["late"] + t["dropped"] + int(self.engine.get("kernel_drops", 0))

    def as_dict(self) -> dict:
        payload = self.engine.get("payload_bytes", self.bytes_written)
        return {
            "format": self.format,
            "bind": self.bind,
            "duration_s": self.duration_s,
            "chunks": self.chunks,
            "samples_written": self.samples_written,
            "bytes_written": self.bytes_written,
            "discontinuities": self.discontinuities,
            "rate_gbps": 8 * payload / self.duration_s / 1e9 if self.duration_s else 0.0,
            "totals": self.totals,
            "engine": self.engine,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def summary_lines(self) -> list[str]:
        t = self.totals
        lines = [
            f"capture {self.format} on {self.bind} ({self.engine.get('engine', '?')} engine): "
            f"{self.chunks} chunks, "
            f"{self.samples_written} samples, {self.bytes_written / 1e6:.1f} MB "
            f"in {self.duration_s:.2f} s",
            "  "
            + "  ".join(f"{k}={t[k]}" for k in COUNTER_NAMES)
            + f"  kernel_drops={self.engine.get('kernel_drops', 0)}",
        ]
        if groups := self.engine.get("multicast"):
            lines.append("  multicast groups joined: " + ", ".join(groups))
        lines += _host_lines(self.engine.get("host"), self.engine.get("engine"))
        lines += _memory_lines(self.engine.get("memory"))
        threads = self.engine.get("threads", [])
        if len(threads) > 1 or any(th.get("cpu") is not None for th in threads):
            for th in threads:
                tot = th["totals"]
                lines.append(
                    f"  thread {th['thread']} (cpu {th['cpu']}, streams {th['streams']}): "
                    + "  ".join(f"{k}={tot[k]}" for k in ("received", "missing", "late"))
                    + f"  duplicate={tot['duplicate']}  malformed={th['malformed']}"
                    + f"  foreign={th['foreign']}  dropped={tot['dropped']}"
                    + f"  kernel_drops={th['kernel_drops']}"
                )
        return lines


def _host_lines(host: dict | None, engine: str | None = None) -> list[str]:
    """The kernel's counters outside the capture, each with how far it reaches."""
    if not host:
        return []

    def fmt(d: dict, keys: tuple[str, ...]) -> str:
        return " ".join(f"{k}={'n/a' if d.get(k) is None else d[k]}" for k in keys)

    parts = []
    if udp := host.get("udp"):
        parts.append(
            "udp " + fmt(udp, ("rcvbuf_errors", "in_errors", "in_csum_errors", "no_ports"))
            + f" [{udp['scope']}]"
        )  # fmt: skip
    if sn := host.get("softnet"):
        parts.append("softnet " + fmt(sn, ("dropped", "time_squeeze")) + f" [{sn['scope']}]")
    if nic := host.get("interface"):
        parts.append(
            f"{nic['name']} " + fmt(nic, ("rx_dropped", "rx_missed_errors")) + " [interface]"
        )
    if not parts:
        return []
    if engine == "packet_ring":
        # The guard socket holding the port has a drop-all filter, so the stack
        # counts each datagram it also saw as a UDP InError; the ring got them.
        parts.append(
            "(udp in_errors include the datagrams the packet ring's guard socket "
            "discards by design; they reached the capture)"
        )
    return ["  kernel counters during the run (context, also counting other traffic):"] + [
        "    " + p for p in parts
    ]


def _memory_lines(mem: dict | None) -> list[str]:
    if not mem or not mem.get("bytes"):
        return []
    node = mem.get("numa_node")
    lines = [
        f"  chunk pool: {mem['bytes'] / 2**20:.1f} MiB, "
        f"huge pages {'yes' if mem.get('huge_pages') else 'no'}, "
        f"locked {'yes' if mem.get('locked') else 'no'}, "
        f"NUMA node {'-' if node is None else node}"
    ]
    lines += [f"  warning: {w}" for w in mem.get("warnings", [])]
    return lines


def run_capture(
    fmt: StreamFormat,
    bind: str,
    duration_s: float,
    sink=None,
    packets_per_chunk: int = 256,
    nchunks: int = 16,
    window: int = 4,
    idle_timeout_s: float | None = None,
    on_start=None,
    resync_chunks: int = 64,
    engine: str = "auto",
    multicast: list[str] | None = None,
    interface: str | None = None,
    threads: int = 1,
    cpus: list[int] | None = None,
    engine_options: dict | None = None,
) -> CaptureReport:
    """Captures for `duration_s` seconds (or until `idle_timeout_s` of silence after
    the first packet) and passes the samples to `sink(samples, valid)` in time order.

    `on_start` is called once the socket is bound, so a sender can be started
    without racing the bind. `multicast` lists IPv4 groups to join on `interface`. With
    `threads` > 1 each capture thread assembles its own streams; their chunks are merged
    back by chunk id (a copy) before the sink.
    `engine_options` are more keyword arguments of `_core.Capture` (e.g. dpdk_port,
    dpdk_eal_args).
    """
    from voltstream import _core

    if duration_s <= 0:
        raise ConfigError(f"--duration must be positive, got {duration_s}")
    report = CaptureReport(format=fmt.name, bind=bind)
    try:
        cap = _core.Capture(
            bind=bind,
            packets_per_chunk=packets_per_chunk,
            nchunks=nchunks,
            window=window,
            resync_chunks=resync_chunks,
            engine=engine,
            multicast=multicast,
            interface=interface,
            threads=threads,
            cpus=cpus,
            **fmt.capture_kwargs(),
            **(engine_options or {}),
        )
    except OSError as e:  # CaptureError is an OSError; keep its message
        raise CaptureError(str(e)) from None
    timeline = _Timeline(fmt, sink, report, resync_chunks)
    if threads > 1:
        timeline = _Merger(cap, timeline)
    cap.start()
    t0 = time.monotonic()
    last_data = None
    try:
        if on_start is not None:
            on_start()
        while True:
            now = time.monotonic()
            if now - t0 >= duration_s:
                break
            if idle_timeout_s is not None and last_data is not None:
                if now - last_data >= idle_timeout_s:
                    break
            chunk = cap.next_chunk(0.05)
            if chunk is None:
                continue
            last_data = time.monotonic()
            timeline.add(chunk)
    finally:
        cap.stop()
        # The engine flushes its open chunks at stop: drain them too.
        while (chunk := cap.next_chunk(0.0)) is not None:
            timeline.add(chunk)
        timeline.finish()
        report.duration_s = time.monotonic() - t0
        report.engine = cap.stats()
    return report


class _Timeline:
    """Turns chunks into a continuous sample stream for a sink.

    Chunks in which no packet arrived are never emitted by the engine (their
    packets are counted missing): the gap is filled with zeros marked invalid so
    the file's time axis stays true. The last chunk is held back until the end so
    its unfilled tail (packets never sent) can be cut instead of written as zeros.
    A gap longer than the resync bound means the engine restarted its timeline;
    it is counted as a discontinuity rather than filled.
    """

    def __init__(self, fmt: StreamFormat, sink, report: CaptureReport, resync_chunks: int):
        self.fmt, self.sink, self.report = fmt, sink, report
        self.resync_chunks = resync_chunks
        self.pending = None  # (chunk_id, samples, valid, present)

    def add(self, chunk) -> None:
        try:
            samples, valid = chunk_to_tfp(chunk, self.fmt)
            present = np.frombuffer(chunk.present, dtype=np.uint8).reshape(chunk.nstreams, -1)
            present = present.any(axis=0)
            cid = chunk.chunk_id
        finally:
            chunk.release()
        if self.pending is None and self.report.samples_written == 0:
            # Chunk boundaries are multiples of packets_per_chunk on the format's
            # index axis (absolute for VDIF), so the first chunk usually starts
            # before the first packet: the stream begins at that packet.
            first = int(np.flatnonzero(present)[0]) if present.any() else 0
            cut = first * self.fmt.samples_per_packet
            samples, valid, present = samples[cut:], valid[cut:], present[first:]
        if self.pending is not None:
            prev_id = self.pending[0]
            self._emit(*self.pending[1:3])
            gap = cid - prev_id - 1
            if 0 < gap <= self.resync_chunks:
                per_chunk = samples.shape[0]
                zeros = np.zeros((gap * per_chunk,) + samples.shape[1:], np.int8)
                self._emit(zeros, np.zeros(zeros.shape[0], dtype=bool))
            elif gap != 0:
                self.report.discontinuities += 1
        self.pending = (cid, samples, valid, present)

    def finish(self) -> None:
        if self.pending is None:
            return
        _, samples, valid, present = self.pending
        self.pending = None
        if present.any():
            last = int(np.flatnonzero(present)[-1]) + 1
            keep = last * self.fmt.samples_per_packet
            self._emit(samples[:keep], valid[:keep])

    def _emit(self, samples: np.ndarray, valid: np.ndarray) -> None:
        self.report.chunks += 1
        self.report.samples_written += samples.shape[0]
        self.report.bytes_written += samples.nbytes
        if self.sink is not None:
            self.sink(samples, valid)


class MergedChunk:
    """All streams of one chunk id, copied from the capture threads' chunks (which each
    hold only their own streams); behaves like a `_core.Chunk` for `chunk_to_tfp`."""

    def __init__(self, chunk_id: int, nstreams: int, ppc: int, payload_len: int):
        self.chunk_id, self.nstreams = chunk_id, nstreams
        self.packets_per_chunk, self.payload_len = ppc, payload_len
        self.data = np.zeros((nstreams, ppc, payload_len), np.uint8)
        self.mask = np.zeros((nstreams, ppc), np.uint8)

    def add(self, chunk) -> None:
        raw = np.frombuffer(chunk, np.uint8).reshape(len(chunk.streams), self.packets_per_chunk, -1)
        self.data[chunk.streams] = raw
        self.mask[chunk.streams] = np.frombuffer(chunk.present, np.uint8).reshape(
            len(chunk.streams), -1
        )
        del raw
        chunk.release()

    @property
    def present(self) -> bytes:
        return self.mask.tobytes()

    def array(self) -> np.ndarray:
        return self.data.reshape(-1)

    def release(self) -> None:
        pass


class _Merger:
    """Puts the capture threads' chunks back together by chunk id, in order.

    Chunk id k is complete when every thread has delivered it or moved past it (a thread
    that skipped k had no packet of its streams there: those stay absent), or at the end.
    """

    def __init__(self, cap, timeline: _Timeline):
        self.timeline, self.nthreads = timeline, cap.threads
        self.shape = (cap.nstreams, cap.packets_per_chunk, cap.payload_len)
        self.pending: dict[int, MergedChunk] = {}
        self.last = [-1] * self.nthreads  # highest chunk id seen per thread

    def add(self, chunk) -> None:
        cid, t = chunk.chunk_id, chunk.thread
        if cid not in self.pending:
            self.pending[cid] = MergedChunk(cid, *self.shape)
        self.pending[cid].add(chunk)
        self.last[t] = max(self.last[t], cid)
        done = min(self.last)
        for k in sorted(k for k in self.pending if k <= done):
            self.timeline.add(self.pending.pop(k))

    def finish(self) -> None:
        for k in sorted(self.pending):
            self.timeline.add(self.pending.pop(k))
        self.timeline.finish()
