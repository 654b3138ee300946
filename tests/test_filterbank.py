"""The search filterbank's NumPy reference (search/filterbank.py) against computations
written here from first principles: an explicit DFT per fine channel, a tone landing in
its fine channel at its sky frequency for both sidebands, the output's sampling and
start, lost samples, and coherent dedispersion within fine channels."""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.dsp.dedisperse import DISPERSION_CONSTANT, chirps
from voltstream.errors import ConfigError
from voltstream.observation import Observation
from voltstream.search.filterbank import FilterbankPlan, FilterbankReference, FilterbankSettings


def obs_of(chan_bw=1.0, nchan=2, npol=2, freq=1400.0, start_sec=100.0):
    return Observation(nchan=nchan, npol=npol, freq_mhz=freq, bw_mhz=chan_bw * nchan,
                       tsamp_s=1e-6 / abs(chan_bw), start_mjd=60000,
                       start_sec=start_sec)  # fmt: skip


def run(obs, settings, x, valid=None, pieces=3):
    """The reference fed ``x`` (n, nchan, npol) in uneven pieces; all its output."""
    eng = FilterbankReference(FilterbankPlan(obs, settings))
    cuts = np.linspace(0, len(x), pieces + 1).astype(int) + np.arange(pieces + 1) * 7
    cuts = np.clip(cuts, 0, len(x))
    outs, oks = [], []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        v = None if valid is None else valid[a:b]
        out, ok = eng.feed(x[a:b], v)
        outs.append(out)
        oks.append(ok)
    return np.concatenate(outs), np.concatenate(oks), eng


def brute(x, m, nint, pol):
    """Explicit DFT: output[n, p, c * m + j] = sum over the nint spectra of n of
    |sum_k x[k] exp(-2 pi i (j - m/2) k / m)|^2 / m, detected as ``pol`` says."""
    n_out = len(x) // (m * nint)
    nchan, npol = x.shape[1:]
    k = np.arange(m)
    w = np.exp(-2j * np.pi * np.outer(np.arange(m) - m // 2, k) / m)  # (j, k)
    npo = {"I": 1, "AABB": 2}[pol]
    out = np.zeros((n_out, npo, nchan * m))
    for n in range(n_out):
        for s in range(nint):
            seg = x[(n * nint + s) * m : (n * nint + s + 1) * m]  # (m, nchan, npol)
            for c in range(nchan):
                for p in range(npol):
                    power = np.abs(w @ seg[:, c, p]) ** 2 / m
                    out[n, 0 if pol == "I" else p, c * m : (c + 1) * m] += power
    return out


@pytest.mark.parametrize("pol", ["I", "AABB"])
def test_reference_equals_an_explicit_dft(pol):
    rng = np.random.default_rng(5)
    m, nint = 8, 3
    x = rng.normal(size=(m * nint * 5 + 4, 2, 2)) + 1j * rng.normal(size=(m * nint * 5 + 4, 2, 2))
    out, ok, eng = run(obs_of(), FilterbankSettings(m, 3 * 8e-6, pol), x)
    assert out.shape == (5, 1 if pol == "I" else 2, 16) and ok.all()
    np.testing.assert_allclose(out, brute(x, m, nint, pol), rtol=1e-10)
    assert eng.samples_in == len(x) and eng.samples_out == 5


@pytest.mark.parametrize("chan_bw", [1.0, -1.0])  # upper and lower sideband
@pytest.mark.parametrize("c0,j0", [(0, 3), (1, 13), (1, 8)])
def test_a_tone_lands_in_its_fine_channel_at_its_sky_frequency(chan_bw, c0, j0):
    m, nchan = 16, 2
    obs = obs_of(chan_bw, nchan)
    plan = FilterbankPlan(obs, FilterbankSettings(m))
    nu = (j0 - m // 2) * abs(chan_bw) / m  # baseband MHz, the bin's centre
    t = np.arange(m * 20) * obs.tsamp_s * 1e6  # us
    x = np.zeros((len(t), nchan, 1), complex)
    x[:, c0, 0] = np.exp(2j * np.pi * nu * t)
    out, _, _ = run(Observation(**{**obs.__dict__, "npol": 1}), FilterbankSettings(m), x)
    peak = out.sum(axis=0)[0].argmax()
    assert peak == c0 * m + j0
    assert out[:, 0, peak] == pytest.approx(m)  # all its power, orthonormal FFT
    # Sky frequency of the tone: the coarse channel's centre, offset by nu with the
    # sideband's sign; the plan's channel there is that frequency.
    sky = obs.chan_freqs_mhz[c0] + np.sign(chan_bw) * nu
    assert plan.chan_freqs_mhz[peak] == pytest.approx(sky, abs=1e-9)
    assert plan.foff_mhz == chan_bw / m  # descending for the lower sideband
    assert plan.fch1_mhz == pytest.approx(1400.0 - chan_bw * nchan / 2)


def test_sampling_and_start_of_the_output():
    obs = obs_of(start_sec=86399.99999)
    plan = FilterbankPlan(obs, FilterbankSettings(32, 32 * 4e-6))
    assert plan.nint == 4 and plan.tsamp_s == pytest.approx(128e-6)
    out = plan.out_obs
    assert (out.start_mjd, out.start_sec) == (60000, 86399.99999)
    np.testing.assert_allclose(out.chan_freqs_mhz, plan.chan_freqs_mhz, rtol=0, atol=1e-9)
    dd = FilterbankPlan(obs, FilterbankSettings(32, dm=30.0))
    assert dd.first_input > 0  # starts later by the filter's head, the day carried over
    sec = 86399.99999 + dd.first_input * 1e-6
    assert (dd.out_obs.start_mjd, dd.out_obs.start_sec) == (60001, pytest.approx(sec - 86400))


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"fine_channels": 12}, "power of two"),
        ({"fine_channels": 8, "tsamp_s": 12e-6}, "whole number of fine samples"),
        ({"tsamp_s": float("nan")}, "positive"),
        ({"tsamp_s": -1.0}, "positive"),
        ({"pol": "IQUV"}, "2 polarisations"),
        ({"nbits": 16}, "use 8"),
    ],
)
def test_bad_settings_say_what_to_do(kw, words):
    with pytest.raises(ConfigError, match=words):
        FilterbankPlan(obs_of(npol=1), FilterbankSettings(**kw))


