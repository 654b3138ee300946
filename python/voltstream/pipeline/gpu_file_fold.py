"""A baseband file folded on the GPU: the file's blocks through the product path.

``fold_file_gpu`` is the GPU twin of ``pipeline.fold.fold_file``. A DADA or VDIF file
is read by ``pipeline/file_source.py`` (reader threads straight into page-locked
buffers) and its blocks go to the engine through the live fold's runner
(``pipeline/gpu.py`` ``StageRunner``: each copied to the GPU from there and given back
on its copy's event; its counters are the archive's ``pipeline``); other readers go
through the staged paths (packed VDIF frames, raw 8/16-bit samples, or complex64
blocks). Real-sampled files (VDIF of a DBBC3, DADA of NDIM 1; given as they are or
wrapped in ``dsp.real.RealToComplex``, as the CLI does) go to the GPU as stored too and
are converted to complex baseband there (fold/gpu_real.py); only the staged fallback
converts them on the host. The stage times go on the archive (``stage_seconds``) for
the CLI and the benchmark.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.device import gpu_available
from voltstream.dsp.cuda import GpuError
from voltstream.errors import ConfigError
from voltstream.fold.gpu import GpuFolder
from voltstream.fold.gpu_naive import NaiveGpuFolder
from voltstream.fold.reference import FoldSettings
from voltstream.io.baseband import reader_blocks
from voltstream.observation import FoldedArchive

if TYPE_CHECKING:
    from voltstream.pipeline.file_source import FileSource

__all__ = ["fold_file_gpu", "fold_source"]


def fold_file_gpu(
    reader: Any,
    settings: FoldSettings,
    progress: Callable[[int, int], None] | None = None,
    variant: str = "fused",
) -> FoldedArchive:
    """GPU twin of :func:`voltstream.pipeline.fold.fold_file`: same settings, same archive.

    Samples go to the GPU as stored when the reader can hand them out: packed
    2/4/8-bit VDIF frames (``reader.read_packed``, unpacked by
    ``unpack_packed.cu``) or raw 8/16-bit DADA samples (``reader.read_raw``);
    otherwise the complex64 blocks (and validity masks) of ``reader.read_blocks``.
    A real-sampled reader (``obs.ndim`` 1, or a ``RealToComplex`` of one) folds as
    ``RealToComplex`` would convert it, the conversion done on the GPU where the
    samples go there as stored.
    """
    if not gpu_available():
        raise GpuError("no CUDA GPU is visible to CuPy; use --device cpu")
    if variant not in ("fused", "naive"):
        raise ConfigError(f"unknown GPU variant {variant!r}: use 'fused' or 'naive'")
    from voltstream.dsp.real import RealToComplex

    real = None  # the real reader's complex view: its obs, and the staged fallback
    if isinstance(reader, RealToComplex):
        real, reader = reader, reader.reader
    elif reader.obs.ndim == 1:
        real = RealToComplex(reader)
    obs = reader.obs
    cls: type[GpuFolder] | type[NaiveGpuFolder] = (
        GpuFolder if variant == "fused" else NaiveGpuFolder
    )
    eng: GpuFolder | NaiveGpuFolder
    t_start = time.perf_counter()
    raw_ok = hasattr(reader, "read_raw") and getattr(reader, "nsamp", None) is not None
    raw_ok = raw_ok and obs.nbit in (8, 16) and real is None
    block = settings.block_samples
    if real is not None and block:  # block_samples counts complex samples
        block = 2 * int(block)
    src = _file_source(reader, block) if variant == "fused" else None
    fold_obs = real.obs if real is not None else None
    stages = {}
    pipeline: dict = {}
    if src is not None:
        stages["source_s"] = time.perf_counter() - t_start
        with src:
            eng, pipeline = _fold_file_blocks(src, settings, progress, stages, fold_obs)
    elif variant == "fused" and hasattr(reader, "read_packed"):
        eng = _fold_packed(reader, settings, progress, block, fold_obs)
    elif real is not None:  # real samples the GPU cannot take as stored: converted here
        eng = cls.from_settings(real.obs, settings, dtype=np.float32, ndim=2)
        for blk, valid in reader_blocks(real, eng.chunk, np.complex64):
            eng.feed(blk, valid)
            if progress is not None:
                progress(eng.samples_in, eng.samples_out)
    elif raw_ok:
        dtype = np.int8 if obs.nbit == 8 else np.int16
        eng = cls.from_settings(obs, settings, dtype=dtype, ndim=obs.ndim)
        chunk = eng.chunk
        for s in range(0, reader.nsamp, chunk):
            blk = np.asarray(reader.read_raw(s, min(chunk, reader.nsamp - s)))
            if obs.ndim == 1:
                blk = blk[..., 0]
            eng.feed(blk)
            if progress is not None:
                progress(eng.samples_in, eng.samples_out)
    else:
        eng = cls.from_settings(obs, settings, dtype=np.float32, ndim=2)
        for blk, valid in reader_blocks(reader, eng.chunk, np.complex64):
            eng.feed(blk, valid)
            if progress is not None:
                progress(eng.samples_in, eng.samples_out)
    arch = eng.finish()
    arch.stage_seconds = dict(stages, total_s=time.perf_counter() - t_start)
    arch.pipeline = pipeline
    arch.history.append(f"gpu fold wall time {arch.stage_seconds['total_s']:.3f} s")
    return arch


def _file_source(reader: Any, block_samples: Any) -> FileSource | None:
    """The file's block source (pipeline/file_source.py) for a DADA or VDIF reader, or
    None where it does not apply (16-bit DADA, readers of other kinds): staged path."""
    from voltstream.io.dada import DadaReader
    from voltstream.io.vdif import VdifFile
    from voltstream.pipeline.file_source import FileSource

    if not isinstance(reader, (DadaReader, VdifFile)):
        return None
    readers = max(2, min(12, (os.cpu_count() or 4) - 3))  # page cache -> pinned, in parallel
    try:
        return FileSource(reader, block_samples, readers=readers, depth=6)
    except ConfigError:
        return None


def _fold_packed(reader: Any, settings: FoldSettings, progress: Any, block: Any = None,
                 fold_obs: Any = None) -> GpuFolder:  # fmt: skip
    """Frames of a VDIF-like reader to the GPU as stored bytes (2/4/8-bit codes).

    Chunks are whole frames (the packed layout is frame by frame); absent frames
    arrive as a validity mask and are zeroed by the unpack kernel. ``fold_obs``: the
    complex observation of real samples (None: the reader's).
    """
    layout = reader.packed_layout()
    spf = layout.spf
    want = block or (1 << 19)
    chunk = max(1, int(want) // spf) * spf
    eng = GpuFolder.from_settings(fold_obs or reader.obs, settings, packed=layout,
                                  chunk_samples=chunk)  # fmt: skip
    fpc = chunk // spf
    nframes = reader.nsamp // spf
    for f0 in range(0, nframes, fpc):
        f1 = min(f0 + fpc, nframes)
        data, valid = reader.read_packed(f0, f1)
        eng.feed_packed(data, (f1 - f0) * spf, valid)
        if progress is not None:
            progress(eng.samples_in, eng.samples_out)
    return eng


def fold_source(src: Any, stage: Any, progress: Any = None, registry: Any = None) -> Any:
    """A file source's blocks into a ``GpuStage`` through the one runner
    (pipeline/gpu.py ``StageRunner``, the live fold's): the runner page-locks the
    source's buffers where they are not yet (``registry``), holds each block until its
    copy's event and gives it back then, counts, and finishes the stage. Returns the
    runner, whose ``as_dict()`` is the report's ``pipeline`` part. ``progress(samples
    in, samples out)`` after each block, from the stage's counters."""
    from voltstream.pipeline.gpu import BlockFeed, StageRunner

    runner = StageRunner(BlockFeed(stage), 0, registry)

    def after_each() -> None:
        if progress is not None:
            progress(stage.samples_in, stage.samples_out)

    runner.run(src, after_each)
    return runner


def _fold_file_blocks(src: Any, settings: FoldSettings, progress: Any, stages: dict,
                      fold_obs: Any = None) -> tuple[GpuFolder, dict]:  # fmt: skip
    """A file on the product path: blocks read by several threads straight into
    page-locked buffers (pipeline/file_source.py: DADA, VDIF as stored or gathered),
    fed to the engine by the runner (``fold_source``), unpacked by the packed kernel
    reading the file's bytes as they are (real samples: converted to complex first,
    fold_obs their complex observation). The engine and the runner's counters."""
    from voltstream.pipeline.gpu import HostRegistry

    t0 = time.perf_counter()
    eng = GpuFolder.from_settings(fold_obs or src.obs, settings, packed=src.layout,
                                  raw_bytes=src.block_bytes,
                                  chunk_samples=src.block_samples)  # fmt: skip
    eng.warm_up(src.block_samples)
    stages["engine_s"] = time.perf_counter() - t0
    runner = fold_source(src, eng, progress, HostRegistry())
    if runner.first_take_at is not None:  # from the first block in hand to the last folded
        stages["first_block_wait_s"] = runner.first_take_at - t0 - stages["engine_s"]
        stages["blocks_s"] = time.perf_counter() - runner.first_take_at
    return eng, runner.as_dict()
