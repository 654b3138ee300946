"""The F-engine as a running program: digitiser SPEAD heaps in, channelised heaps out.

Input. Both polarisations arrive on one UDP port as MeerKAT digitiser heaps (one
packet per heap; ``voltstream.sim.spead``): the digitiser id item (0x3101) says
which polarisation a heap belongs to (``dig_ids = (id of pol 0, id of pol 1)``),
heaps of other ids are counted foreign. The Rust capture (``_core.Capture``,
format ``spead``) places each heap by ``timestamp / samples_per_heap`` into chunks
of ``chunk_heaps`` heaps per polarisation, so the two polarisations of a chunk are
already paired by timestamp. A heap present in one polarisation but missing in the
other makes that time range invalid in both; missing heaps are invalid samples
(the engine flags every spectrum whose window touches them, and skips the heap
slots holding such spectra). Chunks in which nothing arrived are gaps in time,
which the engine also treats as invalid; a jump backwards in time (digitiser
re-sync) or forward by more than a few chunks starts a fresh engine on the new
time line (``timeline_restarts``), carrying over gains, delays and counters.

Each chunk is unpacked (8, 10, 12 or 16-bit big-endian bit stream,
``unpack_heaps``) and fed whole to the engine: chunks span several output heap
slots by default, because the GPU engine is efficient only on large blocks. The
last chunk is held back until the next arrives so that, at the end of a run, its
tail of heaps never sent can be cut rather than counted as lost.

Between blocks, a katcp control object (``voltstream.fengine.control``, optional)
applies queued gain and delay changes, says whether to send (``?capture-start`` /
``?capture-stop``; heaps made while stopped are counted, not sent) and receives the
counters for its sensors.

(Over 500 lines: the F-engine's report, its stage (FEngineFeed: pairing, time line,
restarts, control, output) and run_fengine; the chunk hand-off itself is
pipeline/gpu.py's StageRunner.)
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import STREAM_COUNTERS, counted, run_capture
from voltstream.capture.timeline import Gap
from voltstream.digitiser import unpack_heaps
from voltstream.errors import ConfigError
from voltstream.fengine.packets import PacketBatch, heap_count, release_batches
from voltstream.fengine.settings import FEngineSettings
from voltstream.pipeline.gpu import StageRunner, StatusLine
from voltstream.streams import spead_dig

if TYPE_CHECKING:  # CuPy at run time only: pipeline.gpu imports it lazily
    from voltstream.fengine.engines import FEngine, PackedFEngine

__all__ = [
    "FEngineReport",
    "apply_settings",
    "counters_dict",
    "default_chunk_heaps",
    "run_fengine",
]

#: The capture's kernel ring: it rides out a stalled capture thread for 60 ms at
#: 34 Gb/s (one MeerKAT antenna).
RING_BYTES = 256 << 20
#: The chunk pool (page-locked for the GPU): how long a stalled engine is ridden out,
#: 0.25 s at 34 Gb/s.
POOL_BYTES = 1 << 30
#: Bytes per polarisation a chunk aims at (``default_chunk_heaps``).
CHUNK_BYTES_PER_POL = 16 << 20
#: FEngineReport counters that go to the flat metrics as they are.
_REPORT_COUNTERS = (
    "heaps_paired",
    "heaps_absent",
    "timeline_restarts",
    "heaps_not_sent_capture_stopped",
    "samples_fed",
)


def default_chunk_heaps(heap_bytes: int) -> int:
    """Digitiser heaps per polarisation in a chunk: the power of two nearest to
    ``CHUNK_BYTES_PER_POL``, at least 64. The chunk is what the engine's Python
    handles at once, so its size is set in bytes (time), not in output heaps: at 34
    Gb/s a 2 x 20 MiB chunk lasts 10 ms, against about 1 ms of Python per chunk; a
    chunk of 4 output heap slots was 160 MiB at 32768 channels (6 in the pool)."""
    return max(64, 1 << round(math.log2(max(1.0, CHUNK_BYTES_PER_POL / heap_bytes))))


def counters_dict(counters: Any) -> dict:
    """An engine's counters as a plain dict (arrays become lists)."""
    if dataclasses.is_dataclass(counters):
        raw = {f.name: getattr(counters, f.name) for f in dataclasses.fields(counters)}
    elif isinstance(counters, dict):
        raw = dict(counters)
    else:
        raw = dict(vars(counters))
    return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in raw.items()}


