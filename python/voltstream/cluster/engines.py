"""The fold engines a cluster node folds its subband with, behind one small interface
(`NodeFold` in node.py places samples on the observation's axis and feeds them): the
NumPy fold (`CpuRows`, the reference) and the GPU fold engine (`GpuRows`, fold/gpu.py).
Both dedisperse as the whole band does (the band's FFT length, overlap and cut) and
refer delays to the band's centre, so a node's rows are the whole band's fold's rows
for its channels.

Both take host samples (``feed``: a file's node, the tests) and lost samples
(``feed_gap``). A live GPU node also takes capture chunks as they lie in the capture's
pool (``feed_block``, the one-host live fold's `GpuFolder.feed_block`): it is built
as the one-host live fold builds its engine (pipeline/live.py `live_gpu_folder`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.fold.plan import FoldPlan
from voltstream.pipeline.fold import StreamFold

if TYPE_CHECKING:
    from voltstream.capture.config import CaptureSettings
    from voltstream.cluster.job import NodeJob

Row = tuple[int, np.ndarray, np.ndarray, np.ndarray]

#: Lost samples fed to the NumPy fold at a time (zeros, marked lost).
GAP_PIECE = 1 << 16


class CpuRows:
    """The NumPy fold (pipeline/fold.py `StreamFold`)."""

    device = "cpu"

    def __init__(self, job: NodeJob) -> None:
        self.fold = StreamFold(job.obs, job.settings, node_plan(job))
        self.step = self.grid = self.fold.plan.step
        self.delay_s = self.fold.folder.delay_s
        self.nchan, self.npol = job.obs.nchan, job.obs.npol

    def set_start(self, first: int) -> None:
        """The stream's first sample is ``first`` on the observation's axis."""
        self.fold.offset = first

    def feed(self, x: np.ndarray, valid: np.ndarray) -> None:
        """``x``: complex (n, nchan, npol) or a capture's int8 (n, nchan, npol, re/im)."""
        if x.dtype == np.int8:
            x = x.astype(np.float32).view(np.complex64)[..., 0]
        self.fold.feed(x, valid)

    def feed_gap(self, n: int) -> None:
        """``n`` samples that never arrived: zeros, marked lost (as the timeline's gaps
        are for a file)."""
        for a in range(0, n, GAP_PIECE):
            m = min(GAP_PIECE, n - a)
            zeros = np.zeros((m, self.nchan, self.npol), np.complex64)
            self.fold.feed(zeros, np.zeros(m, bool))

    def synchronize(self) -> None:
        pass

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
    and rows are read out as they finish.

    A live node's engine reads the capture's chunks as they lie (``feed_block``, no
    sample touched on the host; ``capture``: the capture settings it was sized for,
    `live_gpu_folder`); its host ``feed`` takes int8 TFP samples where those are the
    chunk's bytes (one YNAO subband). A file's node is fed complex64 as float32 re/im.
    """

    device = "gpu"

    def __init__(self, job: NodeJob) -> None:
        from voltstream.fold.gpu import GpuFolder

        obs = job.obs
        self.live = job.fmt is not None and not job.is_file
        self.capture: CaptureSettings | None = None
        band: dict[str, Any] = {
            "band_freqs_mhz": job.band_freqs_mhz,
            "f_ref_mhz": job.band_centre_mhz,
        }
        if self.live:
            from voltstream.capture.config import CaptureSettings
            from voltstream.pipeline.live import GpuChunking, live_gpu_folder

            fmt = job.fmt
            assert fmt is not None
            given = CaptureSettings.of(job.source, **job.capture)
            self.eng, self.capture = live_gpu_folder(
                fmt, given, job.duration_s, obs, job.settings,
                GpuChunking(job.capture.get("packets_per_chunk")), **band,
            )  # fmt: skip
            # The engine reads a chunk from any sample on: a late start on the FFT grid
            # begins inside a packet, at a whole byte (packed samples of 2 or 4 bits).
            whole_bytes = fmt.samples_per_packet // math.gcd(fmt.samples_per_packet,
                                                              fmt.payload_len)  # fmt: skip
            self.bytes_per_packet = fmt.payload_len
            self.samples_per_packet = fmt.samples_per_packet
            # Host samples are the chunk's own bytes only for one YNAO stream (TFP).
            self.tfp_is_chunk = fmt.name == "ynao" and fmt.streams == 1
        else:
            whole_bytes = 1
            self.eng = GpuFolder(node_plan(job), job.settings.block_samples, dtype=np.float32,
                                 ndim=2)  # fmt: skip
        self.step = self.eng.plan.step
        self.grid = math.lcm(self.step, whole_bytes)
        self.delay_s = self.eng.folder.delay_s
        self.shape = (obs.nchan, obs.npol, 2)

    def set_start(self, first: int) -> None:
        self.eng.start_segment(first)

    def feed(self, x: np.ndarray, valid: np.ndarray) -> None:
        """Host samples: complex (n, nchan, npol) for a file's node; int8 TFP (n, nchan,
        npol, re/im) for a live one of one YNAO stream."""
        chunk = self.eng.chunk
        if not self.live:
            raw = np.ascontiguousarray(x, dtype=np.complex64).view(np.float32)
            raw = raw.reshape(x.shape[0], *self.shape)
            for a in range(0, x.shape[0], chunk):
                self.eng.feed(raw[a : a + chunk], valid[a : a + chunk])
            return
        if x.dtype != np.int8 or not self.tfp_is_chunk:
            raise ConfigError(f"a live GPU node takes host samples only as int8 TFP of one YNAO "
                              f"stream, got {x.dtype}; it reads its capture's chunks")  # fmt: skip
        data = np.ascontiguousarray(x).view(np.uint8).reshape(x.shape[0], -1)
        for a in range(0, x.shape[0], chunk):
            part = data[a : a + chunk]
            self.eng.feed_packed(part, part.shape[0], valid[a : a + chunk])

    def feed_block(self, parts: Any, n: int, first_packet: int, cut: int,
                   valid: np.ndarray | None) -> Any:  # fmt: skip
        """``n`` samples of a capture block, from ``cut`` samples after its packet
        ``first_packet`` (the block's ``first``) on; the CUDA event after which the
        block may go back to its pool."""
        cut_bytes, part = divmod(cut * self.bytes_per_packet, self.samples_per_packet)
        assert not part, "a cut inside a byte: NodeFold keeps starts on `grid`"
        return self.eng.feed_block(
            parts, n, first_packet * self.bytes_per_packet + cut_bytes, valid
        )

    def feed_gap(self, n: int) -> None:
        if self.live:
            self.eng.feed_gap(n)
            return
        zeros = np.zeros((min(n, self.eng.chunk), *self.shape), np.float32)
        for a in range(0, n, self.eng.chunk):
            m = min(self.eng.chunk, n - a)
            self.eng.feed(zeros[:m], np.zeros(m, bool))

    def synchronize(self) -> None:
        self.eng.synchronize()

    def busy_ms(self) -> float:
        return float(self.eng.busy_ms())

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
