"""The GPU single-pulse search (search/gpu_single_pulse.py) against the NumPy float64
reference (search/single_pulse.py): its selections, normalisation and dedispersion
step by step, then whole searches giant for giant (DM index, time, width, S/N),
with and without lost samples, and `voltstream search --device gpu` end to end.
Marked ``gpu``: CI deselects them; scripts/gpu.sh test runs them on the GPU machine.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sp_data
from voltstream.search.single_pulse import (
    SearchSettings,
    dedisperse,
    delay_table,
    dm_trials,
    normalise,
    robust_sigma,
    search_filterbank,
)

pytestmark = pytest.mark.gpu

SETTINGS = SearchSettings(dm_min=400.0, dm_max=600.0, boxcar_max=64, dm_block=32)


@pytest.fixture(scope="module")
def cp():
    import cupy

    from voltstream.device import gpu_available

    assert gpu_available(), "no CUDA device visible to CuPy"
    return cupy


@pytest.fixture(scope="module")
def burst():
    return sp_data.simulated("frb", 3, burst=sp_data.BURST)


def engine(freqs, tsamp, settings=SETTINGS, **kw):
    from voltstream.search.gpu_single_pulse import GpuSinglePulse

    return GpuSinglePulse(freqs, tsamp, settings, **kw)


def giant_rows(g):
    """Giants as sorted rows (dm_index, filter, peak, begin, end) and their S/N."""
    keys = np.stack([g.dm_index, g.filter_index, g.peak, g.begin, g.end], axis=1)
    order = np.lexsort(keys.T[::-1])
    return keys[order], g.snr[order]


def assert_same_giants(ref, got, threshold):
    """Every giant of one is the other's, with S/N equal to 1e-4; a giant within 1e-4
    of the threshold may be on either side of it (float32 sums against float64)."""
    near = 1e-4 * max(threshold, 1.0)
    rk, rs = giant_rows(ref)
    gk, gs = giant_rows(got)
    rkeep = np.abs(rs - threshold) > near
    gkeep = np.abs(gs - threshold) > near
    assert np.array_equal(rk[rkeep], gk[gkeep]), "the giants differ"
    np.testing.assert_allclose(gs[gkeep], rs[rkeep], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1001])
def test_kth_and_median_equal_numpy(cp, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((37, n)).astype(np.float32)
    x[3, : n // 2] = np.nan  # a row with values left out
    x[5] = np.nan  # a row with none
    x[7, :] = 1.5  # ties
    x[9, : n // 2] = -0.0
    eng = engine(np.linspace(1400, 1416, 8), 1e-3, SearchSettings(dm_max=10))
    got = cp.asnumpy(eng.median(cp.asarray(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the all-NaN row
        want = np.nanmedian(x.astype(np.float64), axis=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=0, atol=0)
    ok = ~np.isnan(x).any(axis=1)
    sig = cp.asnumpy(eng.robust_sigma(cp.asarray(x[ok])))
    np.testing.assert_allclose(sig, robust_sigma(x[ok].astype(np.float64)), rtol=1e-6)


def test_normalise_equals_reference(cp, burst):
    data, freqs, tsamp = burst
    eng = engine(freqs, tsamp)
    window = 1500  # several windows, the last uneven
    rng = np.random.default_rng(1)
    valid = rng.random(data.shape) > 0.01
    valid[:, 7] = False  # a dead channel
    valid[2000:2600] = False  # a gap
    for mask in (None, valid):
        z, w = normalise(data, mask, window)
        x = cp.ascontiguousarray(cp.asarray(data).T)
        v = None if mask is None else cp.ascontiguousarray(cp.asarray(mask).T)
        gz, gw = eng.normalise(x, v, window)
        np.testing.assert_allclose(cp.asnumpy(gz).T, z, rtol=1e-5, atol=1e-5)
        assert (gw is None) == (w is None)
        if w is not None:
            np.testing.assert_array_equal(cp.asnumpy(gw).T, w)


def test_dedisperse_equals_reference(cp, burst):
    data, freqs, tsamp = burst
    eng = engine(freqs, tsamp)
    z, _ = normalise(data)
    nout = data.shape[0] - eng.max_delay
    zt = cp.ascontiguousarray(cp.asarray(z.astype(np.float32)).T)
    for d0, d1 in ((0, len(eng.dms)), (3, 20), (len(eng.dms) - 5, len(eng.dms))):
        got = cp.asnumpy(eng.dedisperse(zt, d0, d1, nout))
        want = dedisperse(z.astype(np.float32), eng.delays[d0:d1], nout)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-3)


def test_dedisperse_wide_span_and_odd_channels(cp):
    """Many channels, a sweep of thousands of samples, a channel count that is no
    multiple of the tile's channel group, trials that are no multiple of its block."""
    rng = np.random.default_rng(5)
    freqs = np.linspace(1336.0, 1464.0, 203)
    tsamp = 64e-6
    st = SearchSettings(dm_min=0, dm_max=2000.0)
    eng = engine(freqs, tsamp, st)
    dms = dm_trials(0, 2000, freqs, tsamp)
    assert len(eng.dms) == len(dms) and len(dms) % 8
    z = rng.standard_normal((eng.max_delay + 3000, len(freqs))).astype(np.float32)
    zt = cp.ascontiguousarray(cp.asarray(z).T)
    got = cp.asnumpy(eng.dedisperse(zt, 0, len(dms), 3000))
    want = dedisperse(z, delay_table(dms, freqs, tsamp, freqs.max()), 3000)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)


