"""Folding detected samples into pulse-phase bins and sub-integrations (NumPy reference).

Time reference: sample i of the stream given to :class:`Folder` is at
``start + i * tsamp`` (start = integer MJD + seconds). For channel c at
``chan_freqs_mhz[c]`` the folder uses the corrected time
``t_c = i * tsamp - dispersion_delay_s(dm, f_c, f_ref)``, i.e. the time the
same wavefront crossed ``f_ref`` (the band centre), so all channels align.
Both the pulse phase (from the predictor, float64, from MJD int + seconds)
and the sub-integration index ``floor(t_c / tsub_s)`` come from t_c; samples
with t_c < 0 (before the start at f_ref) are ignored. Bin b covers phases
[b/nbin, (b+1)/nbin).

Products: for each sub-integration, polarisation product, channel and bin the
folder keeps the sum of the samples and the number of samples (hits); the
profile is their mean, sum/hits, so bins of unequal hit counts (short
sub-integrations, lost data) stay comparable. A bin with no hits is set to the
mean of its profile so it draws no artificial dip. The weight of a
(sub-integration, channel) is the number of samples folded divided by the
largest number of samples any channel was offered in that sub-integration:
lost samples (``valid`` False) and partial coverage lower it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.dsp.detect import npol_out
from voltstream.errors import ConfigError
from voltstream.observation import FoldedArchive, Observation

__all__ = ["FoldSettings", "Folder", "fold_products", "folding_periods", "profile_snr"]


@dataclass(frozen=True)
class FoldSettings:
    """What a fold is asked for, made once (by the CLI) and given to every fold driver
    (CPU file, GPU file, multi-GPU file, live GPU), so that they cannot drift apart.

    ``predictor`` gives pulse phase (polyco, .par or constant period); ``tsub_s`` is the
    sub-integration length (None: one); ``nfft`` the dedispersion FFT length (None:
    DSPSR's rule); ``block_samples`` the samples per block or GPU chunk (None: each
    driver's own default).
    """

    dm: float
    predictor: Any
    nbin: int
    tsub_s: float | None
    pol_mode: str = "AA+BB"
    basis: str = "linear"
    nfft: int | None = None
    block_samples: int | None = None


class Folder:
    """Accumulates detected samples (nchan, npol_out, nsamp) into folded profiles."""

    @classmethod
    def for_observation(cls, obs: Observation, nbin: int, pol_mode: str, dm: float,
                        predictor: Any, tsub_s: float | None,
                        f_ref_mhz: float | None = None) -> Folder:  # fmt: skip
        """The folder of ``obs``'s channels for detection ``pol_mode``, phase zero at the
        observation's start, delays relative to ``f_ref_mhz`` (None: its centre
        frequency; a cluster node's channels: the whole band's centre)."""
        npo = npol_out(pol_mode)
        if pol_mode != "AA+BB" and obs.npol != 2:
            raise ConfigError(f"{pol_mode} needs 2 polarisations; the input has {obs.npol}")
        f_ref = obs.freq_mhz if f_ref_mhz is None else f_ref_mhz
        return cls(nbin, obs.nchan, npo, obs.tsamp_s, obs.chan_freqs_mhz, f_ref, dm,
                   predictor, tsub_s, obs.start_mjd, obs.start_sec)  # fmt: skip

    def __init__(
        self,
        nbin: int,
        nchan: int,
        npol_out: int,
        tsamp_s: float,
        chan_freqs_mhz: npt.ArrayLike,
        f_ref_mhz: float,
        dm: float,
        predictor: Any,
        tsub_s: float | None,
        start_mjd: int,
        start_sec: float,
    ) -> None:
        if nbin < 2:
            raise ConfigError(f"nbin must be at least 2, got {nbin}")
        if tsamp_s <= 0:
            raise ConfigError(f"sample interval must be > 0 s, got {tsamp_s}")
        self.nbin = int(nbin)
        self.nchan = int(nchan)
        self.npol_out = int(npol_out)
        self.tsamp_s = float(tsamp_s)
        self.chan_freqs_mhz = np.asarray(chan_freqs_mhz, dtype=np.float64).reshape(-1)
        if self.chan_freqs_mhz.size != self.nchan:
            raise ConfigError(
                f"{self.chan_freqs_mhz.size} channel frequencies given for {self.nchan} channels"
            )
        self.f_ref_mhz = float(f_ref_mhz)
        self.dm = float(dm)
        self.predictor = predictor
        self.tsub_s = float(tsub_s) if tsub_s else None
        if self.tsub_s is not None and self.tsub_s <= 0:
            raise ConfigError(f"sub-integration length must be > 0 s, got {tsub_s}")
        self.start_mjd = int(start_mjd)
        self.start_sec = float(start_sec)
        self.delay_s = dispersion_delay_s(self.dm, self.chan_freqs_mhz, self.f_ref_mhz)
        self._sums = np.zeros((0, self.npol_out, self.nchan, self.nbin))
        self._hits = np.zeros((0, self.nchan, self.nbin), dtype=np.int64)
        self._offered = np.zeros((0, self.nchan), dtype=np.int64)
        self.excluded_samples = 0  # (channel, sample) pairs kept out, divided by nchan
        self._base = 0  # the sub-integration held first (rows below went to take_rows)
        self.late_samples = 0  # (channel, sample) pairs for a row already taken

    @property
    def nsub(self) -> int:
        return self._sums.shape[0]

    def _grow(self, end: int) -> None:
        """Holds rows up to ``end`` (a sub-integration index, not a count)."""
        extra = end - self._base - self.nsub
        if extra <= 0:
            return
        self._sums = np.concatenate(
            [self._sums, np.zeros((extra, self.npol_out, self.nchan, self.nbin))]
        )
        self._hits = np.concatenate(
            [self._hits, np.zeros((extra, self.nchan, self.nbin), dtype=np.int64)]
        )
        self._offered = np.concatenate([self._offered, np.zeros((extra, self.nchan), np.int64)])

    def add(
        self, detected: np.ndarray, first_sample: int, valid: npt.ArrayLike | None = None
    ) -> None:
        """Fold (nchan, npol_out, nsamp) samples starting at stream sample ``first_sample``.

        ``valid``: None, or bool (nsamp,) or (nchan, nsamp); False samples are
        counted as offered but never enter a profile.
        """
        d = np.asarray(detected, dtype=np.float64)
        if d.ndim != 3 or d.shape[:2] != (self.nchan, self.npol_out):
            raise ConfigError(
                f"expected detected samples shaped ({self.nchan}, {self.npol_out}, nsamp), "
                f"got {d.shape}"
            )
        nsamp = d.shape[2]
        if nsamp == 0:
            return
        if valid is None:
            v = np.ones((self.nchan, nsamp), dtype=bool)
        else:
            v = np.asarray(valid, dtype=bool)
            if v.shape not in ((nsamp,), (self.nchan, nsamp)):
                raise ConfigError(
                    f"valid mask must be shaped ({nsamp},) or ({self.nchan}, {nsamp}), "
                    f"got {v.shape}"
                )
            v = np.broadcast_to(v, (self.nchan, nsamp))
        t = (int(first_sample) + np.arange(nsamp, dtype=np.float64)) * self.tsamp_s
        tc = t[None, :] - self.delay_s[:, None]  # (nchan, nsamp)
        phase = self.predictor.phase(self.start_mjd, self.start_sec + tc)
        frac = phase - np.floor(phase)
        ibin = np.minimum((frac * self.nbin).astype(np.int64), self.nbin - 1)
        if self.tsub_s is None:
            isub = np.zeros(tc.shape, dtype=np.int64)
        else:
            # Plain floor, no tolerance: the GPU kernel (kernels/fold.cu) makes the
            # same choice bit for bit. A sample on a boundary may land either side.
            isub = np.floor(tc / self.tsub_s).astype(np.int64)
        inside = tc >= 0
        if self._base:
            taken = inside & (isub < self._base)
            self.late_samples += int(np.count_nonzero(taken))
            inside &= ~taken
        offered = inside
        use = inside & v
        self.excluded_samples += int(np.count_nonzero(inside & ~v)) // self.nchan
        if not np.any(inside):
            return
        lo = int(isub[inside].min())
        hi = int(isub[inside].max())
        self._grow(hi + 1)
        isub = isub - self._base
        lo, hi = lo - self._base, hi - self._base
        nsb = hi - lo + 1
        chan = np.broadcast_to(np.arange(self.nchan)[:, None], tc.shape)
        cell = ((isub - lo) * self.nchan + chan) * self.nbin + ibin
        n_cells = nsb * self.nchan * self.nbin
        self._offered[lo : hi + 1] += np.bincount(
            ((isub - lo) * self.nchan + chan)[offered], minlength=nsb * self.nchan
        ).reshape(nsb, self.nchan)
        cu = cell[use]
        self._hits[lo : hi + 1] += np.bincount(cu, minlength=n_cells).reshape(
            nsb, self.nchan, self.nbin
        )
        for p in range(self.npol_out):
            self._sums[lo : hi + 1, p] += np.bincount(
                cu, weights=d[:, p][use], minlength=n_cells
            ).reshape(nsb, self.nchan, self.nbin)

    def take_rows(self, upto: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Hands over sub-integrations below ``upto`` still held, as (k, sums (npol_out,
        nchan, nbin), hits (nchan, nbin), offered (nchan,)), and forgets them: a node of a
        cluster sends each finished row on (cluster/node.py) and memory stays bounded.
        Samples that fall in a row already taken later are counted
        (``late_samples``), never folded."""
        upto = min(int(upto), self._base + self.nsub)
        n = upto - self._base
        if n <= 0:
            return []
        rows = [
            (self._base + i, self._sums[i].copy(), self._hits[i].copy(), self._offered[i].copy())
            for i in range(n)
        ]
        self._sums, self._hits, self._offered = self._sums[n:], self._hits[n:], self._offered[n:]
        self._base = upto
        return rows

    def result(self, obs: Observation, pol_type: str = "AA+BB") -> FoldedArchive:
        """The folded archive so far: mean profiles, weights, sub-integration times."""
        if self.nsub == 0:
            raise ConfigError(
                "nothing was folded: the input is shorter than the dedispersion FFT "
                "or the dispersion delay; use a longer input"
            )
        data, weights, tsubint = fold_products(self._sums, self._hits, self._offered, self.tsamp_s)
        tsub = self.tsub_s if self.tsub_s is not None else 0.0
        offs = (self._base + np.arange(self.nsub)) * tsub + tsubint / 2
        return FoldedArchive(
            obs=obs,
            data=data,
            weights=weights,
            tsubint_s=tsubint,
            offs_sub_s=offs,
            period_s=folding_periods(self.predictor, self.start_mjd, self.start_sec, offs),
            dm=self.dm,
            pol_type=pol_type,
            polyco_text=getattr(self.predictor, "text", None),
            excluded_samples=self.excluded_samples,
        )