def _add_counts(total: dict, more: dict) -> dict:
    out = dict(total)
    for k, v in more.items():
        if k in out and isinstance(v, list):
            out[k] = [a + b for a, b in zip(out[k], v, strict=False)]
        elif k in out and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = out[k] + v
        else:
            out.setdefault(k, v)
    return out


def apply_settings(engine: FEngine, gains: dict | None = None, delays: dict | None = None) -> None:
    """Applies ``{pol: gains}`` and ``{pol: DelayModel}`` (``control.load_settings``)."""
    for pol, g in (gains or {}).items():
        engine.set_gains(g, pol=int(pol))
    for pol, model in (delays or {}).items():
        engine.set_delay_model(int(pol), model)


@dataclass
class FEngineReport:
    """Every counter of a run: capture, pairing, engine, output, control."""

    listen: str
    address: str = ""
    device: str = "cpu"
    duration_s: float = 0.0
    interrupted: bool = False
    capture: dict = field(default_factory=dict)
    chunks: int = 0
    blocks: int = 0
    samples_fed: int = 0
    heaps_paired: int = 0
    heaps_unpaired: list[int] = field(default_factory=lambda: [0, 0])
    heaps_absent: int = 0
    timeline_restarts: int = 0
    chunks_out_of_order: int = 0
    engine: dict = field(default_factory=dict)
    heaps_not_sent_capture_stopped: int = 0
    control_updates: int = 0
    output: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n")

    def summary_lines(self) -> list[str]:
        cap, eng, out = self.capture, self.engine, self.output
        lines = [
            f"fengine ({self.device}) on {self.address or self.listen}: "
            f"{self.duration_s:.2f} s, "
            f"{counted(self.chunks, 'chunk')}, {counted(self.blocks, 'block')}, "
            f"{self.samples_fed} samples per pol" + (" (interrupted)" if self.interrupted else "")
        ]
        for s in cap.get("streams", []):
            pol = s.get("stream", "?")
            lines.append(
                f"  input pol {pol}: " + "  ".join(f"{k}={s.get(k, 0)}" for k in STREAM_COUNTERS)
            )
        lines.append(
            f"  input: malformed={cap.get('malformed', 0)}  foreign={cap.get('foreign', 0)}  "
            f"kernel_drops={cap.get('kernel_drops', 0)}  resyncs={cap.get('resyncs', 0)}  "
            f"chunks_dropped={cap.get('chunks_dropped', 0)}"
        )
        lines.append(
            f"  pairing: heaps_paired={self.heaps_paired}  "
            f"heaps_only_in_pol0={self.heaps_unpaired[0]}  "
            f"heaps_only_in_pol1={self.heaps_unpaired[1]}  heaps_absent={self.heaps_absent}  "
            f"timeline_restarts={self.timeline_restarts}  "
            f"chunks_out_of_order={self.chunks_out_of_order}"
        )
        sat = eng.get("saturated", [0, 0])
        lines.append(
            f"  engine: spectra={eng.get('spectra', 0)}  "
            f"flagged_spectra={eng.get('flagged_spectra', 0)}  "
            f"heaps_made={eng.get('heaps_made', 0)}  heaps_skipped={eng.get('heaps_skipped', 0)}  "
            f"saturated_pol0={sat[0]}  saturated_pol1={sat[1]}"
        )
        extra = {
            k: v
            for k, v in eng.items()
            if k not in ("spectra", "flagged_spectra", "heaps_made", "heaps_skipped", "saturated")
        }
        if extra:
            lines.append("  engine (more): " + "  ".join(f"{k}={v}" for k, v in extra.items()))
        lines.append(
            f"  output: heaps_sent={out.get('heaps_sent', 0)}  "
            f"packets_sent={out.get('packets_sent', 0)}  "
            f"MB_sent={out.get('bytes_sent', 0) / 1e6:.1f}  "
            f"descriptor_heaps={out.get('descriptor_heaps_sent', 0)}  "
            f"stop_heaps={out.get('stop_heaps_sent', 0)}  "
            f"send_errors={out.get('send_errors', 0)}  "
            f"heaps_not_sent_capture_stopped={self.heaps_not_sent_capture_stopped}"
        )
        if out.get("heaps_per_destination"):
            lines.append(
                "  output per destination: "
                + "  ".join(str(n) for n in out.get("heaps_per_destination", []))
            )
        if out.get("bytes_written"):
            lines.append(
                f"  file: heaps_written={out.get('heaps_written', 0)}  "
                f"MB_written={out.get('bytes_written', 0) / 1e6:.1f}"
            )
        if out.get("last_error"):
            lines.append(f"  last send error: {out['last_error']}")
        if self.control_updates:
            lines.append(f"  control: {self.control_updates} gain/delay updates applied")
        return lines


