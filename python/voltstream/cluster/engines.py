"""The fold engines a cluster node folds its subband with, behind one small interface
(`NodeFold` in node.py uses it): the NumPy fold (`CpuRows`, the reference) and the
GPU fold engine (`GpuRows`, fold/gpu.py). Both dedisperse as the whole band does
(the band's FFT length, overlap and cut) and refer delays to the band's centre, so
a node's rows are the whole band's fold's rows for its channels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.capture_defaults import PACKETS_PER_CHUNK
from voltstream.fold.plan import FoldPlan
from voltstream.pipeline.fold import StreamFold

if TYPE_CHECKING:
    from voltstream.cluster.job import NodeJob

Row = tuple[int, np.ndarray, np.ndarray, np.ndarray]


class CpuRows:
    """The NumPy fold (pipeline/fold.py `StreamFold`)."""

    device = "cpu"

    def __init__(self, job: NodeJob) -> None:
        self.fold = StreamFold(job.obs, job.settings, node_plan(job))
        self.step = self.fold.plan.step
        self.delay_s = self.fold.folder.delay_s
        self.nchan = job.obs.nchan

    def set_start(self, first: int) -> None:
        """The stream's first sample is ``first`` on the observation's axis."""
        self.fold.offset = first

    def feed(self, x: np.ndarray, valid: np.ndarray) -> None:
        """``x``: complex (n, nchan, npol) or a capture's int8 (n, nchan, npol, re/im)."""
        if x.dtype == np.int8:
            x = x.astype(np.float32).view(np.complex64)[..., 0]
        self.fold.feed(x, valid)

    @property
    def folded_to(self) -> int:
        return self.fold.folded_to

    def take_rows(self, upto: int) -> list[Row]:
        return self.fold.folder.take_rows(upto)

    def counters(self) -> dict[str, int]:
        f = self.fold
        return {
            "samples_read": f.read,
            "samples_lost": f.lost,
            "samples_dedispersed": f.stream.samples_out,
            "samples_late": f.folder.late_samples // max(1, self.nchan),
        }


class GpuRows:
    """The GPU fold engine (fold/gpu.py `GpuFolder`); its accumulators stay on the GPU
    and rows are read out as they finish. A live node feeds it the capture's int8
    samples as they are (the GPU unpacks them: a quarter of the bytes of complex64 to
    copy, and no conversion on the host); a file's node, complex64 as float32 re/im."""

    device = "gpu"

    def __init__(self, job: NodeJob) -> None:
        from voltstream.fold.gpu import GpuFolder

        obs = job.obs
        self.dtype = np.int8 if job.fmt is not None and not job.is_file else np.float32
        chunk = job.settings.block_samples
        self.eng = GpuFolder(node_plan(job), chunk, dtype=self.dtype, ndim=2)
        if job.fmt is not None and not job.is_file:
            # The FFT plans of the capture's chunks made now, before the capture opens:
            # made on the first chunks instead, they stall the fold while the capture's
            # small pool fills, and whole chunks are dropped.
            per_chunk = int(job.capture.get("packets_per_chunk", PACKETS_PER_CHUNK))
            self.eng.warm_up(per_chunk * job.fmt.samples_per_packet)
        self.step = self.eng.plan.step
        self.delay_s = self.eng.folder.delay_s
        self.shape = (obs.nchan, obs.npol, 2)

    def set_start(self, first: int) -> None:
        self.eng.start_segment(first)

    def feed(self, x: np.ndarray, valid: np.ndarray) -> None:
        """``x``: int8 (n, nchan, npol, re/im) for a live node, else complex."""
        raw: Any = x
        if self.dtype != np.int8:
            raw = np.ascontiguousarray(x, dtype=np.complex64).view(np.float32)
        elif x.dtype != np.int8:
            raise ValueError(f"a live GPU node is fed int8 samples, got {x.dtype}")
        raw = raw.reshape(x.shape[0], *self.shape)
        chunk = self.eng.chunk
        for a in range(0, x.shape[0], chunk):
            self.eng.feed(raw[a : a + chunk], valid[a : a + chunk])

    @property
    def folded_to(self) -> int:
        return int(self.eng.out_base + self.eng.samples_out)

    def take_rows(self, upto: int) -> list[Row]:
        return self.eng.take_rows(upto)

    def counters(self) -> dict[str, int]:
        e = self.eng
        return {
            "samples_read": int(e.samples_in),
            "samples_lost": int(e.lost),
            "samples_dedispersed": int(e.samples_out),
            "samples_late": 0,  # rows are taken only once every output before them is in
        }


def node_plan(job: NodeJob) -> FoldPlan:
    """The plan of a node's fold: its channels, dedispersed as the whole band is, and
    delays referred to the band's centre."""
    return FoldPlan(job.obs, job.settings, band_freqs_mhz=job.band_freqs_mhz,
                    f_ref_mhz=job.band_centre_mhz)  # fmt: skip


def fold_engine(job: NodeJob) -> CpuRows | GpuRows:
    """The node's engine: ``job.device`` gpu, cpu, or auto (the GPU when this node has
    a usable one: decided on the node, not by the driver)."""
    from voltstream.device import resolve_device

    return GpuRows(job) if resolve_device(job.device) == "gpu" else CpuRows(job)