def fold_products(
    sums: np.ndarray, hits: np.ndarray, offered: np.ndarray, tsamp_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What an archive holds, from what a fold adds up: (data, weights, tsubint_s).

    ``sums`` (nsub, npol, nchan, nbin), ``hits`` (nsub, nchan, nbin) and ``offered``
    (nsub, nchan) as `Folder` keeps them. One function for a one-node fold and for
    the cluster merger's rows of many nodes' channels (cluster/merge.py), so that a
    merged archive is the fold of the whole band on one machine.
    """
    h = hits[:, None]  # (nsub, 1, nchan, nbin)
    with np.errstate(invalid="ignore", divide="ignore"):
        data = sums / h
        total = sums.sum(axis=-1, keepdims=True) / h.sum(axis=-1, keepdims=True)
    total = np.where(np.isfinite(total), total, 0.0)
    data = np.where(h > 0, data, total)
    folded = hits.sum(axis=-1)  # (nsub, nchan)
    expected = offered.max(axis=1)  # (nsub,)
    weights = np.where(expected[:, None] > 0, folded / np.maximum(expected[:, None], 1), 0.0)
    return data, weights, expected * tsamp_s


def folding_periods(
    predictor: Any, start_mjd: int, start_sec: float, offs_s: np.ndarray
) -> np.ndarray:
    """The predictor's period at each sub-integration centre ``offs_s`` from the start."""
    freq = np.asarray(predictor.freq_hz(start_mjd, start_sec + offs_s), dtype=np.float64)
    return 1.0 / np.broadcast_to(freq, np.shape(offs_s))


def profile_snr(profile: np.ndarray) -> float:
    """Signal-to-noise ratio of a pulse profile (1-D, any length >= 4).

    Off-pulse statistics are robust: baseline = median, noise = 1.4826 * MAD
    (the standard deviation for Gaussian noise, barely moved by a pulse of
    small duty cycle). The pulse is found by a circular boxcar search over
    widths 1, 2, 4, ... nbin/2; S/N = (boxcar sum - w * baseline) /
    (noise * sqrt(w)), maximised over position and width.
    """
    p = np.asarray(profile, dtype=np.float64).reshape(-1)
    n = p.size
    if n < 4:
        raise ConfigError(f"profile has {n} bins; S/N needs at least 4")
    base = np.median(p)
    noise = 1.4826 * np.median(np.abs(p - base))
    if not noise > 0:
        noise = np.std(p)
        if not noise > 0:
            return 0.0
    x = p - base
    ext = np.concatenate([x, x])
    csum = np.concatenate([[0.0], np.cumsum(ext)])
    best = -np.inf
    w = 1
    while w <= n // 2:
        sums = csum[w : w + n] - csum[:n]
        best = max(best, float(sums.max()) / (noise * np.sqrt(w)))
        w *= 2
    return best
