"""Folding on several GPUs: one worker thread per GPU (or several per GPU), each
folding time segments of the input into its own accumulators; the sums are
added and turned into one archive by the reference :class:`Folder`.

Why segments work: the dedispersed stream's output o is input sample
``o + head`` and is computed from inputs ``o .. o + overlap``; overlap-save frame
b covers inputs ``[b*step, b*step + nfft)`` and yields outputs
``[b*step, (b+1)*step)``. A worker fed inputs ``[a, b + overlap)`` with ``a`` and
``b`` multiples of ``step`` therefore makes exactly the frames, and so the
outputs ``[a, b)``, of a single stream fed from sample 0. :func:`plan_segments`
cuts the outputs ``[0, nout)`` of the whole input into such segments, dealt to
the workers in turn; each worker re-reads the ``overlap`` samples at the end of
its segment (the lead-in of the next one), which costs ``overlap / segment`` of
extra work and nothing else. The folder's time axis is absolute (the engine's
:meth:`start_segment`), so sub-integrations and phases are those of one stream.

Feeding: a reader with random access (``read_raw(start, n)`` and ``nsamp``, no
validity masks) is read by the workers themselves, each its own segments, in
parallel; arrays in pinned memory go straight to the copy engine. Any other
reader (``read_blocks``, with validity masks) is read once, in order, by the
calling thread, which hands each worker the pieces of its segments through a
bounded queue and counts the lost samples (each input sample once).

This module imports without CuPy; :func:`plan_segments` is pure NumPy.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.io.baseband import reader_blocks
from voltstream.observation import FoldedArchive

__all__ = ["Segment", "fold_file_multi_gpu", "plan_segments"]


@dataclass(frozen=True)
class Segment:
    """One worker's share: outputs ``[out_start, out_stop)`` from inputs ``[in_start, in_stop)``.

    Output o is the dedispersed stream's sample o, i.e. input sample o + head.
    """

    index: int
    worker: int
    in_start: int
    in_stop: int
    out_start: int
    out_stop: int


def plan_segments(
    nsamp: int,
    head: int,
    tail: int,
    step: int,
    nworkers: int,
    segment_samples: int | None = None,
) -> list[Segment]:
    """Cut the outputs of ``nsamp`` input samples into segments dealt to ``nworkers`` in turn.

    ``segment_samples`` (outputs per segment) is rounded up to a multiple of
    ``step``; by default each worker gets one contiguous segment. Every segment
    but the last has the same length; the union of the output ranges is
    ``[0, nout)`` with ``nout = ((nsamp - overlap) // step) * step`` (what one
    stream makes), without gap or overlap, and segment k reads inputs
    ``[out_start, out_stop + head + tail)``, which never pass ``nsamp``.
    """
    nsamp, head, tail, step, nworkers = map(int, (nsamp, head, tail, step, nworkers))
    if step < 1 or head < 0 or tail < 0:
        raise ConfigError(f"need step >= 1 and head, tail >= 0; got {step}, {head}, {tail}")
    if nworkers < 1:
        raise ConfigError(f"need at least one worker, got {nworkers}")
    overlap = head + tail
    nout = max(0, (nsamp - overlap) // step) * step
    if nout == 0:
        return []
    if segment_samples is None:
        seg = -(-nout // nworkers)
    else:
        seg = int(segment_samples)
        if seg < 1:
            raise ConfigError(f"segment length must be >= 1 sample, got {segment_samples}")
    seg = -(-seg // step) * step
    out = []
    for k, o in enumerate(range(0, nout, seg)):
        stop = min(o + seg, nout)
        out.append(Segment(k, k % nworkers, o, stop + overlap, o, stop))
    return out


def _is_pinned(arr: np.ndarray) -> bool:
    """True when ``arr`` is C-contiguous and lives in page-locked (CUDA host) memory."""
    if not arr.flags.c_contiguous or arr.size == 0:
        return False
    try:
        import cupy

        attrs = cupy.cuda.runtime.pointerGetAttributes(arr.ctypes.data)
        return int(attrs.type) == int(cupy.cuda.runtime.memoryTypeHost)
    except Exception:  # unregistered memory on an old driver, no CuPy: not pinned
        return False


class _Worker:
    """One engine on one device, folding the segments it is given."""

    def __init__(self, device: int, make_engine: Any) -> None:
        self.device, self.make_engine = device, make_engine
        self.engine: Any = None  # a GpuFolder, made on the worker's device when first used
        self.error: BaseException | None = None
        self.segments = 0
        # (accumulator, hits, offered, samples out), on the host once the worker ends
        self.result: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None

    def _engine(self) -> Any:
        if self.engine is None:
            self.engine = self.make_engine()
        return self.engine

    def begin(self, seg: Segment) -> None:
        self._engine().start_segment(seg.in_start)
        self.segments += 1

    def feed(self, block: np.ndarray, valid: np.ndarray | None) -> None:
        eng = self._engine()
        if valid is None and eng.variant == "fused" and _is_pinned(block):
            eng.feed(block, pinned=True)
        else:
            eng.feed(block, valid)

    def collect(self) -> None:
        eng = self.engine
        if eng is None:
            return
        eng.synchronize()
        self.result = (eng.acc.get(), eng.hits.get(), eng.offered.get(), eng.samples_out)


def _run_random_access(reader: Any, workers: Any, segments: Any, chunk: int, obs: Any) -> None:
    import cupy as cp

    def work(w: _Worker, mine: list[Segment]) -> None:
        try:
            with cp.cuda.Device(w.device):
                for seg in mine:
                    w.begin(seg)
                    for s in range(seg.in_start, seg.in_stop, chunk):
                        blk = np.asarray(reader.read_raw(s, min(chunk, seg.in_stop - s)))
                        if obs.ndim == 1:
                            blk = blk[..., 0]
                        w.feed(blk, None)
                w.collect()
        except BaseException as exc:  # reported by the caller
            w.error = exc

    threads = [
        threading.Thread(target=work, args=(w, [s for s in segments if s.worker == i]), daemon=True)
        for i, w in enumerate(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _run_sequential(
    reader: Any, workers: Any, segments: Any, chunk: int, obs: Any, depth: int
) -> int:
    """Read blocks in order and deal their pieces out; returns the lost-sample count."""
    import cupy as cp

    queues: list[queue.Queue] = [queue.Queue(maxsize=depth) for _ in workers]

    def work(w: _Worker, q: queue.Queue) -> None:
        current = None
        with cp.cuda.Device(w.device):
            while True:
                item = q.get()
                if item is None:
                    break
                if w.error is not None:
                    continue  # keep draining so the reader never blocks on us
                seg, blk, valid = item
                try:
                    if seg is not current:
                        w.begin(seg)
                        current = seg
                    w.feed(blk, valid)
                except BaseException as exc:
                    w.error = exc
            if w.error is None:
                try:
                    w.collect()
                except BaseException as exc:
                    w.error = exc

    threads = [
        threading.Thread(target=work, args=(w, q), daemon=True)
        for w, q in zip(workers, queues, strict=True)
    ]
    for t in threads:
        t.start()
    lost, pos, first = 0, 0, 0
    try:
        for blk, valid in reader_blocks(reader, chunk, np.complex64):
            n = blk.shape[0]
            if valid is not None:
                valid = np.asarray(valid, dtype=bool).reshape(n)
                lost += int(np.count_nonzero(~valid))
            while first < len(segments) and segments[first].in_stop <= pos:
                first += 1
            for seg in segments[first:]:
                if seg.in_start >= pos + n:
                    break
                a, b = max(seg.in_start, pos) - pos, min(seg.in_stop, pos + n) - pos
                if b > a:
                    v = None if valid is None else valid[a:b]
                    queues[seg.worker].put((seg, blk[a:b], v))
            pos += n
    finally:
        for q in queues:
            q.put(None)
        for t in threads:
            t.join()
    return lost


def fold_file_multi_gpu(
    reader: Any,
    settings: FoldSettings,
    gpus: Any = None,
    workers_per_gpu: int = 1,
    segment_samples: int | None = None,
    variant: str = "fused",
) -> FoldedArchive:
    """Fold on several GPUs; the same archive as :func:`fold_file_gpu` and ``fold_file``.

    ``gpus``: device ids (default: all visible), or an int N for devices
    0..N-1; ``workers_per_gpu`` engines (threads, each with its own streams) per
    device. The reader needs ``nsamp`` (the plan needs the input's length).
    ``settings.block_samples`` is each engine's chunk; ``segment_samples`` the outputs per
    segment (see :func:`plan_segments`; default: one segment per worker for a
    random-access reader, 4 chunks for one read in order).
    """
    from voltstream.fold.gpu import GpuFolder, gpu_available
    from voltstream.fold.gpu_ingest import gpu_chunk_samples
    from voltstream.fold.gpu_naive import NaiveGpuFolder

    if not gpu_available():
        from voltstream.dsp.cuda import GpuError

        raise GpuError("no CUDA GPU is visible to CuPy; use --device cpu")
    if variant not in ("fused", "naive"):
        raise ConfigError(f"unknown GPU variant {variant!r}: use 'fused' or 'naive'")
    import cupy as cp

    ndev = cp.cuda.runtime.getDeviceCount()
    if gpus is None:
        gpus = list(range(ndev))
    elif isinstance(gpus, int):
        gpus = list(range(gpus))
    gpus = [int(g) for g in gpus]
    if not gpus or any(g < 0 or g >= ndev for g in gpus):
        raise ConfigError(f"GPUs {gpus} asked for; this machine has devices 0..{ndev - 1}")
    if int(workers_per_gpu) < 1:
        raise ConfigError(f"workers_per_gpu must be >= 1, got {workers_per_gpu}")
    nsamp = getattr(reader, "nsamp", None)
    if nsamp is None:
        raise ConfigError("the multi-GPU fold needs the input's length (reader.nsamp)")
    obs = reader.obs
    t_start = time.perf_counter()
    dm = settings.dm
    plan = FoldPlan(obs, settings)  # one plan: every worker's engine composes it
    chunk = gpu_chunk_samples(plan, settings.block_samples)
    devices = [g for g in gpus for _ in range(int(workers_per_gpu))]
    raw_ok = hasattr(reader, "read_raw") and obs.nbit in (8, 16)
    raw_ok = raw_ok and getattr(reader, "valid", None) is None
    if segment_samples is None and not raw_ok:
        segment_samples = 4 * chunk
    segments = plan_segments(nsamp, plan.head, plan.tail, plan.step, len(devices), segment_samples)
    if not segments:
        raise ConfigError(
            f"input of {nsamp} samples is shorter than one dedispersion FFT "
            f"({plan.nfft} samples at DM {dm}); give a longer input"
        )
    cls = GpuFolder if variant == "fused" else NaiveGpuFolder
    kw: dict[str, Any] = {}
    if raw_ok:
        kw.update(dtype=np.int8 if obs.nbit == 8 else np.int16, ndim=obs.ndim)
    else:
        kw.update(dtype=np.float32, ndim=2)

    def factory() -> Any:
        return cls(plan, chunk, **kw)

    workers = [_Worker(d, factory) for d in devices]
    if raw_ok:
        _run_random_access(reader, workers, segments, chunk, obs)
        lost = 0
    else:
        per_seg = math.ceil((segments[0].in_stop - segments[0].in_start) / chunk) + 1
        lost = _run_sequential(reader, workers, segments, chunk, obs, depth=per_seg + 1)
    for w in workers:
        if w.error is not None:
            raise w.error
    results = [w.result for w in workers if w.result is not None]
    nsub = max(r[0].shape[0] for r in results)
    acc = np.zeros((nsub,) + results[0][0].shape[1:])
    hits = np.zeros((nsub,) + results[0][1].shape[1:], dtype=np.int64)
    offered = np.zeros((nsub,) + results[0][2].shape[1:], dtype=np.int64)
    for a, h, o, _ in results:
        acc[: a.shape[0]] += a
        hits[: h.shape[0]] += h.astype(np.int64)
        offered[: o.shape[0]] += o.astype(np.int64)
    # The first worker's engine builds the archive with the whole run's counters.
    eng = workers[0].engine
    eng.samples_in = int(nsamp)
    eng.samples_out = sum(r[3] for r in results)
    eng.lost = lost
    if eng.samples_out != segments[-1].out_stop:
        raise RuntimeError(
            f"workers made {eng.samples_out} outputs, the plan {segments[-1].out_stop}"
        )
    where = ", ".join(f"GPU {g} x{workers_per_gpu}" for g in gpus)
    arch = eng._finish_archive(acc, hits, offered, f"{variant}, {len(devices)} workers: {where}")
    arch.history.append(
        f"gpu fold: {len(segments)} segments of {segments[0].out_stop} outputs "
        f"(+{plan.overlap} lead-in); wall time {time.perf_counter() - t_start:.3f} s"
    )
    return arch
