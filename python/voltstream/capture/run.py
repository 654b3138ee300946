"""Capture stage: drive a capture engine and hand its chunks to sinks.

The engine (Rust, `voltstream._core.Capture`) owns the socket, the assembler and
the chunk pool; this module runs the loop that takes finished chunks, puts them in
time order (pipeline/timeline.py) and hands them to a consumer: the GPU stages take
them as handles (pipeline/gpu.py), `TfpSink` turns them into time-channel-polarisation
(TFP) samples for a file, `CountingSink` only counts (capture alone). Missing packets
are zero-filled in what a sink writes (a pooled chunk may hold stale bytes there) and
counted, so nothing is silently lost.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.capture.report import (  # noqa: F401 - the report's names, here too
    COUNTER_NAMES,
    STREAM_COUNTERS,
    CaptureReport,
    counted,
    stream_labels,
)
from voltstream.capture.stage_times import StageTimes
from voltstream.capture.timeline import Block, ChunkTimeline, Gap
from voltstream.errors import ConfigError
from voltstream.formats import StreamFormat
from voltstream.pipeline.interfaces import ChunkSource, Consumer

if TYPE_CHECKING:  # the compiled extension is imported when a capture opens
    from voltstream import _core
    from voltstream.capture.config import CaptureFormat, CaptureSettings

log = logging.getLogger("voltstream.capture.run")


def open_capture(fmt: CaptureFormat, settings: CaptureSettings) -> _core.Capture:
    """A `_core.Capture` of `fmt` as `settings` say (not started); engine errors
    become CaptureError."""
    return settings.open(fmt)


def run_capture(
    fmt: CaptureFormat,
    settings: CaptureSettings,
    duration_s: float | None,
    sink: Any = None,
    *,
    idle_timeout_s: float | None = None,
    on_start: Callable[[], None] | None = None,
    consumer: Consumer | None = None,
    source: ChunkSource | None = None,
    stop_event: threading.Event | None = None,
    live_report: Callable[[Callable[[], dict]], None] | None = None,
    catch_interrupt: bool = False,
    tap: Callable[[Consumer], Consumer] | None = None,
) -> CaptureReport:
    """Captures for `duration_s` seconds (or until `idle_timeout_s` of silence, counted
    from the start while nothing has arrived) and passes the samples to
    `sink(samples, valid)` in time order.

    `on_start` is called once the socket is bound, so a sender can be started
    without racing the bind. `settings` (capture.config.CaptureSettings) set the
    capture up: address, engine, chunks, threads. With several capture threads each
    assembles its own streams; the timeline groups their chunks by chunk id
    (pipeline/timeline.py). Instead of `sink`, a `consumer` (pipeline/interfaces.py
    `Consumer`) may take the timeline's blocks and gaps as handles, as the GPU stages
    do. Without either, chunks go back to the pool unread (capture alone).
    `source`: chunks from elsewhere than a capture of its own (a recording's
    written chunks, record/run.py ``ForwardedChunks``), already running. Setting
    ``stop_event`` (SIGINT/SIGTERM, cli.main) ends the run as its duration would:
    the chunk in hand finished, the engine's open chunks drained, the consumer
    finished (``report.interrupted``).
    `live_report` (the metrics board's ``watch``) is given a callable that returns
    the report so far once the capture is open, and ``report.as_dict`` at the end.
    ``duration_s`` None: until stopped. ``catch_interrupt``: Ctrl-C ends the run as
    a stop does (``report.interrupted``) instead of raising. ``tap``: given the
    consumer the run made (or was given), returns the one that takes the timeline's
    items in front of it (the voltage ring, capture/ring.py ``VoltageRing.around``).

    This is the one runner of every live product (``StageRunner`` stages: the fold,
    the F-engine, a cluster node), of capture alone and of the CPU sinks.
    """
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"--duration must be positive, got {duration_s}")
    bind = settings.network.bind
    report = CaptureReport(format=fmt.name, bind=bind, stream_labels=stream_labels(fmt))
    cap: Any = open_capture(fmt, settings) if source is None else source
    if consumer is None and sink is not None:
        if not isinstance(fmt, StreamFormat):
            raise ConfigError(
                f"samples of a {fmt.name} stream cannot be written: only the YNAO and VDIF "
                "formats carry their sample geometry; capture and count it without a sink"
            )
        slot_len = getattr(cap, "slot_len", None)
        consumer = TfpSink(fmt, sink, report, slot_len=slot_len)
    elif consumer is None:
        consumer = CountingSink(fmt, report)
    if tap is not None:
        consumer = tap(consumer)
    stride = getattr(cap, "chunk_stride", 1)
    timeline = ChunkTimeline(
        cap.nstreams, cap.packets_per_chunk, consumer.take, cap.threads,
        settings.chunks.resync_chunks, stride, getattr(cap, "thread_streams", None),
        settings.chunks.window_for(cap.packets_per_chunk, getattr(fmt, "packets_per_second", None)),
        # Each thread's pool: the whole pool per thread owning streams, shared out by
        # threads taking turns (crates/voltstream-core/src/capture/group.rs).
        pool_chunks=-(-settings.chunks.nchunks // stride),
    )  # fmt: skip
    run = CaptureRun(cap, timeline, consumer, settings.threads.cpus)
    if live_report is not None:
        live_report(_so_far(report, cap, run, consumer))
    try:
        run.loop(duration_s, idle_timeout_s, on_start, stop_event, catch_interrupt)
    finally:
        report.interrupted = run.interrupted or (stop_event is not None and stop_event.is_set())
        report.discontinuities = timeline.discontinuities
        report.silent_packets = [int(n) for n in timeline.silent_packets]
        report.late_chunk_packets = timeline.late_chunk_packets
        report.duration_s = run.seconds
        report.ended, report.still_arriving = run.ended, run.still_arriving
        report.engine = cap.stats()
        report.stage_seconds = {"consumer": run.chunk_times.as_dict()}
    if live_report is not None:
        live_report(report.as_dict)
    return report


def _so_far(report: CaptureReport, cap: Any, run: CaptureRun, consumer: Any) -> Callable[[], dict]:
    """The report of a running capture, asked from another thread (a metrics scrape):
    the engine's counters now, the pool's free chunks, a GPU stage's chunks in flight
    and GPU busy time where the consumer has them."""
    t0, pool = time.monotonic(), list[int]()  # the pool's size, once the capture has started

    def now() -> dict:
        pool[:] = pool or [len(cap.chunk_buffers())]
        live = replace(report, engine=cap.stats(), duration_s=time.monotonic() - t0,
                       discontinuities=run.timeline.discontinuities,
                       stage_seconds={"consumer": run.chunk_times.as_dict()})  # fmt: skip
        if callable(as_dict := getattr(consumer, "as_dict", None)):
            live.pipeline = as_dict()
            live.pipeline["copies_in_flight"] = consumer.handoff.in_flight
            if getattr(consumer, "status", None) is not None and consumer.busy is not None:
                # As of the status line's last tick: asking the GPU here would race
                # the consumer thread's own collection of its timing events.
                live.pipeline["gpu_busy_ms"] = consumer.busy_ms_last
        return live.as_dict() | {"free_chunks": cap.free_chunks(), "pool_chunks": pool[0]}

    return now


#: A run cut by its duration with a packet in its last this many seconds was cut
#: while its stream was still arriving (the report's ``still_arriving``).
STILL_ARRIVING_S = 1.0


class CaptureRun:
    """The one capture loop: a started capture's chunks through the timeline to the
    consumer until a duration, an idle timeout, a stop event or Ctrl-C; then the
    capture is stopped, its flushed chunks drained, and the consumer finished. Every
    chunk goes back to the pool whatever happens (`release_all`, `consumer.close`)."""

    def __init__(
        self,
        cap: ChunkSource,
        timeline: ChunkTimeline,
        consumer: Consumer,
        capture_cpus: list[int] | None = None,
    ) -> None:
        self.cap, self.timeline, self.consumer = cap, timeline, consumer
        self.capture_cpus = capture_cpus
        self.seconds = 0.0
        self.interrupted = False
        #: How the run ended: "duration", "idle", "idle, nothing arrived" or "stop".
        self.ended = ""
        self.still_arriving = False  # packets came until a duration's end (cut short)
        self.chunk_times = StageTimes()  # the consumer's time per chunk

    def loop(
        self,
        duration_s: float | None = None,
        idle_timeout_s: float | None = None,
        on_start: Callable[[], None] | None = None,
        stop_event: threading.Event | None = None,
        catch_interrupt: bool = False,
    ) -> None:
        from voltstream.capture.config import start_capture

        cap, timeline, consumer = self.cap, self.timeline, self.consumer
        # Everything made before the run (imports, CuPy, the engine and its plans)
        # lives as long as it: kept out of the cyclic collector's reach, a full
        # collection in the run stays short instead of walking them all while chunks
        # wait (collected once first, so no garbage is kept). Given back at the end.
        gc.collect()
        gc.freeze()
        try:
            start_capture(cap)
        except BaseException:
            gc.unfreeze()
            raise
        t0 = time.monotonic()
        try:
            _leave_cpus(self.capture_cpus)
            getattr(consumer, "attach", lambda cap: None)(cap)
            if on_start is not None:
                on_start()
            try:
                self._run(t0, duration_s, idle_timeout_s, stop_event)
            except KeyboardInterrupt:
                if not catch_interrupt:
                    raise
                self.interrupted = True
            cap.stop()
            # The engine flushes its open chunks at stop: drain them too, every
            # thread's (with several, one ring found empty says nothing of the others').
            nthreads = getattr(cap, "threads", 1)
            for t in [None] if nthreads == 1 else range(nthreads):
                one = {} if t is None else {"thread": t}
                while (chunk := cap.next_chunk(0.0, **one)) is not None:
                    timeline.add(chunk)
            timeline.finish()
            consumer.finish()
        finally:
            timeline.release_all()
            getattr(consumer, "close", lambda: None)()
            cap.stop()
            gc.unfreeze()
            self.seconds = time.monotonic() - t0

    def _run(self, t0: Any, duration_s: Any, idle_timeout_s: Any, stop_event: Any) -> None:
        """Until the first end; ``self.ended`` says which, ``self.still_arriving``
        whether packets came in the last ``STILL_ARRIVING_S`` before a duration's end.
        Before the first packet the idle timeout counts from here (the consumer
        attached): a run that never receives anything ends after it too."""
        cap, last_data, packets_seen, first_chunk = self.cap, None, 0, True
        waiting_since = time.monotonic()
        while True:
            now = time.monotonic()
            if duration_s is not None and now - t0 >= duration_s:
                self.ended = "duration"
                self.still_arriving = last_data is not None and (
                    now - last_data < STILL_ARRIVING_S
                    or int(cap.stats()["packets"]) != packets_seen
                )
                return
            if stop_event is not None and stop_event.is_set():
                self.ended = "stop"
                return
            if idle_timeout_s is not None and now - (last_data or waiting_since) >= idle_timeout_s:
                self.ended = "idle" if last_data is not None else "idle, nothing arrived"
                if last_data is None:
                    log.warning("capture: no packet in %g s (--idle-timeout): ending the run",
                                idle_timeout_s)  # fmt: skip
                return
            chunk = cap.next_chunk(0.05)
            self.consumer.poll()
            if chunk is None:
                self.timeline.poll()
                # Chunks come out only as later packets push them out of the reorder
                # window: watch the packet count for the idle timeout too.
                packets = int(cap.stats()["packets"])
                if packets != packets_seen:
                    packets_seen, last_data = packets, time.monotonic()
                continue
            if first_chunk:  # an operator (and a test) can tell "bound" from "receiving"
                log.info("capture: data is arriving (first chunk assembled)")
                first_chunk = False
            last_data = time.monotonic()
            t = time.perf_counter()
            self.timeline.add(chunk)
            self.chunk_times.observe(time.perf_counter() - t)


def _leave_cpus(cpus: Any) -> None:
    """Keeps the calling (consumer) thread off the CPUs the capture threads were pinned
    to, when others are allowed: a consumer sharing a capture core stalls the ring's
    drain and the kernel drops packets (seen on the GPU machine at 14 Gb/s)."""
    if not cpus:
        return
    rest = os.sched_getaffinity(0) - set(cpus)
    if rest:
        os.sched_setaffinity(0, rest)


class CountingSink:
    """Capture alone: every block is counted and goes straight back to the pool."""

    def __init__(self, fmt: CaptureFormat, report: CaptureReport) -> None:
        self.fmt, self.report = fmt, report
        ndim = getattr(fmt, "ndim", 2)  # real VDIF: one value a sample
        self.bytes_per_sample = fmt.nchan * fmt.npol * ndim * getattr(fmt, "bits", 8) // 8

    def take(self, item: Any) -> None:
        packets = item.packets
        if isinstance(item, Block):
            item.release()
        n = packets * self.fmt.samples_per_packet
        self.report.chunks += 1
        self.report.samples_written += n
        self.report.bytes_written += n * self.bytes_per_sample

    def poll(self) -> None:
        pass

    def finish(self) -> None:
        pass


def block_samples(
    fmt: StreamFormat, item: Block, slot_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A block's packets ``first`` .. ``stop`` as host samples and their validity, the
    block released: int8 TFP (n, nchan, npol, 2), absent packets zero; packed (2- and
    4-bit) VDIF as complex64 (n, nchan, npol), its levels decoded as a VDIF file's
    (formats.py ``payload_to_complex``). ``slot_len``: bytes per packet slot of a
    capture of whole packets (the payload is its last ``payload_len`` bytes). The one
    conversion of the CPU consumers (`TfpSink`, a CPU cluster node)."""
    spp = fmt.samples_per_packet
    slot_len = slot_len or fmt.payload_len
    raw = item.array(item.present.shape[0], slot_len)
    raw = raw[..., slot_len - fmt.payload_len :]
    packed = fmt.bits != 8 or getattr(fmt, "real", False)  # real VDIF: float32 reals
    convert = fmt.payload_to_complex if packed else fmt.payload_to_tfp
    try:
        samples = convert(raw, item.present)
    finally:
        # A view by address (Block.array): released whatever holds it, never read again.
        del raw
        item.release()
    valid = np.repeat(item.present.all(axis=0), spp)
    keep = slice(item.first * spp, item.stop * spp)
    return samples[keep], valid[keep]


def gap_samples(fmt: StreamFormat, n: int) -> np.ndarray:
    """``n`` samples that never arrived, as `block_samples` gives samples: zeros."""
    if getattr(fmt, "real", False):
        return np.zeros((n, fmt.nchan, fmt.npol), np.float32)
    if fmt.bits != 8:
        return np.zeros((n, fmt.nchan, fmt.npol), np.complex64)
    return np.zeros((n, fmt.nchan, fmt.npol, 2), np.int8)


class TfpSink(CountingSink):
    """Blocks to host samples for `sink(samples, valid)` (`block_samples`: int8 TFP,
    or complex64 for packed VDIF); a gap as zeros, marked not valid."""

    fmt: StreamFormat  # the sample geometry CountingSink does not need

    def __init__(
        self, fmt: StreamFormat, sink: Any, report: CaptureReport, slot_len: int | None = None
    ) -> None:
        super().__init__(fmt, report)
        self.sink = sink
        # A capture of whole packets (a recording's) has the header before each
        # payload in its slot: the samples are the slot's last payload_len bytes.
        self.slot_len = slot_len or fmt.payload_len

    def take(self, item: Any) -> None:
        if isinstance(item, Gap):
            n = item.packets * self.fmt.samples_per_packet
            samples, valid = gap_samples(self.fmt, n), np.zeros(n, bool)
        else:
            samples, valid = block_samples(self.fmt, item, self.slot_len)
        self.report.chunks += 1
        self.report.samples_written += samples.shape[0]
        # Bytes as the samples came (packed VDIF: its bits), whatever they became here.
        self.report.bytes_written += samples.shape[0] * self.bytes_per_sample
        self.sink(samples, valid)
