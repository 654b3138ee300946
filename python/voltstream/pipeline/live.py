"""Live folding, capture and fold in one process (`voltstream fold --listen`).

On the GPU (:func:`fold_live_gpu`) the capture's chunks go to the GPU folder as
handles, through the one host-to-GPU path of pipeline/gpu.py: no sample is touched
on the host. On the CPU (:class:`LiveReader`) a capture running in a background
thread is seen by the NumPy fold pipeline as a reader (`.obs`, `.read_blocks`),
with the same code as a file.

The queue between the two is bounded. When the fold falls behind, the capture
thread waits on the queue, the engine's chunk ring fills, and the engine drops
whole chunks and counts them (`dropped`): the capture itself never blocks and
nothing is lost silently.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import CaptureReport
from voltstream.fold.reference import FoldSettings
from voltstream.formats import StreamFormat
from voltstream.observation import FoldedArchive, Observation
from voltstream.pipeline.interfaces import ChunkSource

_END = object()

#: After a stop request, how long the CPU fold goes on folding chunks already queued
#: (captured before the stop) before it counts the rest as not folded: the part of
#: the 5 s stop bound (service/shutdown.py) left to the fold, the archive and report.
STOP_FOLD_S = 2.0


class LiveReader:
    """Captures `fmt` as `capture` says for `duration_s` and yields (complex64 block,
    valid); from `source` (a running chunk source: a recording's written chunks)
    instead of a capture of its own when given."""

    def __init__(
        self,
        fmt: StreamFormat,
        capture: CaptureSettings,
        duration_s: float,
        obs: Observation,
        idle_timeout_s: float | None = None,
        max_queued_chunks: int = 64,
        source: ChunkSource | None = None,
        stop_event: threading.Event | None = None,
        live_report: Any = None,
        on_chunk: Callable[[int], None] | None = None,
        tap: Callable[[Any], Any] | None = None,
    ) -> None:
        self.fmt, self.capture, self.obs, self.source = fmt, capture, obs, source
        #: run_capture's ``tap``: what takes the capture's items in front of this
        #: reader's sink (the live search's voltage ring).
        self.tap = tap
        #: Called with each chunk's sample count as the capture hands it over, in the
        #: capture's thread (the live search's arrival times, pipeline/live_search.py).
        self.on_chunk = on_chunk
        self.stop_event = stop_event
        #: Samples captured but not folded because a stop came first (the bound on
        #: a stop's time: the queue may hold seconds of work when the fold lags).
        self.samples_not_folded = 0
        self.duration_s, self.idle_timeout_s = duration_s, idle_timeout_s
        self.live_report = live_report  # run_capture's: the metrics board's watch
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued_chunks)
        self.report: CaptureReport | None = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voltstream-capture", daemon=True)

    def start(self) -> None:
        """Binds and starts capturing; raises here if the capture cannot start."""
        self._thread.start()
        self._started.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        from voltstream.capture.run import run_capture

        try:
            self.report = run_capture(
                self.fmt,
                self.capture,
                self.duration_s,
                sink=self._sink,
                idle_timeout_s=self.idle_timeout_s,
                on_start=self._started.set,
                source=self.source,
                stop_event=self.stop_event,
                live_report=self.live_report,
                tap=self.tap,
            )
        except BaseException as e:  # handed to the reading thread
            self.error = e
        finally:
            self._started.set()
            self._queue.put(_END)

    def _sink(self, samples: np.ndarray, valid: np.ndarray) -> None:
        if self.on_chunk is not None:
            self.on_chunk(samples.shape[0])
        self._queue.put((samples, valid))

    def read_blocks(self, nsamp: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yields (complex64 (n, nchan, npol), valid (n,)) blocks of `nsamp` samples
        (the last may be shorter) until the capture ends. After a stop request the
        chunks still queued are folded for ``STOP_FOLD_S`` more, then counted
        (``samples_not_folded``), not folded: a stop takes a bounded time even when
        the fold lags the capture by a long queue."""
        parts, valid_parts, have = [], [], 0
        stopped_at: float | None = None
        while True:
            item = self._queue.get()
            if item is _END:
                break
            if stopped_at is None and self.stop_event is not None and self.stop_event.is_set():
                stopped_at = time.monotonic()
            if stopped_at is not None and time.monotonic() - stopped_at > STOP_FOLD_S:
                self.samples_not_folded += item[0].shape[0]
                continue
            samples, valid = item
            if samples.dtype == np.int8:  # 8-bit: int8 re/im; packed VDIF: complex64
                samples = samples.astype(np.float32).view(np.complex64)[..., 0]
            parts.append(samples)
            valid_parts.append(valid)
            have += samples.shape[0]
            while have >= nsamp:
                block, vblock = np.concatenate(parts), np.concatenate(valid_parts)
                yield block[:nsamp], vblock[:nsamp]
                parts, valid_parts = [block[nsamp:]], [vblock[nsamp:]]
                have -= nsamp
        if have:
            yield np.concatenate(parts), np.concatenate(valid_parts)
        self._thread.join()
        if self.report is not None and self.samples_not_folded:
            self.report.samples_not_folded = self.samples_not_folded
        if self.error is not None:
            raise self.error


#: Default size of one GPU chunk (all streams) and of the capture's pool.
GPU_CHUNK_BYTES = 32 << 20
GPU_POOL_MB = 1024


@dataclass(frozen=True)
class LiveGpuRun:
    """How a live GPU stage's capture runs (`fold_live_gpu`, pipeline/live_filterbank.py;
    its chunks and pool are sized apart): the idle timeout, the status line or none,
    what to call once the socket is open, an event that ends the capture early and a
    live report's watcher (run_capture)."""

    idle_timeout_s: float | None = None
    status: bool = True
    on_start: Any = None
    stop_event: threading.Event | None = None
    live_report: Any = None


#: Every option of LiveGpuRun at its default.
LIVE_GPU_RUN = LiveGpuRun()

T = TypeVar("T")


def capture_to_gpu(
    label: str,
    eng: Any,
    fmt: StreamFormat,
    capture: CaptureSettings,
    duration_s: float,
    run: LiveGpuRun,
    finish: Callable[[], T],
    source: ChunkSource | None = None,
    slot_len: int | None = None,
) -> tuple[T, CaptureReport]:
    """Captures into the GPU stage ``eng`` (chunks straight from the pool, pipeline/gpu.py)
    and then ``finish``es it (its last work on the GPU, its product); that product and
    the capture report, with the stage's counters and how busy the GPU and host were.
    ``source``: a running chunk source instead of a capture of its own."""
    from voltstream.capture.run import run_capture
    from voltstream.pipeline.gpu import HostRegistry, StatusLine, gpu_stage_runner

    line = StatusLine(label, fmt.payload_len) if run.status else None
    consumer = gpu_stage_runner(eng, fmt, HostRegistry(), line, slot_len)
    t0 = time.monotonic()
    report = run_capture(
        fmt, capture, duration_s,
        idle_timeout_s=run.idle_timeout_s, on_start=run.on_start, consumer=consumer,
        source=source, stop_event=run.stop_event, live_report=run.live_report,
    )  # fmt: skip
    product = finish()
    wall = time.monotonic() - t0
    busy = eng.busy_ms()
    report.pipeline = consumer.as_dict()
    report.pipeline.update(
        packets_per_chunk=capture.chunks.packets_per_chunk,
        gpu_busy_ms=busy,
        gpu_busy_pct=100.0 * busy / 1000.0 / max(wall, 1e-9),
        host_ms_per_block=1e3 * eng.host_busy_s / max(eng.blocks_fed, 1),
        host_wait_s=eng.host_wait_s,
        block_ms=1e3 * eng.chunk * fmt.tsamp_s,
    )
    return product, report


@dataclass(frozen=True)
class GpuChunking:
    """How a live GPU stage's capture is chunked (`--packets-per-chunk`, `--buffer-mb`):
    ``packets_per_chunk`` packets a chunk (None: `sized` picks about 32 MiB) and a
    pool of ``pool_mb`` MiB."""

    packets_per_chunk: int | None = None
    pool_mb: float = GPU_POOL_MB

    def sized(self, fmt: StreamFormat, capture: CaptureSettings) -> tuple[int, int]:
        """(packets per chunk, pool chunks): chunks of about 32 MiB unless given (the
        per-chunk Python cost is then far below a chunk's duration even at 100 Gb/s),
        a pool of ``pool_mb`` MiB but at least ``capture``'s reorder window (in chunks
        of the size chosen here, as the run will count it) + 4 chunks. (A CPU cluster
        node sizes its pool with it too, its chunks given.)"""
        per_packet = fmt.payload_len * fmt.streams
        ppc = self.packets_per_chunk
        if ppc is None:
            ppc = max(16, 1 << int(np.log2(max(1, GPU_CHUNK_BYTES // per_packet))))
        window = capture.chunks.window_for(ppc, fmt.packets_per_second)
        nchunks = max(window + 4, int(self.pool_mb * 2**20 // (ppc * per_packet)))
        return int(ppc), int(nchunks)


GPU_CHUNKING = GpuChunking()


def live_gpu_folder(
    fmt: StreamFormat,
    capture: CaptureSettings,
    duration_s: float | None,
    obs: Observation,
    settings: FoldSettings,
    chunking: GpuChunking = GPU_CHUNKING,
    slot_len: int | None = None,
    **plan_kw: Any,
) -> tuple[Any, CaptureSettings]:
    """The GPU fold engine of a live capture, and the capture's settings for it: the
    one way a live GPU fold is sized (`fold_live_gpu`, a cluster node's `GpuRows`).

    Chunks and pool as ``chunking`` sizes them, whatever ``capture`` says of chunks; the engine
    reads those chunks as they lie (``fmt.chunk_layout``) and is warmed up now
    (kernels compiled, FFT plans made, accumulators for ``duration_s``), before the
    socket opens, so the first chunks do not wait on it. ``plan_kw``: the fold plan's
    band options (``band_freqs_mhz``, ``f_ref_mhz``: a cluster node's). ``slot_len``:
    a chunk source of whole packets (a recording's), its bytes per packet slot."""
    from voltstream.fold.gpu import GpuFolder

    ppc, nchunks = chunking.sized(fmt, capture)
    nsamp = ppc * fmt.samples_per_packet
    slot = slot_len or fmt.payload_len
    eng = GpuFolder.from_settings(
        obs, settings, packed=fmt.chunk_layout(ppc, slot_len), chunk_samples=nsamp,
        raw_bytes=fmt.streams * ppc * slot, **plan_kw,
    )  # fmt: skip
    eng.warm_up(nsamp, duration_s)
    return eng, capture.replace(packets_per_chunk=ppc, nchunks=nchunks)


def fold_live_gpu(
    fmt: StreamFormat, capture: CaptureSettings, duration_s: float, obs: Observation,
    settings: FoldSettings, chunking: GpuChunking = GPU_CHUNKING,
    run: LiveGpuRun = LIVE_GPU_RUN, source: ChunkSource | None = None,
) -> tuple[FoldedArchive, Any]:  # fmt: skip
    """Captures and folds on the GPU in one process, chunks straight from the capture's
    pool to the GPU (pipeline/gpu.py); returns (archive, capture report).

    The folder is made by `live_gpu_folder` (warmed up before the socket opens;
    its chunk is the capture's, as ``chunking`` sizes it, not
    ``settings.block_samples``). ``run.stop_event``
    ends the capture early (run_capture); the archive holds what was folded.
    Real VDIF (``fmt.real``): ``obs`` is the complex observation (``dsp.real``
    ``complex_observation``); the chunks are converted on the GPU (fold/gpu_real.py).
    ``source``: a running chunk source instead of a capture of its own (a recording's
    written chunks, whole packets: its chunk size and slots are the folder's).
    """
    slot_len = None
    if source is not None:
        chunking = dataclasses.replace(chunking, packets_per_chunk=source.packets_per_chunk)
        slot_len = getattr(source, "slot_len", None)
    eng, capture = live_gpu_folder(fmt, capture, duration_s, obs, settings, chunking, slot_len)
    return capture_to_gpu("fold", eng, fmt, capture, duration_s, run, eng.finish, source,
                          slot_len)  # fmt: skip
