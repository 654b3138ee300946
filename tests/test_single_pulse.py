"""The single-pulse search reference (search/single_pulse.py, search/candidates.py) on
filterbanks made from the simulator's voltages (tests/sp_data.py): a dispersed burst
found at its DM, time and radiometer S/N as one candidate; pure noise quiet above 7
sigma but for the false alarms its trials allow; lost samples never a burst; and the
pieces (DM grid, dedispersion, boxcars, clustering, candidate lines) each against a
direct computation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import poisson

from sp_data import BURST, DM, OBS, simulated
from voltstream.dsp.dedisperse import DISPERSION_CONSTANT, dispersion_delay_s
from voltstream.errors import ConfigError
from voltstream.search.candidates import (
    COLUMNS,
    Candidate,
    Giants,
    cluster,
    read_candidates,
    write_candidates,
)
from voltstream.search.single_pulse import (
    SearchSettings,
    boxcar_snr,
    dedisperse,
    delay_table,
    dm_trials,
    normalise,
    search_filterbank,
)

WINDOW_S = 0.04  # the normalisation window: five in the 0.2 s
# For a burst, one window over the whole 0.2 s: a window's median and MAD carry a
# share of the burst (its samples shift the ranks), a few percent of its S/N in a
# 1250-sample window, none to speak of in the default 2 s.
BURST_WINDOW_S = 0.2


@pytest.fixture(scope="module")
def burst_fb():
    return simulated("frb", seed=11, burst=BURST)


@pytest.fixture(scope="module")
def noise_fb():
    return simulated("noise", seed=12)


def test_a_burst_is_found_at_its_dm_time_and_radiometer_snr_as_one_candidate(burst_fb):
    data, freqs, tsamp = burst_fb
    st = SearchSettings(dm_min=400, dm_max=600, window_s=BURST_WINDOW_S)
    res = search_filterbank(data, freqs, tsamp, settings=st)
    c = res.candidates[0]
    assert abs(c.dm - DM) / DM < 0.01
    # Times are arrivals at the top channel's frequency (heimdall's convention).
    t_top = BURST.times_s[0] + dispersion_delay_s(DM, freqs.max(), OBS.freq_mhz)
    assert res.ref_freq_mhz == freqs.max()
    assert abs(c.time_s - t_top) < BURST.width_s
    # Anything else is noise (6 sigma: a few percent of such searches see one).
    assert all(o.snr < 7 and o.members < 5 for o in res.candidates[1:]), res.candidates
    # The radiometer equation for the best-placed boxcar the search has (sim/burst.py):
    # smearing in a channel, sampling and the DM grid may cost a little, never 20%.
    expect = max(BURST.radiometer_snr(OBS.npol, 16e6, int(w) * tsamp) for w in res.widths)
    assert abs(c.snr / expect - 1) < 0.2, (c.snr, expect)
    # Clustering: the burst is seen at many DM trials and widths, reported once.
    others = sum(o.members for o in res.candidates[1:])
    assert c.members > 100 and c.members == res.n_giants - others
    assert c.first_sample <= c.sample_index <= c.last_sample
    assert not any(c.first_sample <= o.sample_index <= c.last_sample for o in res.candidates[1:])


def test_pure_noise_gives_no_candidate_above_7_sigma_beyond_its_false_alarms(noise_fb):
    data, freqs, tsamp = noise_fb
    st = SearchSettings(dm_min=0, dm_max=200, window_s=WINDOW_S, threshold=4.5)
    res = search_filterbank(data, freqs, tsamp, settings=st)
    # Every (trial, boxcar, sample) counted as independent: an upper bound on the
    # Gaussian false alarms; allowed, the count pure chance exceeds once in 1000.
    expected = res.expected_false_alarms(7.0)
    allowed = poisson.ppf(0.999, expected)
    above = [c for c in res.candidates if c.snr >= 7.0]
    assert len(above) <= allowed, (above, expected)
    # ... and the S/N is not deflated: at 4.5 sigma noise does cross, in clusters no
    # more than the trials allow (each cluster holds one crossing or more).
    assert 0 < len(res.candidates) <= poisson.ppf(0.999, res.expected_false_alarms(4.5))
    assert all(c.members >= 1 for c in res.candidates)


def test_noise_snr_is_unit_normal_for_every_boxcar(noise_fb):
    data, freqs, tsamp = noise_fb
    z, weight = normalise(data, window=int(WINDOW_S / tsamp))
    assert weight is None  # nothing lost
    dms = np.array([0.0, 100.0])
    delays = delay_table(dms, freqs, tsamp, freqs.max())
    series = dedisperse(z, delays, data.shape[0] - int(delays.max()))
    for w in (1, 8, 64):
        snr = boxcar_snr(series, w)[:, ::w]  # independent boxcars
        tol = 4 / np.sqrt(snr.size)  # four standard errors of the mean
        assert abs(snr.mean()) < tol and abs(snr.std() - 1) < tol, (w, snr.mean(), snr.std())


@pytest.mark.parametrize("fill", ["zeros", "glitch"])
def test_lost_samples_are_not_reported_as_a_burst(noise_fb, fill):
    """A stretch of lost samples, written as zeros (a whole normalisation window of
    them pulls the median to 0) or as a glitch of high values: unmasked, the search
    reports it; masked, nothing."""
    data, freqs, tsamp = noise_fb
    window = int(round(WINDOW_S / tsamp))
    lost = np.zeros(data.shape[0], dtype=bool)
    if fill == "zeros":
        lost[window : 2 * window] = True
    else:
        lost[3000:3040] = True
    bad = data.copy()
    bad[lost] = 0.0 if fill == "zeros" else 3.0 * np.median(data, axis=0)
    st = SearchSettings(dm_min=0, dm_max=50, window_s=WINDOW_S, threshold=6.0)
    unmasked = search_filterbank(bad, freqs, tsamp, settings=st)
    assert unmasked.candidates, "the test's loss must look like a burst without the mask"
    for mask in (~lost, np.repeat(~lost[:, None], data.shape[1], axis=1)):
        res = search_filterbank(bad, freqs, tsamp, mask=mask, settings=st)
        assert res.candidates == [], res.candidates[:3]


def test_a_burst_across_lost_channels_is_still_found(burst_fb):
    data, freqs, tsamp = burst_fb
    mask = np.ones(data.shape, dtype=bool)
    mask[:, 100:200] = False  # a fifth of the band lost all the time
    bad = data.copy()
    bad[:, 100:200] = 1e6  # whatever is there is never read
    st = SearchSettings(dm_min=450, dm_max=550, window_s=BURST_WINDOW_S)
    c = search_filterbank(bad, freqs, tsamp, mask=mask, settings=st).candidates[0]
    assert abs(c.dm - DM) / DM < 0.01 and c.snr > 30


def test_dm_trials_follow_the_smearing_budget():
    freqs = 1392.0 + 0.03125 * np.arange(512)
    tsamp, width, tol = 32e-6, 40e-6, 1.25
    dms = dm_trials(0.0, 600.0, freqs, tsamp, tol, width)
    assert dms[0] == 0.0 and dms[-2] < 600.0 <= dms[-1] and np.all(np.diff(dms) > 0)
    s = DISPERSION_CONSTANT * (freqs.min() ** -2 - freqs.max() ** -2)
    b = 0.03125
    for lo, hi in zip(dms[:-1], dms[1:], strict=True):
        w0 = np.sqrt(
            tsamp**2 + width**2 + (2 * DISPERSION_CONSTANT * lo * b / freqs.min() ** 3) ** 2
        )
        # Half-way between two trials a pulse is widened by exactly the tolerance.
        assert np.hypot(w0, s * (hi - lo) / 2) == pytest.approx(tol * w0, rel=1e-9)
    assert len(dm_trials(0.0, 600.0, freqs, tsamp, 1.1, width)) > 1.5 * len(dms)


def test_dedispersion_and_boxcars_equal_direct_sums():
    rng = np.random.default_rng(5)
    z = rng.standard_normal((300, 7))
    freqs = np.array([1500.0, 1480, 1460, 1440, 1420, 1400, 1380])
    dms = np.array([0.0, 30.0, 75.0])
    delays = delay_table(dms, freqs, 1e-4, 1500.0)
    assert delays[0].max() == 0 and np.all(np.diff(delays[2]) > 0)
    nout = 300 - int(delays.max())
    got = dedisperse(z, delays, nout)
    for d in range(3):
        for t in (0, 17, nout - 1):
            assert got[d, t] == pytest.approx(sum(z[t + delays[d, c], c] for c in range(7)))
    snr = boxcar_snr(got, 4)
    med = np.median(got[1])
    sums = np.array([got[1, t : t + 4].sum() - 4 * med for t in range(nout - 3)])
    sigma = 1.482602218505602 * np.median(np.abs(sums - np.median(sums)))
    assert snr[1, 10] == pytest.approx(sums[10] / sigma)
    assert snr.shape == (3, nout - 3)


def _giants(rows):
    """Giants from (snr, peak, begin, end, dm_index, filter_index) rows."""
    a = np.array(rows, dtype=np.float64)
    i = a[:, 1:].astype(np.int64)
    return Giants(a[:, 0], i[:, 0], i[:, 1], i[:, 2], i[:, 3], i[:, 4])


def test_friends_of_friends_chains_neighbours_and_keeps_strangers_apart():
    g = _giants([
        (8.0, 100, 100, 103, 10, 0),  # A
        (9.5, 104, 104, 106, 12, 1),  # B: A's friend (time gap 1, DM 2, filter 1)
        (7.0, 108, 108, 110, 14, 2),  # C: B's friend, not A's (5 samples after A)
        (12.0, 500, 500, 501, 10, 0),  # D: another time
        (6.5, 101, 101, 102, 250, 0),  # E: A's time, 240 DM trials away
        (6.1, 106, 106, 107, 16, 4),  # F: C's neighbour in time and DM, 2 filters
    ])  # fmt: skip
    dms = np.arange(300) * 2.0
    cands = cluster(g, dms, 1e-3, time_sep=3, dm_sep=200, filter_sep=1)
    assert [(c.snr, c.members) for c in cands] == [(12.0, 1), (9.5, 3), (6.5, 1), (6.1, 1)]
    abc = cands[1]
    assert (abc.first_sample, abc.last_sample, abc.dm_index, abc.dm) == (100, 110, 12, 24.0)
    assert abc.boxcar_filter == 1 and abc.sample_index == 104 + 1  # the boxcar's centre
    assert abc.time_s == pytest.approx(0.105)
    # With the filter separation heimdall uses (3), F joins the chain too.
    assert [c.members for c in cluster(g, dms, 1e-3)] == [1, 4, 1]


def test_candidate_lines_are_heimdalls_columns_and_read_back(tmp_path):
    cands = [
        Candidate(13.2, 2752, 0.088064, 2, 48, 499.83, 210, 2669, 2886),
        Candidate(7.5, 100, 0.0032, 0, 3, 5.5, 1, 100, 100),
    ]
    path = tmp_path / "x.cand"
    write_candidates(path, cands)
    lines = path.read_text().splitlines()
    assert len(COLUMNS) == 9 and lines[0].split("\t")[:6] == [
        "7.5",
        "100",
        "0.003200000",
        "0",
        "3",
        "5.5",
    ]
    assert read_candidates(path) == sorted(cands, key=lambda c: c.sample_index)


def test_bad_inputs_are_one_clear_line():
    data = np.ones((100, 4), dtype=np.float32)
    freqs = np.array([1400.0, 1401, 1402, 1403])
    with pytest.raises(ConfigError, match="--dm-min <= --dm-max"):
        search_filterbank(data, freqs, 1e-3, settings=SearchSettings(dm_min=10, dm_max=5))
    with pytest.raises(ConfigError, match="after the dispersion sweep"):
        search_filterbank(data, freqs, 1e-4, settings=SearchSettings(dm_max=5000))
    with pytest.raises(ConfigError, match="mask of shape"):
        search_filterbank(
            data, freqs, 1e-3, mask=np.ones(99, bool), settings=SearchSettings(dm_max=1)
        )
    with pytest.raises(ConfigError, match="one frequency per channel"):
        search_filterbank(data, freqs[:3], 1e-3)
