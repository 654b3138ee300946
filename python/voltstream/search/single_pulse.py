"""Single-pulse search of a filterbank: the NumPy float64 reference (the oracle a GPU
engine is checked against, as dsp/ and fold/reference.py are for the fold).

Input: intensities ``data`` float (nsamp, nchan), each channel's centre frequency
(MHz, any order), the sampling time, and optionally a validity mask ((nsamp,) or
(nsamp, nchan), True = a real sample; lost packets are False). Steps:

1. **Normalise each channel** (``normalise``): robust location and scale from the
   median and the median absolute deviation (MAD x 1.4826 = sigma for Gaussian
   noise) of the valid samples in consecutive windows of ``window_s``, linearly
   interpolated between the windows' centres (a running median and MAD, evaluated
   once per window: exact and cheap; a burst moves them by its share of the
   window's samples, negligible in the default 2 s). Masked samples
   take the channel's clipped mean, so a gap neither adds power nor leaves a dip;
   a channel without spread (dead, or all lost) gets weight 0.
2. **Dedisperse, brute force** (``dedisperse``): for every DM trial d and output
   sample t, ``series[d, t] = sum_c z[t + delay[d, c], c]``, delays in whole samples
   relative to the highest channel frequency (so a candidate's time is its arrival
   at the top of the band, heimdall's convention): round(D * DM * (f^-2 - f_top^-2)
   / tsamp), D = DISPERSION_CONSTANT (dsp/dedisperse.py, the one the fold and the
   simulator use; the 4.148808e3 s of the FRB literature differs by 1.4e-4, a DM
   scale). Brute force rather than a tree (Taylor 1974) or FDMT: it is exact (each
   channel at its own rounded delay, no piecewise-linear sweep), trivially
   parallel (one thread per (trial, sample), as dedisp and heimdall do on GPUs) and
   memory-bound; for YNAO's 128 MHz band over DM 0-2000 it is 2.7e11
   channel-sample additions a second, the GPU engine's to meet (docs/search.md).
3. **Boxcars** 1, 2, 4, ... ``boxcar_max`` samples on each series (at most 1/64 of
   its samples: every width's noise measured on 64 independent sums or more), from
   its cumulative sum. S/N = (boxcar sum - w * median) / sigma_w, the median that of
   the dedispersed series and sigma_w the robust (MAD x 1.4826) scatter of that
   boxcar's sums. For white noise sigma_w = sqrt(w) sigma, sigma the series' own; it
   is measured rather than assumed because the running normalisation of step 1
   leaves slow wander (its medians' own noise, a few percent on wide boxcars) that
   would otherwise inflate wide boxcars' S/N (heimdall normalises each filtered
   series the same way). With lost samples the validity is dedispersed too: the
   statistics come from boxcars holding all the data there is (95% or more), a
   boxcar holding a fraction f of it has sqrt(f) of the noise (filled samples have
   none) and its S/N is scaled so, and one holding less than half is not searched:
   a gap is never a burst, a burst beside a gap is still measured right.
4. **Giants and clusters** (search/candidates.py): runs above ``threshold`` per
   (trial, boxcar), friends-of-friends across time, DM and width as heimdall does.

**DM trial spacing** (``dm_trials``). A pulse of effective width w0 (Cordes &
McLaughlin 2003, ApJ 596, 1142: the sampling time, the intrinsic width and the
dispersion smearing inside one channel, added in quadrature)

    w0(DM)^2 = tsamp^2 + w_int^2 + (2 D DM b / f_lo^3)^2      (b: channel width)

dedispersed at a DM off by dDM is swept further across the band by s * dDM, with
s = D (f_lo^-2 - f_hi^-2), so its width becomes sqrt(w0^2 + (s dDM)^2). A pulse
between two trials is at most half a step from one; asking that its width grow by
at most the tolerance ``dm_tol`` there (heimdall's -dm_tol, default 1.25, so S/N
falls by at most 1/sqrt(1.25), 11%, for a pulse of Gaussian-like shape) gives

    step = 2 sqrt(dm_tol^2 - 1) * w0(DM) / s,

that is, the DM step at which the extra delay across the band is 1.5 effective
widths; w0 is taken at the step's lower DM (the smaller, so the finer step). w_int
is ``pulse_width_s`` (heimdall's -dm_pulse_width, 40 us). The trials run from dm_min
until one reaches dm_max.

**Threshold** default 6 sigma (heimdall's -detect_thresh): a search keeps candidates
for a classifier, and a trigger sets its own higher cut. Each (trial, boxcar,
sample) is one trial with false-alarm probability Q(threshold) (Gaussian tail): at
YNAO's rates (docs/search.md) 6 sigma gives a few thousand giants an hour from noise
before clustering (adjacent trials are correlated: far fewer clusters), 7 sigma a few
(``SearchResult.expected_false_alarms``). With few channels the dedispersed noise is
chi-square and its tail heavier than Gaussian's (twice at 6 sigma for 512 channels
of 4 degrees of freedom).

Shaped for a GPU engine: ``delay_table`` and ``dm_trials`` are the plan, computed
once; ``normalise``, ``dedisperse`` and ``boxcar_snr`` are the inner loops a GPU
engine replaces, block of DM trials by block (``dm_block``); giants come back as
short lists and clustering stays here (docs/search.md, "Single-pulse search").
The array must fit in memory: a long file or a stream is searched in gulps that
overlap by the largest delay plus the widest boxcar (docs/search.md).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from voltstream.dsp.dedisperse import DISPERSION_CONSTANT
from voltstream.errors import ConfigError
from voltstream.search.candidates import Candidate, Giants, cluster, find_giants, gaussian_tail

__all__ = [
    "SearchResult",
    "SearchSettings",
    "check_gulp_shape",
    "boxcar_snr",
    "dedisperse",
    "delay_table",
    "dm_trials",
    "normalise",
    "search_filterbank",
    "searched_widths",
]

MAD_TO_SIGMA = 1.482602218505602  # 1 / Phi^-1(3/4): MAD of unit Gaussian noise -> 1
_CLIP = 6.0  # |z| above which a sample is left out of a channel's fill value
MIN_SUMS = 64  # independent boxcar sums a width's noise is measured on, at least
FULL_COVER = 0.95  # noise statistics from boxcars with this share of the data or more
MIN_COVER = 0.5  # boxcars with less of the data are not searched


@dataclass(frozen=True)
class SearchSettings:
    """What a single-pulse search is asked for (`voltstream search`'s options)."""

    dm_min: float = 0.0
    dm_max: float = 1000.0
    dm_tol: float = 1.25  # width growth allowed half-way between trials
    pulse_width_s: float = 40e-6  # intrinsic width assumed by the trial spacing
    boxcar_max: int = 4096  # samples; boxcars are 1, 2, 4, ... up to this
    threshold: float = 6.0  # sigma
    window_s: float = 2.0  # per-channel median/MAD window (heimdall's -baseline_length)
    time_sep: int = 3  # clustering: samples (giants: boxcar widths)
    dm_sep: int = 200  # clustering: DM trials
    filter_sep: int = 3  # clustering: boxcar filter indices
    dm_block: int = 64  # DM trials dedispersed and filtered at once (memory)

    def check(self) -> None:
        if not (math.isfinite(self.dm_min) and math.isfinite(self.dm_max)):
            raise ConfigError("--dm-min and --dm-max must be finite")
        if not 0 <= self.dm_min <= self.dm_max:
            raise ConfigError(
                f"DM range {self.dm_min}..{self.dm_max}: give 0 <= --dm-min <= --dm-max"
            )
        if not self.dm_tol > 1:
            raise ConfigError(
                f"--dm-tol must be above 1 (the width growth allowed), got {self.dm_tol}"
            )
        if not (self.pulse_width_s >= 0 and self.window_s > 0):
            raise ConfigError("the pulse width must be >= 0 s and the window > 0 s")
        if self.boxcar_max < 1:
            raise ConfigError(f"--boxcar-max must be >= 1 sample, got {self.boxcar_max}")
        if self.dm_block < 1:
            raise ConfigError(f"dm_block must be >= 1 trial, got {self.dm_block}")
        if not math.isfinite(self.threshold):
            raise ConfigError("--threshold must be finite")
        if min(self.time_sep, self.dm_sep, self.filter_sep) < 0:
            raise ConfigError("cluster separations must be >= 0")


@dataclass
class SearchResult:
    """Candidates, strongest first, and what was searched."""

    candidates: list[Candidate]
    dms: np.ndarray  # the DM trials
    widths: np.ndarray  # boxcar lengths, samples
    nout: int  # dedispersed samples per trial (the array less the largest delay)
    n_trials: int  # (trial, boxcar, sample) S/N values computed
    n_giants: int
    ref_freq_mhz: float  # candidate times are arrivals at this frequency
    tsamp_s: float
    first_sample: int = 0
    settings: SearchSettings = field(default_factory=SearchSettings)
    giants: Giants = field(default_factory=Giants.empty)  # samples from the array's first

    def expected_false_alarms(self, threshold: float | None = None) -> float:
        """The mean number of S/N values above ``threshold`` in Gaussian noise: every
        trial counted as if independent. Each giant and each cluster holds one such
        value or more, so their mean numbers are no larger (neighbouring trials,
        boxcars and samples are correlated: clusters are far fewer)."""
        thr = self.settings.threshold if threshold is None else threshold
        return self.n_trials * gaussian_tail(thr)


def dm_trials(
    dm_min: float,
    dm_max: float,
    freqs_mhz: np.ndarray,
    tsamp_s: float,
    tol: float = 1.25,
    pulse_width_s: float = 40e-6,
) -> np.ndarray:
    """The DM trials from ``dm_min`` until one reaches ``dm_max`` (module docstring)."""
    f = np.asarray(freqs_mhz, dtype=np.float64)
    f_lo, f_hi = float(f.min()), float(f.max())
    steps = np.diff(np.sort(f))
    chan_bw = float(np.median(steps[steps > 0])) if np.any(steps > 0) else 0.0
    s = DISPERSION_CONSTANT * (f_lo**-2 - f_hi**-2)  # s per unit DM across the band
    if s <= 0:
        return np.array([dm_min])
    smear_per_dm = 2.0 * DISPERSION_CONSTANT * chan_bw / f_lo**3
    k = 2.0 * math.sqrt(tol * tol - 1.0) / s
    dms = [float(dm_min)]
    while dms[-1] < dm_max:
        w0 = math.sqrt(tsamp_s**2 + pulse_width_s**2 + (smear_per_dm * dms[-1]) ** 2)
        dms.append(dms[-1] + k * w0)
    return np.array(dms)


def delay_table(
    dms: np.ndarray, freqs_mhz: np.ndarray, tsamp_s: float, ref_freq_mhz: float
) -> np.ndarray:
    """int64 (ndm, nchan): each channel's delay after ``ref_freq_mhz``, whole samples."""
    f = np.asarray(freqs_mhz, dtype=np.float64)
    sweep = DISPERSION_CONSTANT * (f**-2 - ref_freq_mhz**-2) / tsamp_s
    return np.rint(np.asarray(dms, dtype=np.float64)[:, None] * sweep[None, :]).astype(np.int64)


def _valid(mask: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray | None:
    if mask is None:
        return None
    m = np.asarray(mask, dtype=bool)
    if m.shape not in (shape, shape[:1]):
        raise ConfigError(
            f"mask of shape {m.shape} for data of shape {shape}: give (nsamp,) or (nsamp, nchan)"
        )
    return np.broadcast_to(m[:, None] if m.ndim == 1 else m, shape)


def _block_stats(x: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of each column over its valid samples (NaN where none)."""
    if valid is None or valid.all():
        med = np.median(x, axis=0)
        return med, np.median(np.abs(x - med), axis=0)
    xm = np.where(valid, x, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN, handled
        med = np.nanmedian(xm, axis=0)
        return med, np.nanmedian(np.abs(xm - med), axis=0)


def _fill_channels(v: np.ndarray, at: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Per channel (column), ``v`` (nblock, nchan) at block centres ``at``, linearly
    interpolated to ``where`` over the blocks where it is finite (NaN: none)."""
    out = np.full((len(where), v.shape[1]), np.nan)
    good = np.isfinite(v)
    full = good.all(axis=0)
    if full.any():  # one interpolation for all channels with every block
        k = np.clip(np.searchsorted(at, where) - 1, 0, max(len(at) - 2, 0))
        if len(at) == 1:
            out[:, full] = v[0, full]
        else:
            a = np.clip((where - at[k]) / (at[k + 1] - at[k]), 0.0, 1.0)[:, None]
            out[:, full] = (1 - a) * v[k][:, full] + a * v[k + 1][:, full]
    for c in np.flatnonzero(~full & good.any(axis=0)):
        out[:, c] = np.interp(where, at[good[:, c]], v[good[:, c], c])
    return out


def normalise(
    data: np.ndarray, mask: np.ndarray | None = None, window: int = 4096
) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 (nsamp, nchan): each channel minus its running median, over its running
    MAD x 1.4826, in windows of ``window`` samples (module docstring, step 1); and
    which samples carry data (float 0/1, the same shape; None: all)."""
    x = np.asarray(data, dtype=np.float64)
    if x.ndim != 2:
        raise ConfigError(f"a filterbank is (nsamp, nchan); got shape {x.shape}")
    nsamp = x.shape[0]
    valid = _valid(mask, x.shape)
    nblk = max(1, nsamp // max(1, int(window)))
    edges = np.rint(np.linspace(0, nsamp, nblk + 1)).astype(int)
    stats = [_block_stats(x[a:b], None if valid is None else valid[a:b])
             for a, b in zip(edges[:-1], edges[1:], strict=True)]  # fmt: skip
    at = 0.5 * (edges[:-1] + edges[1:]) - 0.5
    where = np.arange(nsamp, dtype=np.float64)
    med = _fill_channels(np.array([s[0] for s in stats]), at, where)
    sigma = _fill_channels(np.array([s[1] for s in stats]), at, where) * MAD_TO_SIGMA
    live = np.isfinite(sigma) & (sigma > 0)
    z = np.zeros_like(x)
    np.divide(x - np.nan_to_num(med), sigma, out=z, where=live)
    keep = live if valid is None else live & valid
    z[~keep] = 0.0
    # Masked samples take the channel's clipped mean: the noise's mean after the
    # median is removed is not 0 (intensities are skewed), and a gap should not dip.
    use = keep & (np.abs(z) < _CLIP)
    fill = np.divide(
        (z * use).sum(axis=0), use.sum(axis=0), out=np.zeros(x.shape[1]),
        where=use.sum(axis=0) > 0,
    )  # fmt: skip
    if valid is not None:
        z = np.where(keep, z, np.where(live, fill[None, :], 0.0))
    return z, None if keep.all() else keep.astype(np.float64)


def dedisperse(z: np.ndarray, delays: np.ndarray, nout: int) -> np.ndarray:
    """float64 (ndm, nout): ``sum_c z[t + delays[d, c], c]`` (module docstring, step 2)."""
    ndm, nchan = delays.shape
    zt = np.ascontiguousarray(np.asarray(z, dtype=np.float64).T)
    if delays.min() < 0 or delays.max() + nout > zt.shape[1]:
        raise ConfigError("delays reach outside the filterbank: fewer output samples needed")
    out = np.zeros((ndm, nout))
    for c in range(nchan):
        out += sliding_window_view(zt[c], nout)[delays[:, c]]
    return out


def boxcar_snr(series: np.ndarray, width: int, cover: np.ndarray | None = None) -> np.ndarray:
    """float64 (ndm, nout - width + 1): S/N of the ``width``-sample boxcar starting at
    each sample (module docstring, step 3). ``cover`` (ndm, nout): how many channels
    carried data in each dedispersed sample (``dedisperse`` of ``normalise``'s
    weights); None: all, everywhere."""
    full = None
    frac = None
    if cover is not None:
        cc = np.zeros((cover.shape[0], cover.shape[1] + 1))
        np.cumsum(cover, axis=1, out=cc[:, 1:])
        got = cc[:, width:] - cc[:, :-width]
        frac = got / np.maximum(got.max(axis=1, keepdims=True), 1e-300)
        full = frac >= FULL_COVER
        ref = cover / np.maximum(cover.max(axis=1, keepdims=True), 1e-300) >= FULL_COVER
        med = _row_median(series, ref)
    else:
        med = np.median(series, axis=1, keepdims=True)
    c = np.zeros((series.shape[0], series.shape[1] + 1))
    np.cumsum(series - med, axis=1, out=c[:, 1:])
    box = c[:, width:] - c[:, :-width]
    sigma = robust_sigma(box, axis=1, keepdims=True, where=full)
    if frac is not None:
        # Filled samples have no noise: a boxcar holding fewer carries less, sqrt(frac)
        # of a full one's; below MIN_COVER of the data there is too little to judge.
        sigma = sigma * np.sqrt(np.where(frac >= MIN_COVER, frac, np.inf))
    return np.divide(box, sigma, out=np.zeros_like(box), where=sigma > 0)


def _row_median(x: np.ndarray, where: np.ndarray | None) -> np.ndarray:
    """Median of each row over ``where`` (all: None), keepdims; NaN for an empty row."""
    if where is None or where.all():
        return np.median(x, axis=1, keepdims=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an empty row: NaN, S/N 0
        return np.nanmedian(np.where(where, x, np.nan), axis=1, keepdims=True)


def robust_sigma(
    x: np.ndarray, axis: int = 1, keepdims: bool = False, where: np.ndarray | None = None
) -> np.ndarray:
    """1.4826 x the median absolute deviation from the median, per row (``axis`` 1) of
    a 2-d array, over ``where`` (None: all): sigma of Gaussian noise, unmoved by a few
    outliers (a burst)."""
    if axis != 1 or x.ndim != 2:
        raise ValueError("robust_sigma works on the rows of a 2-d array")
    med = _row_median(x, where)
    out = MAD_TO_SIGMA * _row_median(np.abs(x - med), where)
    return out if keepdims else out[:, 0]


def check_gulp_shape(data: Any, nchan: int) -> None:
    """ConfigError unless ``data`` is (nsamp, nchan): one intensity per channel."""
    if np.ndim(data) != 2 or np.shape(data)[1] != nchan:
        raise ConfigError(
            f"filterbank of shape {np.shape(data)} with {nchan} channel frequencies: "
            "give (nsamp, nchan) intensities and one frequency per channel"
        )


def searched_widths(nsamp: int, max_delay: int, boxcar_max: int, tsamp_s: float,
                    top_dm: float) -> tuple[int, np.ndarray]:  # fmt: skip
    """(dedispersed samples, boxcar widths) of a gulp of ``nsamp`` samples whose
    sweep at the top trial ``top_dm`` is ``max_delay``: the widths 1, 2, 4 ..
    ``boxcar_max`` with at least MIN_SUMS sums each; ConfigError when none is left."""
    nout = nsamp - max_delay
    widths = 1 << np.arange(int(math.log2(boxcar_max)) + 1)
    widths = widths[widths * MIN_SUMS <= max(nout, 0)]
    if nout < 1 or len(widths) == 0:
        raise ConfigError(
            f"{nsamp} samples ({nsamp * tsamp_s:g} s) leave fewer than {MIN_SUMS} after the "
            f"dispersion sweep at DM {top_dm:g} ({max_delay} samples): search a longer "
            "stretch or lower --dm-max"
        )
    return nout, widths


def search_filterbank(
    data: np.ndarray,
    freqs_mhz: np.ndarray,
    tsamp_s: float,
    mask: np.ndarray | None = None,
    settings: SearchSettings | None = None,
    *,
    first_sample: int = 0,
) -> SearchResult:
    """Searches one filterbank array (module docstring); ``first_sample``: its first
    sample's index in the observation (candidate samples and times count from 0 there)."""
    st = settings or SearchSettings()
    st.check()
    freqs = np.asarray(freqs_mhz, dtype=np.float64)
    check_gulp_shape(data, len(freqs))
    if not (tsamp_s > 0 and np.all(freqs > 0)):
        raise ConfigError("sampling time and channel frequencies must be > 0")
    nsamp = np.shape(data)[0]
    dms = dm_trials(st.dm_min, st.dm_max, freqs, tsamp_s, st.dm_tol, st.pulse_width_s)
    ref = float(freqs.max())
    delays = delay_table(dms, freqs, tsamp_s, ref)
    nout, widths = searched_widths(nsamp, int(delays.max()), st.boxcar_max, tsamp_s, dms[-1])
    window = max(16, int(round(st.window_s / tsamp_s)))
    z, weight = normalise(data, mask, window)
    parts = []
    for j0 in range(0, len(dms), st.dm_block):
        block = delays[j0 : j0 + st.dm_block]
        series = dedisperse(z, block, nout)
        cover = None if weight is None else dedisperse(weight, block, nout)
        for k, w in enumerate(widths):
            snr = boxcar_snr(series, int(w), cover)
            parts.append(find_giants(snr, st.threshold, k, j0, st.time_sep))
    giants = Giants.concat(parts)
    cands = cluster(
        giants, dms, tsamp_s, time_sep=st.time_sep, dm_sep=st.dm_sep,
        filter_sep=st.filter_sep, first_sample=first_sample,
    )  # fmt: skip
    return SearchResult(
        candidates=cands,
        dms=dms,
        widths=widths,
        nout=nout,
        n_trials=int(sum(len(dms) * (nout - w + 1) for w in widths)),
        n_giants=len(giants),
        ref_freq_mhz=ref,
        tsamp_s=tsamp_s,
        first_sample=first_sample,
        settings=st,
        giants=giants,
    )
