"""The single-pulse search on the GPU (CuPy): the reference's steps
(search/single_pulse.py) with its results, giant for giant (docs/search.md, "GPU
search").

``GpuSinglePulse(freqs_mhz, tsamp_s, settings)`` makes the plan once (the DM trials,
the delay table on the GPU, the kernels); ``search(data, mask, first_sample)`` takes
one filterbank array (a gulp) and returns the reference's ``SearchResult``:

1. Normalisation: each channel's median and MAD per window are exact k-th values
   (radix select, dsp/kernels/dedisperse_search.cu), linearly interpolated per
   sample as ``np.interp`` does, then z, the keep mask and the clipped-mean fill
   exactly as the reference (float64 statistics, float32 samples).
2. Dedispersion: ``dedisperse_tile``, brute force, all DM trials of a block at once
   (float32 sums; ``dm_block`` trials a block, sized to ``mem_bytes``).
3. Boxcars: a float64 prefix sum of each series less its median; per width the box
   sums' median and MAD by radix select (float32 copies: the S/N moves by ~1e-7),
   the S/N in float64, with the reference's cover rules when samples were lost.
4. Giants: a threshold and a stream compaction (``cupy.nonzero``), runs joined and
   their best boxcar picked on the GPU: only giants come back to the host, where
   ``cluster`` stays.

CuPy is imported when an engine is made, so this module imports anywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from voltstream.dsp.cuda import Template, cupy_module
from voltstream.errors import ConfigError
from voltstream.search.candidates import Giants, cluster
from voltstream.search.single_pulse import (
    _CLIP,
    FULL_COVER,
    MAD_TO_SIGMA,
    MIN_COVER,
    SearchResult,
    SearchSettings,
    check_gulp_shape,
    delay_table,
    dm_trials,
    searched_widths,
)

__all__ = ["GpuSinglePulse", "SearchTemplate"]

#: Working memory a gulp's DM block may take on the GPU (its series, prefix sums and
#: temporaries: about 24 bytes per (trial, sample)).
GPU_MEM_BYTES = 16 << 30


class SearchTemplate(Template):
    """dedisperse_search.cu with its tile constants (the file's defaults)."""

    source = "dedisperse_search.cu"
    THREADS, TPT, DMS, CG = 128, 8, 16, 16
    SEL_THREADS, SEL_ITEMS = 256, 16

    def __init__(self) -> None:
        super().__init__()


class GpuSinglePulse:
    """The GPU engine of the single-pulse search for one band and sampling time."""

    name = "gpu"

    def __init__(
        self,
        freqs_mhz: np.ndarray,
        tsamp_s: float,
        settings: SearchSettings,
        mem_bytes: int = GPU_MEM_BYTES,
    ) -> None:
        settings.check()
        self.cp = cp = cupy_module()
        self.settings = settings
        self.freqs = np.asarray(freqs_mhz, dtype=np.float64)
        if not (tsamp_s > 0 and np.all(self.freqs > 0)):
            raise ConfigError("sampling time and channel frequencies must be > 0")
        self.tsamp = float(tsamp_s)
        st = settings
        self.dms = dm_trials(st.dm_min, st.dm_max, self.freqs, tsamp_s, st.dm_tol,
                             st.pulse_width_s)  # fmt: skip
        self.ref = float(self.freqs.max())
        self.delays = delay_table(self.dms, self.freqs, tsamp_s, self.ref)
        self.max_delay = int(self.delays.max())
        self.mem_bytes = int(mem_bytes)
        self.t = SearchTemplate()
        self._delays_gpu = cp.asarray(self.delays.astype(np.int32))
        self._interp = cp.ElementwiseKernel(
            "int64 nsamp, raw float64 at, raw float64 val, raw int32 m, int32 nk",
            "float64 y",
            """
            const long long c = i / nsamp;
            const double t = (double)(i - c * nsamp);
            const int mc = m[c];
            const double *a = &at[c * nk];
            const double *v = &val[c * nk];
            if (mc == 0) { y = __longlong_as_double(0x7ff8000000000000LL); }
            else if (t <= a[0]) { y = v[0]; }
            else if (t >= a[mc - 1]) { y = v[mc - 1]; }
            else {
                int j = 0;
                while (j + 2 < mc && a[j + 1] <= t) ++j;
                y = v[j] + (t - a[j]) * (v[j + 1] - v[j]) / (a[j + 1] - a[j]);
            }
            """,
            "voltstream_sp_interp",
        )

    # --- radix select -------------------------------------------------------------

    def kth(self, x: Any, ranks: Any, col0: int = 0, ncols: int | None = None) -> tuple[Any, Any]:
        """The ``ranks``-th smallest non-NaN value of each row of float32 ``x`` (2-d,
        C-contiguous) over columns ``col0 .. col0 + ncols``: (float32 values, how many
        values equal to it lie at or after it in sorted order, int64)."""
        cp = self.cp
        nrows = x.shape[0]
        ncols = x.shape[1] - col0 if ncols is None else ncols
        prefix = cp.zeros(nrows, dtype=cp.uint32)
        rank = cp.asarray(ranks, dtype=cp.int64).copy()
        equal = cp.zeros(nrows, dtype=cp.int64)
        hist = cp.empty((nrows, 256), dtype=cp.uint32)
        per = SearchTemplate.SEL_THREADS * SearchTemplate.SEL_ITEMS
        grid = (max(1, -(-ncols // per)), nrows)
        hk, pk = self.t.kernel("select_hist"), self.t.kernel("select_pick")
        for shift in (24, 16, 8, 0):
            hist.fill(0)
            hk(grid, (SearchTemplate.SEL_THREADS,),
               (x, np.int64(x.shape[1]), np.int64(col0), np.int64(ncols), prefix,
                np.int32(shift), hist))  # fmt: skip
            pk((-(-nrows // 128),), (128,), (hist, np.int32(nrows), np.int32(shift), prefix,
                                             rank, equal))  # fmt: skip
        key = prefix
        positive = (key & np.uint32(0x80000000)) != 0
        bits = cp.where(positive, key & np.uint32(0x7FFFFFFF), ~key)
        return bits.view(cp.float32), equal - rank

    def median(self, x: Any, col0: int = 0, ncols: int | None = None) -> Any:
        """float64 median of each row over its non-NaN values (NaN: none), as
        ``np.nanmedian``: the mean of the two middle values of an even count."""
        cp = self.cp
        ncols = x.shape[1] - col0 if ncols is None else ncols
        n = cp.count_nonzero(~cp.isnan(x[:, col0 : col0 + ncols]), axis=1).astype(cp.int64)
        lo = cp.maximum((n - 1) // 2, 0)
        v1, left = self.kth(x, lo, col0, ncols)
        v1 = v1.astype(cp.float64)
        even = (n % 2 == 0) & (n > 0) & (left < 2)
        out = v1.copy()
        if bool(even.any()):  # the next value up: the least above v1
            seg = x[:, col0 : col0 + ncols]
            above = cp.where(seg > v1[:, None].astype(cp.float32), seg, cp.inf).min(axis=1)
            out = cp.where(even, 0.5 * (v1 + above.astype(cp.float64)), v1)
        return cp.where(n > 0, out, cp.nan)

    def robust_sigma(self, x: Any, med: Any | None = None) -> Any:
        """1.4826 x the MAD of each row's non-NaN values (float32 ``x``)."""
        cp = self.cp
        if med is None:
            med = self.median(x)
        dev = cp.abs(x - med[:, None].astype(cp.float32))
        return MAD_TO_SIGMA * self.median(dev)

    # --- the steps ----------------------------------------------------------------

    def normalise(self, x: Any, valid: Any | None, window: int) -> tuple[Any, Any | None]:
        """The reference's ``normalise`` on channel-major float32 ``x`` (nchan, nsamp)
        and ``valid`` (bool, the same shape, or None): (z float32 (nchan, nsamp),
        keep as float32 or None when every sample is kept)."""
        cp = self.cp
        nchan, nsamp = x.shape
        nblk = max(1, nsamp // max(1, int(window)))
        edges = np.rint(np.linspace(0, nsamp, nblk + 1)).astype(int)
        xm = x if valid is None else cp.where(valid, x, cp.float32(cp.nan))
        meds, mads = [], []
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            med = self.median(xm, int(a), int(b - a))
            dev = cp.abs(xm[:, a:b] - med[:, None].astype(cp.float32))
            dev = cp.ascontiguousarray(dev)
            meds.append(med)
            mads.append(self.median(dev))
        at = 0.5 * (edges[:-1] + edges[1:]) - 0.5
        med_t = self._fill(cp.stack(meds), at, nsamp)
        sig_t = self._fill(cp.stack(mads), at, nsamp) * MAD_TO_SIGMA
        live = cp.isfinite(sig_t) & (sig_t > 0)
        z = cp.where(live, (x - cp.nan_to_num(med_t)) / cp.where(live, sig_t, 1.0), 0.0)
        keep = live if valid is None else live & valid
        z = cp.where(keep, z, 0.0)
        use = keep & (cp.abs(z) < _CLIP)
        cnt = use.sum(axis=1)
        fill = cp.where(cnt > 0, (z * use).sum(axis=1) / cp.maximum(cnt, 1), 0.0)
        if valid is not None:
            z = cp.where(keep, z, cp.where(live, fill[:, None], 0.0))
        z32 = z.astype(cp.float32)
        if bool(keep.all()):
            return z32, None
        return z32, keep.astype(cp.float32)

    def _fill(self, v: Any, at: np.ndarray, nsamp: int) -> Any:
        """(nchan, nsamp) float64: each channel's block values ``v`` (nblk, nchan) at
        ``at``, interpolated as np.interp over its finite ones (NaN: none)."""
        cp = self.cp
        vh = cp.asnumpy(v)  # (nblk, nchan), small
        nblk, nchan = vh.shape
        good = np.isfinite(vh)
        m = good.sum(axis=0).astype(np.int32)
        kat = np.zeros((nchan, nblk))
        kval = np.zeros((nchan, nblk))
        for c in np.flatnonzero(m < nblk):  # channels missing a block: compact theirs
            kat[c, : m[c]] = at[good[:, c]]
            kval[c, : m[c]] = vh[good[:, c], c]
        full = m == nblk
        kat[full] = at[None, :]
        kval[full] = vh[:, full].T
        out = cp.empty((nchan, nsamp), dtype=cp.float64)
        self._interp(np.int64(nsamp), cp.asarray(kat), cp.asarray(kval), cp.asarray(m),
                     np.int32(nblk), out)  # fmt: skip
        return out

    def dedisperse(self, z: Any, d0: int, d1: int, nout: int) -> Any:
        """float32 (d1 - d0, nout): trials d0 .. d1 of channel-major ``z``."""
        cp = self.cp
        t = SearchTemplate
        nchan, nsamp = z.shape
        delays = self._delays_gpu[d0:d1]
        host = self.delays[d0:d1]
        ndm = d1 - d0
        if host.min() < 0 or host.max() + nout > nsamp:
            raise ConfigError("delays reach outside the filterbank: fewer output samples needed")
        # The largest offset of a trial from its block's first, over blocks and channels.
        firsts = host[:: t.DMS]
        lasts = host[np.minimum(np.arange(0, ndm, t.DMS) + t.DMS - 1, ndm - 1)]
        span = int((lasts - firsts).max())
        width = t.THREADS * t.TPT + span
        smem = 4 * (t.CG * width + t.CG * t.DMS + t.CG)
        fn = self.t.kernel("dedisperse_tile")
        if smem > 48 << 10:
            fn.max_dynamic_shared_size_bytes = smem
        out = cp.empty((ndm, nout), dtype=cp.float32)
        grid = (-(-nout // (t.THREADS * t.TPT)), -(-ndm // t.DMS))
        fn(grid, (t.THREADS,),
           (z, cp.ascontiguousarray(delays), out, np.int32(nchan), np.int64(nsamp),
            np.int32(ndm), np.int64(nout), np.int32(span)), shared_mem=smem)  # fmt: skip
        return out

    def giants(
        self, series: Any, cover: Any | None, widths: np.ndarray, dm_offset: int
    ) -> list[Giants]:
        """The reference's ``boxcar_snr`` and ``find_giants`` for every width."""
        cp = self.cp
        ndm, nout = series.shape
        frac_all = None
        if cover is None:
            med = self.median(series)
        else:
            cmax = cp.maximum(cover.max(axis=1, keepdims=True), 1e-300)
            ref = cover / cmax >= FULL_COVER
            med = self.median(cp.where(ref, series, cp.float32(cp.nan)))
            ccum = cp.zeros((ndm, nout + 1), dtype=cp.float64)
            cp.cumsum(cover.astype(cp.float64), axis=1, out=ccum[:, 1:])
            frac_all = ccum
        cs = cp.zeros((ndm, nout + 1), dtype=cp.float64)
        cp.cumsum(series.astype(cp.float64) - med[:, None], axis=1, out=cs[:, 1:])
        out = []
        for k, w in enumerate(widths):
            w = int(w)
            box = cs[:, w:] - cs[:, :-w]
            box32 = box.astype(cp.float32)
            frac = None
            if frac_all is not None:
                got = frac_all[:, w:] - frac_all[:, :-w]
                frac = got / cp.maximum(got.max(axis=1, keepdims=True), 1e-300)
                box32 = cp.where(frac >= FULL_COVER, box32, cp.float32(cp.nan))
            sigma = self.robust_sigma(box32)[:, None]
            if frac is not None:
                sigma = sigma * cp.sqrt(cp.where(frac >= MIN_COVER, frac, cp.inf))
            good = sigma > 0  # NaN (an empty row) is not
            snr = cp.where(good, box / cp.where(good, sigma, 1.0), 0.0)
            out.append(self._find(snr, k, dm_offset))
        return out

    def _find(self, snr: Any, filter_index: int, dm_offset: int) -> Giants:
        """``find_giants`` on the GPU: only the giants come back."""
        cp = self.cp
        st = self.settings
        width = 1 << filter_index
        rows, ts = cp.nonzero(snr > st.threshold)  # row-major order, as NumPy's
        if len(rows) == 0:
            return Giants.empty()
        vals = snr[rows, ts]
        gap = max(1, st.time_sep * width)
        new = cp.ones(len(rows), dtype=bool)
        new[1:] = (rows[1:] != rows[:-1]) | (ts[1:] - ts[:-1] > gap)
        starts = cp.flatnonzero(new)
        run = cp.cumsum(new) - 1
        # Each run's best: highest S/N, the earliest sample on a tie.
        order = cp.lexsort(cp.stack([cp.arange(len(rows)), -vals, run]))
        ro = run[order]
        lead = order[cp.flatnonzero(cp.concatenate([cp.ones(1, bool), ro[1:] != ro[:-1]]))]
        last = cp.concatenate([starts[1:], cp.asarray([len(rows)])]) - 1
        h = cp.asnumpy
        return Giants(
            snr=h(vals[lead]).astype(np.float64),
            peak=h(ts[lead]).astype(np.int64),
            begin=h(ts[starts]).astype(np.int64),
            end=h(ts[last]).astype(np.int64) + width - 1,
            dm_index=h(rows[starts]).astype(np.int64) + dm_offset,
            filter_index=np.full(len(starts), filter_index, dtype=np.int64),
        )

    # --- one gulp -------------------------------------------------------------------

    def search(self, data: Any, mask: Any | None = None, first_sample: int = 0) -> SearchResult:
        """``search_filterbank(data, freqs, tsamp, mask, settings, first_sample=...)``
        on the GPU. ``data``: (nsamp, nchan) intensities, NumPy or CuPy."""
        cp = self.cp
        st = self.settings
        nchan = len(self.freqs)
        check_gulp_shape(data, nchan)
        nsamp = data.shape[0]
        nout, widths = searched_widths(nsamp, self.max_delay, st.boxcar_max, self.tsamp,
                                       self.dms[-1])  # fmt: skip
        x = cp.ascontiguousarray(cp.asarray(data, dtype=cp.float32).T)
        valid = None
        if mask is not None:
            m = cp.asarray(mask, dtype=bool)
            if m.shape not in ((nsamp, nchan), (nsamp,)):
                raise ConfigError(f"mask of shape {m.shape} for data of shape {data.shape}: "
                                  "give (nsamp,) or (nsamp, nchan)")  # fmt: skip
            valid = cp.ascontiguousarray(
                cp.broadcast_to(m[None, :], (nchan, nsamp)) if m.ndim == 1 else m.T
            )
        window = max(16, int(round(st.window_s / self.tsamp)))
        z, weight = self.normalise(x, valid, window)
        del x, valid
        block = max(SearchTemplate.DMS, min(len(self.dms), self.mem_bytes // (24 * max(nout, 1))))
        parts: list[Giants] = []
        for d0 in range(0, len(self.dms), block):
            d1 = min(len(self.dms), d0 + block)
            series = self.dedisperse(z, d0, d1, nout)
            cover = None if weight is None else self.dedisperse(weight, d0, d1, nout)
            parts += self.giants(series, cover, widths, d0)
            del series, cover
        giants = Giants.concat(parts)
        cands = cluster(
            giants, self.dms, self.tsamp, time_sep=st.time_sep, dm_sep=st.dm_sep,
            filter_sep=st.filter_sep, first_sample=first_sample,
        )  # fmt: skip
        return SearchResult(
            candidates=cands,
            dms=self.dms,
            widths=widths,
            nout=nout,
            n_trials=int(sum(len(self.dms) * (nout - w + 1) for w in widths)),
            n_giants=len(giants),
            ref_freq_mhz=self.ref,
            tsamp_s=self.tsamp,
            first_sample=first_sample,
            settings=st,
            giants=giants,
        )