class FEngineFeed:
    """The F-engine as a ``StageRunner``'s stage: chunks in, engine blocks out
    (pairing, valid masks, time line, control, output). A GPU engine that takes our
    packed bytes copies straight from the capture's pool (``pinned``); any other gets
    a host copy and the chunk goes back at once."""

    def __init__(
        self,
        engine: FEngine,
        output: Any,
        report: Any,
        *,
        bits: int,
        samples_per_heap: int,
        control: Any,
        factory: Any,
        max_gap: int,
        stats: Any,
    ) -> None:
        self.engine, self.output, self.report = engine, output, report
        self.bits, self.sph = bits, samples_per_heap
        self.heap_bytes = samples_per_heap * bits // 8
        self.control, self.factory, self.max_gap = control, factory, max_gap
        self.stats = stats  # the capture's stats() for the sensors
        self.next_ts: int | None = None
        self.retired: dict = {}
        self.last_sensors = 0.0
        # The GPU engine copies blocks straight from the capture's pool: the runner
        # page-locks the pool for it and holds each block until its copy completed.
        self.pinned = self._packed() and callable(
            getattr(self.engine, "process_packed_async", None)
        )
        if self.pinned:
            self._packets(self.engine)

    def warm_up(self, samples: int) -> None:
        """A GPU engine's kernels compiled and plans made, before the capture opens."""
        if self.pinned and callable(getattr(self.engine, "warm_up", None)):
            cast("PackedFEngine", self.engine).warm_up(samples)

    def busy_ms(self) -> float:
        """The GPU time this engine's kernels took so far (0 for the CPU engine)."""
        timing = getattr(self.engine, "timing", None)
        return 0.0 if timing is None else 1e3 * float(timing["gpu_busy_s"])

    def _packets(self, engine: Any) -> None:
        """Has a GPU engine lay its heaps out as the output's packets (no host copy of
        the payloads; ``voltstream.fengine.packets``)."""
        if self.output is not None and callable(getattr(engine, "emit_packets", None)):
            engine.emit_packets(self.output.packet_format(engine.feng_id))

    def feed(self, item: Any) -> Any:
        """A timeline block (both polarisations of one chunk id) or gap; gaps need
        nothing: the next block's time stamp says where it starts. Returns the copy's
        event for a block the GPU engine copies from the pool, else None (released)."""
        if isinstance(item, Gap):
            return None
        self.report.chunks += 1
        ppc = item.present.shape[1]
        ts = (item.chunk_id * ppc + item.first) * self.sph
        present = item.present[:, item.first : item.stop]
        rows = item.rows(self.heap_bytes)[:, item.first * self.heap_bytes : item.stop
                                           * self.heap_bytes]  # fmt: skip
        if not self.pinned:  # a copy either way: the chunk can go back now
            samples = rows.copy() if self._packed() else unpack_heaps(
                rows.reshape(2, -1, self.heap_bytes), self.bits)  # fmt: skip
            del rows
            item.release()
            return self._block(ts, samples, present)
        return self._block(ts, rows, present, item)

    def finish(self) -> None:
        self.flush()

    def _packed(self) -> bool:
        """Whether the engine takes packed bytes of our sample width."""
        return (
            callable(getattr(self.engine, "process_packed", None))
            and getattr(self.engine, "sample_bits", None) == self.bits
        )

    def _block(self, ts: int, samples: np.ndarray, present: np.ndarray, block: Any = None) -> Any:
        """Feeds one chunk: samples (2, nheaps, sph) int16 or (2, nheaps * heap bytes)
        uint8 (packed), present (2, nheaps). ``block``: the samples are rows over its
        pool memory; returns the event of the engine's copy from them (the runner
        hands the block back once it completed), None when released here."""
        event = None
        if self.next_ts is not None and (ts < self.next_ts or ts - self.next_ts > self.max_gap):
            if not self._restart() and ts < self.next_ts:
                self.report.chunks_out_of_order += 1
                if block is not None:
                    block.release()
                return None
        both = present.all(axis=0)
        self.report.heaps_paired += int(both.sum())
        only = present & ~present[::-1]
        self.report.heaps_unpaired[0] += int(only[0].sum())
        self.report.heaps_unpaired[1] += int(only[1].sum())
        self.report.heaps_absent += int((~present.any(axis=0)).sum())
        nheaps = present.shape[1]
        coarse = None if both.all() else both  # one flag per heap

        def per_sample() -> (
            np.ndarray | None
        ):  # only engines without valid_step need flags per sample
            return None if coarse is None else np.repeat(coarse, self.sph)

        x = samples.reshape(2, -1)
        if coarse is not None and block is None:
            x = x.copy()
            x.reshape(2, nheaps, -1)[:, ~both] = 0  # stale pool bytes: zero them
        if self.control is not None:
            self.report.control_updates += int(self.control.apply_pending(self.engine) or 0)
        if x.dtype == np.uint8 and self._packed():
            gpu = cast("PackedFEngine", self.engine)  # _packed: it takes our packed bytes
            if block is not None:
                # Invalid heaps keep their stale bytes: the engine flags every
                # spectrum that touches them, so they never reach an output heap.
                heaps = gpu.process_packed_async(x, ts, coarse, valid_step=self.sph)
                event = gpu.last_copy
                if self.output is not None:  # payloads are views the next call reuses
                    heaps = [
                        h if isinstance(h, PacketBatch) else
                        dataclasses.replace(h, payload=h.payload.copy()) for h in heaps
                    ]  # fmt: skip
            else:
                heaps = gpu.process_packed(np.ascontiguousarray(x), ts, per_sample())
        else:
            if x.dtype == np.uint8:  # the engine changed (restart): unpack now
                x = unpack_heaps(x.reshape(2, nheaps, -1), self.bits).reshape(2, -1)
                if block is not None:
                    block.release()
            heaps = self.engine.process(x, ts, per_sample())
        n = nheaps * self.sph
        self.report.blocks += 1
        self.report.samples_fed += n
        self.next_ts = ts + n
        self._send(heaps)
        return event

    def _send(self, heaps: Any) -> None:
        if heaps:
            if self.control is not None and not self.control.capturing.is_set():
                self.report.heaps_not_sent_capture_stopped += heap_count(heaps)
                release_batches(heaps)
            elif self.output is not None:
                self.output.submit(heaps)
            else:
                release_batches(heaps)
        if self.control is not None and time.monotonic() - self.last_sensors > 0.5:
            self.publish()

    def flush(self) -> None:
        """Heaps an engine holds back (a pipelined GPU engine may), at the end."""
        flush = getattr(self.engine, "flush", None)
        if callable(flush):
            self._send(flush() or [])

    def _restart(self) -> bool:
        """A new time line: the engine's own ``restart`` (the GPU engine keeps its
        buffers, plans and pools: a restart must cost far less than the chunks that
        caused it, or one stall becomes many), else a new engine from the factory with
        the old one's gains, delays and counters. False when neither is possible."""
        old = self.engine
        if callable(getattr(old, "restart", None)):
            self.flush()
            cast("PackedFEngine", old).restart()
            self.report.timeline_restarts += 1
            return True
        if self.factory is None:
            return False
        self.flush()
        self.retired = _add_counts(self.retired, counters_dict(old.counters))
        new = self.factory()
        if hasattr(old, "gains"):
            new.set_gains(old.gains)
        for pol, model in enumerate(getattr(old, "delay_models", [])):
            new.set_delay_model(pol, model)
        if self.pinned:
            self._packets(new)
        self.engine = new
        self.report.timeline_restarts += 1
        return True

    def engine_counters(self) -> dict:
        counts = counters_dict(self.engine.counters)
        timing = getattr(self.engine, "timing", None)
        if timing is not None:  # where the time went: GPU kernels, host work, host waits
            counts |= {k: round(v, 4) if isinstance(v, float) else v for k, v in timing.items()}
        return _add_counts(counts, self.retired)

    def publish(self, capture: dict | None = None) -> None:
        self.last_sensors = time.monotonic()
        if capture is None:
            capture = self.stats()
        sent = self.output.counters.heaps_sent if self.output is not None else 0
        values = _sensor_values(self.report, self.engine_counters(), capture, sent)
        self.control.update_sensors(values)


