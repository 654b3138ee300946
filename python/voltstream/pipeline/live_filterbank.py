"""A live search filterbank on the GPU (`voltstream filterbank --listen --device gpu`):
capture and filterbank in one process, the capture's chunks straight to the GPU.

As the live GPU fold (pipeline/live.py ``fold_live_gpu``): the capture's pool is
page-locked, each chunk is copied to the GPU where the capture put it and unpacked
there (``StageRunner`` over ``ChunkFeed``, pipeline/gpu.py), lost packets travel as a
mask. No sample is touched on the host; what comes back is the output samples, after
detection and integration (``GpuFilterbank``'s ``on_output``), which go to the file
through the same rows as a file's filterbank (pipeline/filterbank.py ``RowWriter``).
"""

from __future__ import annotations

from typing import Any

from voltstream.capture.config import CaptureSettings
from voltstream.formats import StreamFormat
from voltstream.pipeline.filterbank import FilterbankReport, RowWriter, filterbank_report
from voltstream.pipeline.live import (
    GPU_CHUNKING,
    LIVE_GPU_RUN,
    GpuChunking,
    LiveGpuRun,
    capture_to_gpu,
)
from voltstream.search.filterbank import FilterbankPlan

__all__ = ["LiveGpuRun", "filterbank_live_gpu", "live_gpu_filterbank"]


def live_gpu_filterbank(
    fmt: StreamFormat, capture: CaptureSettings, plan: FilterbankPlan,
    chunking: GpuChunking = GPU_CHUNKING, on_output: Any = None,
) -> tuple[Any, CaptureSettings]:  # fmt: skip
    """The GPU filterbank of a live capture and the capture's settings for it, sized
    as the live GPU fold's (``chunking``: by default about 32 MiB chunks in a pool of
    1 GiB) and warmed up (kernels built, FFT plans made) before the socket opens."""
    from voltstream.search.gpu_filterbank import GpuFilterbank

    ppc, nchunks = chunking.sized(fmt, capture)
    nsamp = ppc * fmt.samples_per_packet
    eng = GpuFilterbank(plan, packed=fmt.chunk_layout(ppc), chunk_samples=nsamp,
                        raw_bytes=fmt.streams * ppc * fmt.payload_len,
                        on_output=on_output)  # fmt: skip
    eng.warm_up(nsamp)
    return eng, capture.replace(packets_per_chunk=ppc, nchunks=nchunks)


def filterbank_live_gpu(
    fmt: StreamFormat, capture: CaptureSettings, duration_s: float, plan: FilterbankPlan,
    writer: Any, path: str, file_format: str, chunking: GpuChunking = GPU_CHUNKING,
    run: LiveGpuRun = LIVE_GPU_RUN,
) -> tuple[FilterbankReport, Any]:  # fmt: skip
    """Captures and makes ``plan``'s filterbank on the GPU into ``writer`` (the file
    ``path``, closed here); returns (filterbank report, capture report). ``plan`` is
    of the complex observation for a real-sampled stream (``dsp.real``
    ``complex_observation``): its chunks are converted on the GPU."""
    rows = RowWriter(plan, writer)
    try:
        eng, capture = live_gpu_filterbank(fmt, capture, plan, chunking, rows.add)

        def finish() -> None:
            eng.synchronize()  # the last rows
            rows.close()

        _, report = capture_to_gpu("filterbank", eng, fmt, capture, duration_s, run, finish)
    finally:
        writer.close()
    fb = filterbank_report(path, file_format, plan, eng, rows.rows, rows.dead,
                           writer.samples, rows.quant.clipped)  # fmt: skip
    return fb, report
