"""The benchmark's baseline: the GPU fold's steps written plainly in CuPy.

One stream, pageable copies, separate passes, cupy.fft with its default plan cache:
what a straightforward port of the NumPy reference does. bench/fold_gpu.py times it
beside the fused engine (``fold/gpu.py``) on the same data; the GPU tests hold
both to the reference. Not on any product path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.fold.gpu import _FolderBase
from voltstream.fold.gpu_ingest import lost_mask
from voltstream.observation import FoldedArchive

__all__ = ["NaiveGpuFolder"]


class NaiveGpuFolder(_FolderBase):
    """The same steps written plainly in CuPy: one stream, pageable copies,
    separate passes, cupy.fft with its default plan cache. The benchmark's baseline."""

    variant = "naive"

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.pop("dtype", None), kw.pop("ndim", None), kw.pop("profile", None)
        super().__init__(*args, **kw)
        cp = self.cp
        self.response = cp.asarray(self.plan.dedisperser.response.astype(np.complex64))
        self.delay = cp.asarray(self.folder.delay_s)
        self._drop_carry()
        self.acc = cp.zeros((0, self.npol_out, self.obs.nchan, self.nbin))
        self.hits = cp.zeros((0, self.obs.nchan, self.nbin), dtype=np.int64)
        self.offered = cp.zeros((0, self.obs.nchan), dtype=np.int64)

    def _drop_carry(self) -> None:
        self.carry = self.cp.zeros((self.obs.nchan, self.obs.npol, 0), dtype=np.complex64)

    def feed(
        self, block: np.ndarray, valid: np.ndarray | None = None, pinned: bool = False
    ) -> None:
        self.feed_device(self.cp.asarray(block), valid)

    def feed_device(self, raw: Any, valid: np.ndarray | None = None) -> None:
        cp, p, obs = self.cp, self.plan, self.obs
        n = raw.shape[0]
        if raw.dtype == np.complex64:
            x = raw
        elif raw.ndim == 4 and raw.shape[3] == 2:
            x = raw[..., 0].astype(np.float32) + 1j * raw[..., 1].astype(np.float32)
        else:
            x = raw.reshape(n, obs.nchan, obs.npol).astype(np.complex64)
        lost = lost_mask(valid, n)
        if lost is not None:  # zero lost samples before the FFT, as the reference does
            x = x.astype(np.complex64, copy=True)
            x[cp.asarray(lost)] = 0
        x = cp.ascontiguousarray(x.astype(np.complex64).transpose(1, 2, 0))
        buf = cp.concatenate([self.carry, x], axis=-1)
        nblock = p.blocks(self.carry.shape[-1], n)
        nout = nblock * p.step
        first = self.out_base + self.samples_out + p.head
        if valid is not None:
            self.lost += int(np.count_nonzero(~np.asarray(valid, dtype=bool)))
        out_valid = self.valid_carry.step(valid, n, nout)
        if nblock:
            idx = cp.arange(nblock)[:, None] * p.step + cp.arange(p.nfft)[None, :]
            seg = buf[:, :, idx]  # (nchan, npol, nblock, nfft)
            spec = cp.fft.fft(seg, axis=-1)
            spec *= self.response[:, None, None, :]
            y = cp.fft.ifft(spec, axis=-1)[..., p.head : p.head + p.step]
            y = y.reshape(obs.nchan, obs.npol, nout)
            self._fold(y, first, nout, out_valid)
        self.carry = buf[..., nout:].copy()
        self.samples_in += n
        self.samples_out += nout

    def _fold(self, y: Any, first: int, nout: int, out_valid: np.ndarray | None) -> None:
        cp, obs = self.cp, self.obs
        a = y[:, 0]
        aa = a.real**2 + a.imag**2
        if obs.npol == 2:
            b = y[:, 1]
            bb = b.real**2 + b.imag**2
        if self.pol_mode == "AA+BB":
            det = [aa + bb] if obs.npol == 2 else [aa]
        else:
            cross = a * cp.conj(b)
            if self.pol_mode == "AABBCRCI":
                det = [aa, bb, cross.real, cross.imag]
            elif self.basis == "linear":
                det = [aa + bb, aa - bb, 2 * cross.real, -2 * cross.imag]
            else:
                det = [aa + bb, 2 * cross.real, 2 * cross.imag, bb - aa]
        t = (first + cp.arange(nout, dtype=np.float64)) * obs.tsamp_s
        tc = t[None, :] - self.delay[:, None]
        nknot = ((nout - 1) // self.knot) + 2
        knots = np.empty((obs.nchan, nknot))
        self._knots(first, nknot, knots)
        knots = cp.asarray(knots)
        o = cp.arange(nout)
        k = o // self.knot
        frac = (o % self.knot).astype(np.float64) / self.knot
        ph = knots[:, k] + (knots[:, k + 1] - knots[:, k]) * frac[None, :]
        ph -= cp.floor(ph)
        ibin = cp.minimum((ph * self.nbin).astype(np.int64), self.nbin - 1)
        if self.tsub_s:
            isub = cp.floor(tc / self.tsub_s).astype(np.int64)
        else:
            isub = cp.zeros(tc.shape, dtype=np.int64)
        inside = tc >= 0
        use = inside if out_valid is None else inside & cp.asarray(out_valid)[None, :]
        hi = self._max_sub(first, nout) + 1
        if hi > self.acc.shape[0]:
            extra = hi - self.acc.shape[0]
            self.acc = cp.concatenate([self.acc, cp.zeros((extra,) + self.acc.shape[1:])])
            self.hits = cp.concatenate(
                [self.hits, cp.zeros((extra,) + self.hits.shape[1:], np.int64)]
            )
            self.offered = cp.concatenate(
                [self.offered, cp.zeros((extra,) + self.offered.shape[1:], np.int64)]
            )
        nsub, nchan = self.acc.shape[0], obs.nchan
        chan = cp.arange(nchan)[:, None]
        cell_sc = cp.clip(isub, 0, nsub - 1) * nchan + chan
        self.offered += cp.bincount(cell_sc[inside], minlength=nsub * nchan).reshape(nsub, nchan)
        cell = (cell_sc * self.nbin + ibin)[use]
        ncell = nsub * nchan * self.nbin
        self.hits += cp.bincount(cell, minlength=ncell).reshape(self.hits.shape)
        for q, d in enumerate(det):
            w = cp.broadcast_to(d, tc.shape)[use].astype(np.float64)
            self.acc[:, q] += cp.bincount(cell, weights=w, minlength=ncell).reshape(
                nsub, nchan, self.nbin
            )

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def finish(self) -> FoldedArchive:
        self.synchronize()
        return self._finish_archive(
            self.acc.get(), self.hits.get(), self.offered.get(), self.variant
        )