def _sensor_values(report: FEngineReport, eng: dict, capture: dict, sent: int) -> dict:
    """Counters as katcp sensor values: numbers only, per-pol lists as ``name_polN``."""
    flat: dict = {}
    for k, v in eng.items():
        if isinstance(v, list):
            for i, x in enumerate(v):
                flat[f"{k}_pol{i}"] = x
        else:
            flat[k] = v
    totals = capture.get("totals", {})
    for k in (*STREAM_COUNTERS, "malformed", "foreign"):
        flat[k] = totals.get(k, capture.get(k, 0))
    for s in capture.get("streams", []):
        for k in STREAM_COUNTERS:
            flat[f"{k}_pol{s.get('stream', 0)}"] = s.get(k, 0)
    # The report's own counters under their own names (each name written once).
    for k in _REPORT_COUNTERS:
        flat[k] = getattr(report, k)
    flat["heaps_transmitted"] = sent
    return {
        k: v
        for k, v in flat.items()
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    }


def run_fengine(
    capture: CaptureSettings,
    settings: FEngineSettings,
    engine: Any,
    output: Any = None,
    *,
    duration_s: float | None = None,
    idle_timeout_s: float | None = None,
    control: Any = None,
    engine_factory: Any = None,
    on_start: Any = None,
    stop_event: threading.Event | None = None,
    status: bool = False,
    live_report: Any = None,
    status_label: str = "fengine",
) -> FEngineReport:
    """Runs the F-engine: the digitiser stream ``settings`` describe (ids, sample width,
    heap length), captured as ``capture`` says (address, engine, window, the capture
    thread's CPU), ``engine`` in the middle, ``output`` out. The chunk
    (``settings.chunk_heaps``), the pool and the kernel queue are sized here.

    ``engine`` has FEngineReference's interface (``make_engine`` with
    ``settings.engine_kwargs()``); ``output`` is a ``HeapOutput``
    (``settings.heap_output()``; started here, closed at the end) or None to only count.
    Stops after ``duration_s``, after ``idle_timeout_s`` without input once data has
    come, when ``stop_event`` is set, or on Ctrl-C (``report.interrupted``); with
    none of them it runs until interrupted. ``on_start(address)`` is called once the
    socket is bound, with the bound ``HOST:PORT`` (the capture may ask for port 0).
    ``status`` prints one line a second on stderr (Gb/s in and processed, pool fill,
    losses, GPU busy), beginning with ``status_label``. The capture thread's CPU
    (``capture.threads.cpus``) is pinned and the engine's Python keeps off it. A GPU
    engine is warmed up on blocks of zeros before the capture starts.
    ``engine_factory`` (no arguments, a fresh engine) lets the run survive a
    digitiser re-sync. ``live_report`` (the metrics board's
    ``watch``) is given a callable that returns the report so far, and
    ``report.as_dict`` at the end. ``settings.chunk_heaps``: digitiser heaps per
    polarisation per block, by default ``default_chunk_heaps`` (about 16 MiB per
    polarisation). An engine with ``process_packed`` and ``sample_bits`` equal to
    ``settings.sample_bits`` (the GPU engine) gets the packed heap bytes; any other
    gets int16 samples.
    """
    sample_bits, samples_per_heap = settings.sample_bits, settings.samples_per_heap
    nbytes = settings.heap_bytes
    ids = list(settings.dig_ids)
    for name, value in (("duration_s", duration_s), ("idle_timeout_s", idle_timeout_s)):
        if value is not None and not value > 0:
            raise ConfigError(f"{name}={value} must be positive")
    layout = getattr(engine, "layout", None)
    slot = layout.samples_per_heap if layout is not None else samples_per_heap
    chunk_heaps = settings.chunk_heaps
    if chunk_heaps is None:
        chunk_heaps = default_chunk_heaps(nbytes)
    chunk_heaps = int(chunk_heaps)
    from voltstream.fengine.engines import engine_device

    report = FEngineReport(listen=capture.network.bind, device=engine_device(engine))
    stream = spead_dig(
        digitiser_ids=ids, samples_per_heap=int(samples_per_heap), sample_bits=int(sample_bits)
    )
    window = capture.chunks.window_for(chunk_heaps)
    nchunks = max(window + 4, min(256, POOL_BYTES // (2 * chunk_heaps * nbytes)))
    capture = capture.replace(
        packets_per_chunk=chunk_heaps, nchunks=nchunks, queue_bytes=RING_BYTES
    )
    max_gap = 8 * max(chunk_heaps * samples_per_heap, slot)
    feeder = FEngineFeed(
        engine,
        output,
        report,
        bits=int(sample_bits),
        samples_per_heap=int(samples_per_heap),
        control=control,
        factory=engine_factory,
        max_gap=max_gap,
        stats=lambda: cap_stats(),
    )
    feeder.warm_up(chunk_heaps * int(samples_per_heap))  # before the socket opens
    registry = None
    if feeder.pinned:
        from voltstream.pipeline.gpu import HostRegistry

        registry = HostRegistry()
    line = StatusLine(status_label, nbytes) if status else None
    runner = StageRunner(feeder, nbytes, registry, line)

    def cap_stats() -> dict:  # the sensors' capture counters, once the capture is open
        return runner.cap.stats() if runner.cap is not None else {}

    if output is not None:
        output.start()

    def started() -> None:
        report.address = runner.cap.address or capture.network.bind
        if on_start is not None:
            on_start(report.address)

    clean = False
    try:
        run = run_capture(
            stream, capture, duration_s, idle_timeout_s=idle_timeout_s, on_start=started,
            consumer=runner, stop_event=stop_event, catch_interrupt=True,
            live_report=None if live_report is None else
            lambda _: live_report(_so_far(report, runner, feeder, output)),
        )  # fmt: skip
        clean = True
    finally:
        report.capture = runner.cap.stats() if runner.cap is not None else {}
        report.engine = feeder.engine_counters()
        if output is not None:
            try:
                output.close(send_stop=clean)
            finally:
                report.output = dataclasses.asdict(output.counters)
        if control is not None:
            feeder.publish(report.capture)
    report.interrupted = run.interrupted
    report.duration_s = run.duration_s
    if live_report is not None:
        live_report(report.as_dict)
    return report


def _so_far(report: FEngineReport, runner: StageRunner, feeder: FEngineFeed, output: Any) -> Any:
    """The report of a running F-engine, asked from another thread (a metrics scrape):
    the capture's, the engine's and the output's counters now, the pool's free chunks,
    the chunks whose copy to the GPU is in flight."""
    t0, pool = time.monotonic(), list[int]()  # the pool's size, once the capture started

    def now() -> dict:
        cap = runner.cap
        pool[:] = pool or [len(cap.chunk_buffers())]
        out = {} if output is None else dataclasses.asdict(output.counters)
        live = dataclasses.replace(report, capture=cap.stats(), engine=feeder.engine_counters(),
                                   output=out, duration_s=time.monotonic() - t0)  # fmt: skip
        now = live.as_dict() | {"free_chunks": cap.free_chunks(), "pool_chunks": pool[0]}
        if feeder.pinned:  # the GPU engine copies straight from the pool
            now["copies_in_flight"] = runner.handoff.in_flight
        return now

    return now
