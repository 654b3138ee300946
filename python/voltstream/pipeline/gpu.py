"""The one path from host blocks to a GPU stage: registration, copy, release on the event.

Sources (a live capture's chunk timeline, a file reader) hand out blocks of bytes that
already sit in their final host memory: the capture's chunk pool, a file reader's
buffers. This module moves them to the GPU without touching a sample on the host:

- :class:`HostRegistry` page-locks the source's buffers once, at start-up
  (``cudaHostRegister``), so each block's asynchronous host-to-GPU copy reads the
  block itself, at full PCIe speed, with no staging copy;
- the GPU stage (a ``GpuFolder`` today; its ``feed_block`` queues the copy of a
  block's ``parts`` and its kernels, which read the block's layout as it is) returns
  the CUDA event that completes when the copy has;
- :class:`Handoff` holds each block until that event completes and then releases it
  to its pool, in order. A block goes back when its copy is done, not when its
  processing is: the pool only has to cover the copies in flight.

Python decides per block and never reads its samples. Lost packets travel as a
per-sample mask built from the presence bits (only for blocks that lack some).

:class:`StageRunner` is the chunk-timeline consumer (``run_capture(consumer=...)``)
that drives a live product's stage this way, and prints the live status line: the
fold (:class:`ChunkFeed` over its ``GpuStage``), the F-engine (``fengine/pipeline.py``)
and a cluster node's fold alike. A file is a source of the same runner
(:meth:`StageRunner.run` over a ``FileSource``'s ``HostBlock`` items, :class:`BlockFeed`):
the GPU file fold has no hand-off loop of its own.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import deque
from typing import Any

import numpy as np

from voltstream.capture.timeline import Gap
from voltstream.pipeline.interfaces import ChunkStage, GpuStage

__all__ = [
    "BlockFeed", "ChunkFeed", "Handoff", "HostRegistry", "StageRunner", "StatusLine",
    "gpu_stage_runner", "release_pool",
]  # fmt: skip


class Handoff:
    """Blocks whose copies are in flight, each released once its event has completed.

    ``done(event)`` asks without waiting (CuPy: ``event.done``), ``wait(event)`` waits
    (``event.synchronize()``). Releases happen in the order blocks were held, so a
    block is never released before an earlier one (events of one copy stream complete
    in order anyway).
    """

    def __init__(self, done: Any = None, wait: Any = None) -> None:
        self._done = done or (lambda ev: ev.done)
        self._wait = wait or (lambda ev: ev.synchronize())
        self._q: deque = deque()
        self.held = 0
        self.released = 0
        self.max_in_flight = 0

    @property
    def in_flight(self) -> int:
        return len(self._q)

    def hold(self, block: Any, event: Any) -> None:
        self._q.append((block, event))
        self.held += 1
        self.max_in_flight = max(self.max_in_flight, len(self._q))

    def poll(self) -> int:
        """Releases every block at the head whose copy has completed; returns how many."""
        n = 0
        while self._q and self._done(self._q[0][1]):
            self._q.popleft()[0].release()
            n += 1
        self.released += n
        return n

    def wait_one(self) -> None:
        """Waits for the oldest copy in flight and releases its block."""
        if self._q:
            block, ev = self._q.popleft()
            try:
                self._wait(ev)
            finally:
                block.release()
                self.released += 1

    def drain(self) -> None:
        """Waits for every copy in flight and releases its block."""
        while self._q:
            self.wait_one()


def release_pool(handoff: Handoff, registry: HostRegistry | None) -> None:
    """The end of a stage, after errors too: every block back, the pool unregistered."""
    try:
        handoff.drain()
    finally:
        if registry is not None:
            registry.close()


class HostRegistry:
    """Host buffers page-locked for the GPU (cudaHostRegister) for the life of a run.

    Registration can fail (a locked-memory limit, no GPU): the copies then still work,
    from pageable memory and slower, and ``warning`` says why; the report shows it.
    """

    def __init__(self, runtime: Any = None) -> None:
        if runtime is None:
            import cupy

            runtime = cupy.cuda.runtime
        self.rt = runtime
        self.addresses: list[int] = []
        self.nbytes = 0
        self.warning: str | None = None

    def register(self, buffers: Any) -> None:
        for addr, nbytes in buffers:
            try:
                self.rt.hostRegister(int(addr), int(nbytes), 0)
            except Exception as e:  # CUDA errors have no common base class in CuPy
                self.warning = f"cannot page-lock {nbytes} bytes for the GPU ({e}); " \
                               "copies run from pageable memory"  # fmt: skip
                warnings.warn(self.warning, stacklevel=2)
                return
            self.addresses.append(int(addr))
            self.nbytes += int(nbytes)

    def close(self) -> None:
        while self.addresses:
            addr = self.addresses.pop()
            try:
                self.rt.hostUnregister(addr)
            except Exception:  # already gone with its context; nothing to undo
                pass


class StatusLine:
    """One line per second on stderr while a live stage runs: Gb/s in and processed,
    the pool's fill, losses so far, how busy the GPU was."""

    def __init__(
        self, label: str, payload_len: int, interval_s: float = 1.0, stream: Any = None
    ) -> None:
        self.label, self.payload_len, self.interval = label, payload_len, interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = self.last = time.monotonic()
        self.last_received = 0
        self.last_fed = 0
        self.lines = 0

    def tick(self, cap: Any, consumer: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        dt, self.last = now - self.last, now
        st = cap.stats()
        tot = st["totals"]
        received = int(tot["received"])
        gin = 8 * (received - self.last_received) * self.payload_len / dt / 1e9
        gout = 8 * (consumer.bytes_fed - self.last_fed) / dt / 1e9
        self.last_received, self.last_fed = received, consumer.bytes_fed
        pool = consumer.pool_chunks or 1
        fill = 100.0 * (1 - cap.free_chunks() / pool)
        busy = consumer.gpu_busy(dt)
        lost = int(tot["missing"]) + int(tot["late"]) + int(st["kernel_drops"])
        print(
            f"{self.label} {now - self.t0:6.1f} s  in {gin:6.2f} Gb/s  processed {gout:6.2f} Gb/s"
            f"  pool {fill:3.0f}% full  dropped {tot['dropped']}  lost {lost}"
            + ("" if busy is None else f"  GPU busy {busy:3.0f}%")
            # Processed counts whole chunks: none yet while the first one fills.
            + ("  (first chunk still filling)" if received and not consumer.bytes_fed else ""),
            file=self.stream,
            flush=True,
        )
        self.lines += 1


class StageRunner:
    """The one way a live product takes the capture's chunks (``run_capture(consumer=)``):
    the fold, the F-engine and a cluster node's fold are its stages.

    It owns what every stage shares: page-locking the capture's pool (``registry``)
    for a stage that copies straight from it (``stage.pinned``), holding each block until its
    copy's event completed (``Handoff``), the status line, GPU busy time, the end
    (``finish``: the stage completes, every block goes back) and the counters. The
    stage only feeds: ``stage.feed(item)`` takes a timeline ``Block`` or ``Gap`` and
    returns the CUDA event after which the block may go back to the pool, or None
    when the stage gave it back itself (a copy made on the host, a block refused).
    ``stage.finish()`` completes the work in flight; ``stage.busy_ms()`` (optional)
    is the GPU time spent so far; ``stage.as_dict()`` (optional) its own counters.
    ``payload_len``: bytes per packet, for the Gb/s the status line shows.

    Its sources: a capture, through ``CaptureRun`` (which calls ``attach``, ``take``,
    ``poll``, ``finish`` and ``close``), or any iterable of blocks that states its
    buffers (``chunk_buffers()``) through :meth:`run`: a file's ``FileSource``. A
    block that states its ``nbytes`` (a file's) is counted by it; a capture's block
    by packets x payload x streams.
    """

    def __init__(
        self,
        stage: ChunkStage,
        payload_len: int,
        registry: HostRegistry | None = None,
        status: StatusLine | None = None,
        handoff: Handoff | None = None,
    ) -> None:
        self.stage, self.payload_len = stage, payload_len
        self.registry, self.status = registry, status
        self.handoff = handoff or Handoff()
        self.busy = getattr(stage, "busy_ms", None)  # callable() -> GPU ms so far, or None
        self.busy_ms_last = 0.0
        self.cap: Any = None
        self.pool_chunks = 0
        self.blocks = 0
        self.gaps = 0
        self.bytes_fed = 0
        self.first_take_at: float | None = None  # perf_counter() of the first item

    def attach(self, cap: Any) -> None:
        """The source's buffers, page-locked once for a stage that copies from them
        (unless the source made them page-locked itself: ``page_locked``)."""
        self.cap = cap
        buffers = cap.chunk_buffers()
        self.pool_chunks = len(buffers)
        pin = self.stage.pinned and not getattr(cap, "page_locked", False)
        if pin and self.registry is not None:
            self.registry.register(buffers)

    def run(self, source: Any, after_each: Any = None) -> None:
        """Drives the stage from an iterable source of blocks (a ``FileSource``) as
        ``CaptureRun`` drives it from a capture's timeline: attach, take each block and
        poll (buffers go back before the source is asked for more), finish; whatever
        happens, every block back and the buffers unregistered before the source
        frees them. ``after_each()``: after each block (a progress bar)."""
        try:
            self.attach(source)
            for item in source:
                self.take(item)
                self.poll()
                if after_each is not None:
                    after_each()
            self.finish()
        finally:
            self.close()

    def take(self, item: Any) -> None:
        if self.first_take_at is None:
            self.first_take_at = time.perf_counter()
        if isinstance(item, Gap):
            self.stage.feed(item)
            self.gaps += 1
            return
        try:
            event = self.stage.feed(item)
        except BaseException:
            item.release()
            raise
        if event is not None:
            self.handoff.hold(item, event)
        self.blocks += 1
        nbytes = getattr(item, "nbytes", None)
        if nbytes is None:  # a capture's block: packets of every stream
            nbytes = item.packets * self.payload_len * item.present.shape[0]
        self.bytes_fed += nbytes

    def poll(self) -> None:
        self.handoff.poll()
        if self.status is not None and self.cap is not None:
            self.status.tick(self.cap, self)

    def gpu_busy(self, dt_s: float) -> float | None:
        if self.busy is None:
            return None
        ms = self.busy()
        pct = 100.0 * (ms - self.busy_ms_last) / (1000.0 * dt_s)
        self.busy_ms_last = ms
        return min(100.0, pct)

    def finish(self) -> None:
        self.stage.finish()
        self.handoff.drain()

    def close(self) -> None:
        """Releases whatever is still held and unregisters the pool (also after errors)."""
        release_pool(self.handoff, self.registry)

    def as_dict(self) -> dict:
        own = getattr(self.stage, "as_dict", None)
        return {
            "blocks": self.blocks,
            "gaps": self.gaps,
            "bytes_fed": self.bytes_fed,
            **(own() if callable(own) else {}),
            "pool_chunks": self.pool_chunks,
            "max_copies_in_flight": self.handoff.max_in_flight,
            "registered_bytes": None if self.registry is None else self.registry.nbytes,
            "registration_warning": None if self.registry is None else self.registry.warning,
        }


class ChunkFeed:
    """A ``GpuStage`` (the fold engine) as a ``StageRunner``'s stage: each block's
    packet runs in the pool (``parts``) and, where packets are missing, a per-sample
    mask from the presence bits; a gap as samples that never arrived. ``fmt`` gives
    samples per packet and the payload length; ``slot_len`` the bytes per packet slot
    where a slot holds a whole packet (a recording's chunks): the samples start at the
    first payload, ``slot_len - payload_len`` bytes in."""

    pinned = True  # the engine's copies read the chunks where the capture put them

    def __init__(self, stage: GpuStage, fmt: Any, slot_len: int | None = None) -> None:
        self.stage, self.fmt = stage, fmt
        self.slot_len = slot_len or fmt.payload_len
        self.busy_ms = getattr(stage, "busy_ms", None)
        self.samples_fed = 0
        self.lost_samples = 0

    def feed(self, item: Any) -> Any:
        spp = self.fmt.samples_per_packet
        n = item.packets * spp
        self.samples_fed += n
        if isinstance(item, Gap):
            self.stage.feed_gap(n)
            self.lost_samples += n
            return None
        ok = item.valid_packets()
        valid = None if ok is None else np.repeat(ok, spp)
        if valid is not None:
            self.lost_samples += n - int(np.count_nonzero(valid))
        head = self.slot_len - self.fmt.payload_len
        return self.stage.feed_block(
            item.parts(self.slot_len), n, item.first * self.slot_len + head, valid
        )

    def finish(self) -> None:
        self.stage.synchronize()

    def as_dict(self) -> dict:
        return {"samples_fed": self.samples_fed, "lost_samples": self.lost_samples}


class BlockFeed:
    """A ``GpuStage`` as a ``StageRunner``'s stage for a file source's ``HostBlock`` items
    (pipeline/file_source.py): each block's runs (``parts``), sample count, where its
    samples start (``skip``) and lost samples (``valid``), as the source states them.
    """

    pinned = True  # the engine's copies read the source's buffers as they are

    def __init__(self, stage: GpuStage) -> None:
        self.stage = stage
        self.busy_ms = getattr(stage, "busy_ms", None)
        self.samples_fed = 0
        self.lost_samples = 0

    def feed(self, item: Any) -> Any:
        self.samples_fed += item.nsamp
        if item.valid is not None:
            self.lost_samples += item.nsamp - int(np.count_nonzero(item.valid))
        return self.stage.feed_block(item.parts, item.nsamp, item.skip, item.valid)

    def finish(self) -> None:
        self.stage.synchronize()

    def as_dict(self) -> dict:
        return {"samples_fed": self.samples_fed, "lost_samples": self.lost_samples}


def gpu_stage_runner(
    stage: GpuStage, fmt: Any, registry: HostRegistry | None = None,
    status: StatusLine | None = None, slot_len: int | None = None,
) -> StageRunner:  # fmt: skip
    """The runner of a ``GpuStage`` fed straight from the capture's chunks (of whole
    packets in ``slot_len``-byte slots, a recording's, where given)."""
    return StageRunner(ChunkFeed(stage, fmt, slot_len), fmt.payload_len, registry, status)