def test_a_lost_input_sample_flags_its_output_sample_only():
    rng = np.random.default_rng(2)
    m, nint = 4, 2
    x = rng.normal(size=(m * nint * 6, 2, 2)) + 0j
    valid = np.ones(len(x), bool)
    valid[m * nint * 3 + 5] = False  # in output sample 3
    garbage = x.copy()
    garbage[~valid] = 1e6  # what a reader may leave there
    out, ok, eng = run(obs_of(), FilterbankSettings(m, nint * m * 1e-6), garbage, valid)
    assert list(np.flatnonzero(~ok)) == [3] and eng.lost_in == 1 and eng.lost_out == 1
    clean, _, _ = run(obs_of(), FilterbankSettings(m, nint * m * 1e-6), x)
    np.testing.assert_allclose(out[ok], clean[ok])
    assert out[3].max() < 1e3  # zeroed, not the garbage


def test_dm_zero_is_the_identity():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4096, 2, 2)) + 1j * rng.normal(size=(4096, 2, 2))
    plain, _, _ = run(obs_of(), FilterbankSettings(16), x)
    dd, _, eng = run(obs_of(), FilterbankSettings(16, dm=0.0), x)
    assert eng.plan.first_input == 0
    np.testing.assert_allclose(dd, plain[: len(dd)], rtol=1e-9, atol=1e-9)


def test_coherent_dedispersion_leaves_each_fine_channel_its_own_delay():
    """A dispersed impulse in one coarse channel: with --dm each fine channel's power
    peaks at its own centre's delay (what an incoherent search at that DM expects), in
    about three output samples; without, it smears over about eight."""
    dm, m, cbw, f = 30.0, 16, 1.0, 500.0
    obs = Observation(nchan=1, npol=1, freq_mhz=f, bw_mhz=cbw, tsamp_s=1e-6)
    n = 1 << 15
    impulse = np.zeros(n, complex)
    impulse[n // 4] = 1.0
    # Disperse: the inverse of the dedispersion chirp (DC kept).
    h = chirps(dm, [f], cbw, n)[0]
    h[0] = 1.0
    x = np.fft.ifft(np.fft.fft(impulse) / h)[:, None, None]
    plan = FilterbankPlan(obs, FilterbankSettings(m, dm=dm))
    out, _, _ = run(obs, FilterbankSettings(m, dm=dm), x, pieces=4)
    raw, _, _ = run(obs, FilterbankSettings(m), x, pieces=4)
    fine = plan.chan_freqs_mhz
    for j in range(2, m):  # fine channel 0 holds both edges; 1 borders it
        expect = DISPERSION_CONSTANT * dm * (1 / fine[j] ** 2 - 1 / f**2) * 1e6  # us
        at = (n // 4 + expect - plan.first_input) / m  # output samples
        series = out[:, 0, j]
        assert abs(series.argmax() - at) <= 1.0, j
        # Within about a fine channel's response (1 / foff, M input samples) of it...
        assert np.sort(series)[-3:].sum() > 0.7 * series.sum()
        assert raw[:, 0, j].max() < 0.4 * series.max()  # ...while smeared without
