"""The GPU fold engines' output: the accumulators on the GPU, read out as rows or an archive.

The last step of the chain in fold/gpu.py: ``detect_fold`` adds into float64 sums, hit
and offered counts that stay on the GPU (:meth:`GpuOutput._grow` makes room for more
sub-integrations). :meth:`GpuOutput.take_rows` reads finished sub-integrations out
(a cluster node sends them on), :meth:`GpuOutput.finish` the whole fold, handed to the
reference :class:`Folder` (:meth:`FoldOutput._finish_archive`, shared with the naive
engine and the multi-GPU driver) so the archive is built by the same code as the CPU
fold's, and described by the fold's plan (fold/plan.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import Folder
from voltstream.observation import FoldedArchive

__all__ = ["FoldOutput", "GpuOutput"]


class FoldOutput:
    """The archive of a GPU engine's sums (a mixin of both engines' base class)."""

    plan: FoldPlan
    folder: Folder
    obs: Any
    dm: float
    predictor: Any
    nbin: int
    tsub_s: float | None
    pol_mode: str
    samples_in: int
    samples_out: int
    lost: int

    def _finish_archive(
        self, acc: np.ndarray, hits: np.ndarray, offered: np.ndarray, variant: str
    ) -> FoldedArchive:
        used = np.nonzero(offered.sum(axis=1) > 0)[0]
        nsub = int(used[-1]) + 1 if used.size else 0
        f = self.folder
        f._sums = np.ascontiguousarray(acc[:nsub], dtype=np.float64)
        f._hits = hits[:nsub].astype(np.int64)
        f._offered = offered[:nsub].astype(np.int64)
        return self.plan.archive(f, f"gpu, {variant}", self.samples_in, self.samples_out,
                                 self.lost)  # fmt: skip


class GpuOutput:
    """The accumulators of :class:`~voltstream.fold.gpu.GpuFolder` (a mixin) and their
    read-out."""

    cp: Any
    obs: Any
    npol_out: int
    nbin: int
    variant: str
    compute_stream: Any
    copy_stream: Any
    acc: Any  # CuPy arrays (CuPy has no type information)
    hits: Any
    offered: Any
    nsub_cap: int
    nsub_used: int
    rows_taken: int
    _finish_archive: Any

    def _grow(self, need: int) -> None:
        if need <= self.nsub_cap:
            return
        cp = self.cp
        cap = max(need, 2 * self.nsub_cap)
        nchan = self.obs.nchan
        with self.compute_stream:
            acc = cp.zeros((cap, self.npol_out, nchan, self.nbin), dtype=np.float64)
            hits = cp.zeros((cap, nchan, self.nbin), dtype=np.uint32)
            offered = cp.zeros((cap, nchan), dtype=np.uint64)
            if self.nsub_cap:
                acc[: self.nsub_cap] = self.acc
                hits[: self.nsub_cap] = self.hits
                offered[: self.nsub_cap] = self.offered
        self.acc, self.hits, self.offered, self.nsub_cap = acc, hits, offered, cap

    def take_rows(self, upto: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Sub-integrations ``rows_taken .. upto - 1``, as the reference's
        `Folder.take_rows` gives them (k, sums, hits, offered), once the GPU has folded
        everything queued. The accumulators stay on the GPU (a row of 32 channels x
        1024 bins x 4 products is 1 MB: an observation's rows fit): nothing is moved."""
        upto = min(int(upto), self.nsub_used)
        a = self.rows_taken
        if upto <= a:
            return []
        self.synchronize()
        acc = self.acc[a:upto].get()
        hits = self.hits[a:upto].get().astype(np.int64)
        offered = self.offered[a:upto].get().astype(np.int64)
        self.rows_taken = upto
        return [(a + i, acc[i], hits[i], offered[i]) for i in range(upto - a)]

    def synchronize(self) -> None:
        self.compute_stream.synchronize()
        self.copy_stream.synchronize()

    def finish(self) -> FoldedArchive:
        """Wait for the GPU and build the archive (reference finalisation)."""
        self.synchronize()
        return self._finish_archive(
            self.acc.get(), self.hits.get(), self.offered.get(), self.variant
        )