@pytest.mark.parametrize("lost", [False, True])
def test_search_equals_reference(cp, burst, lost):
    data, freqs, tsamp = burst
    mask = None
    if lost:
        mask = np.ones(data.shape, bool)
        mask[1000:1400] = False
        mask[:, 100:140] = False
    st = SearchSettings(dm_min=400, dm_max=600, boxcar_max=64, threshold=5.0)
    ref = search_filterbank(data, freqs, tsamp, mask, st)
    got = engine(freqs, tsamp, st, mem_bytes=1 << 26).search(data, mask)
    assert got.nout == ref.nout and np.array_equal(got.widths, ref.widths)
    assert got.n_trials == ref.n_trials
    assert len(ref.giants) > 10
    assert_same_giants(ref.giants, got.giants, st.threshold)
    best_r, best_g = ref.candidates[0], got.candidates[0]
    assert (best_g.dm_index, best_g.sample_index, best_g.boxcar_filter) == (
        best_r.dm_index, best_r.sample_index, best_r.boxcar_filter)  # fmt: skip
    assert best_g.snr == pytest.approx(best_r.snr, rel=1e-4)


def test_noise_search_equals_reference(cp):
    data, freqs, tsamp = sp_data.simulated("noise", 11)
    st = SearchSettings(dm_min=0, dm_max=300, boxcar_max=128, threshold=4.0)
    ref = search_filterbank(data, freqs, tsamp, None, st, first_sample=100)
    got = engine(freqs, tsamp, st).search(cp.asarray(data), None, first_sample=100)
    assert len(ref.giants) > 50  # noise crosses 4 sigma (194 giants): a real comparison
    assert_same_giants(ref.giants, got.giants, st.threshold)


def test_search_file_on_the_gpu(cp, tmp_path):
    """pipeline/search.py with the GPU engine: the reference's candidates, gulps and all."""
    from voltstream.io.sigproc import SigprocWriter, read_filterbank
    from voltstream.observation import Observation
    from voltstream.pipeline.search import search_file

    data, freqs, tsamp = sp_data.simulated("frb", 4, burst=sp_data.BURST)
    obs = Observation(nchan=len(freqs), npol=1, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=tsamp,
                      nbit=32)  # fmt: skip
    path = tmp_path / "b.fil"
    w = SigprocWriter(path, obs, 1)
    w.write_row(data[:, None, :].astype(np.float32))
    w.close()
    fil = read_filterbank(str(path))
    st = SearchSettings(dm_min=400, dm_max=600, boxcar_max=64)
    ref = search_file(fil, st, gulp_s=0.05)
    got = search_file(fil, st, gulp_s=0.05, device="gpu")
    assert ref.gulps > 1 and got.gulps == ref.gulps
    assert len(got.candidates) == len(ref.candidates) >= 1
    for a, b in zip(ref.candidates, got.candidates, strict=True):
        assert (a.dm_index, a.sample_index, a.boxcar_filter) == (
            b.dm_index, b.sample_index, b.boxcar_filter)  # fmt: skip
        assert b.snr == pytest.approx(a.snr, rel=1e-4)
