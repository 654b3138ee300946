import numpy as np
import pytest

from voltstream.errors import ConfigError
from voltstream.fold.reference import Folder, profile_snr
from voltstream.io.polyco import ConstantPeriod
from voltstream.observation import Observation

D = 4149.377593360996
TSAMP = 1e-6
PERIOD = 1.024e-3  # 1024 samples: 8 samples per bin at 128 bins


def make_folder(nchan=1, npol_out=1, freqs=(1400.0,), f_ref=1400.0, dm=0.0, tsub=None, **kw):
    pred = ConstantPeriod(PERIOD, 60000, 10.0)
    return Folder(
        nbin=128, nchan=nchan, npol_out=npol_out, tsamp_s=TSAMP, chan_freqs_mhz=np.array(freqs),
        f_ref_mhz=f_ref, dm=dm, predictor=pred, tsub_s=tsub, start_mjd=60000, start_sec=10.0,
        **kw,
    )  # fmt: skip


def pulse_train(rng, nsamp, on_lo, on_hi, height=5.0, shift_s=0.0):
    """Noise plus a boxcar at phases [on_lo, on_hi), optionally delayed."""
    t = np.arange(nsamp) * TSAMP - shift_s
    ph = (t / PERIOD) % 1.0
    return rng.exponential(1.0, nsamp) + height * ((ph >= on_lo) & (ph < on_hi))


def test_known_pulse_lands_in_its_bins():
    rng = np.random.default_rng(1)
    f = make_folder()
    x = pulse_train(rng, 200 * 1024, 0.40625, 0.4375)  # bins 52..55
    # fed in uneven pieces, with a fixed first-sample bookkeeping
    for a, b in [(0, 1000), (1000, 77777), (77777, 200 * 1024)]:
        f.add(x[None, None, a:b], a)
    arch = f.result(Observation(1, 1, 1400.0, 1.0, TSAMP))
    prof = arch.data[0, 0, 0]
    on = np.zeros(128, bool)
    on[52:56] = True
    assert np.all(prof[on] > 5.5) and np.all(np.abs(prof[~on] - 1.0) < 0.3)
    assert arch.weights[0, 0] == pytest.approx(1.0)
    assert arch.tsubint_s[0] == pytest.approx(200 * 1024 * TSAMP)
    assert arch.period_s[0] == pytest.approx(PERIOD)


def test_channels_are_aligned_by_dispersion_delay():
    rng = np.random.default_rng(2)
    freqs = np.array([400.0, 410.0, 420.0, 430.0])
    dm = 0.05
    f = make_folder(nchan=4, freqs=freqs, f_ref=415.0, dm=dm)
    n = 300 * 1024
    data = np.empty((4, 1, n))
    for c, fc in enumerate(freqs):
        delay = D * dm * (1 / fc**2 - 1 / 415.0**2)  # independent of the code
        data[c, 0] = pulse_train(rng, n, 0.7, 0.725, shift_s=delay)
    assert abs(D * dm * (1 / 400.0**2 - 1 / 430.0**2)) > 0.1 * PERIOD  # really dispersed
    f.add(data, 0)
    arch = f.result(Observation(4, 1, 415.0, 40.0, TSAMP))
    peaks = arch.data[0, 0].argmax(axis=-1)
    on = np.arange(128)[(np.arange(128) + 0.5) / 128 >= 0.7][:3]
    for c in range(4):
        assert peaks[c] in on
        assert arch.data[0, 0, c, on].min() > 4


def test_invalid_samples_never_enter_profiles_and_lower_weights():
    rng = np.random.default_rng(3)
    f = make_folder(nchan=2, freqs=(1400.0, 1401.0), f_ref=1400.5, tsub=0.05)
    n = 100_000  # two sub-integrations
    x = np.stack([pulse_train(rng, n, 0.1, 0.15), pulse_train(rng, n, 0.1, 0.15)])[:, None]
    valid = np.ones((2, n), bool)
    valid[1, 60_000:70_000] = False  # lost in channel 1, second sub-integration
    x[1, 0, 60_000:70_000] = 1e6  # garbage that must not show up
    f.add(x, 0, valid=valid)
    arch = f.result(Observation(2, 1, 1400.5, 2.0, TSAMP))
    assert arch.nsub == 2
    # (a sample exactly on a boundary may fall either side of it)
    np.testing.assert_allclose(arch.tsubint_s, [0.05, 0.05], atol=1.01 * TSAMP)
    np.testing.assert_allclose(arch.offs_sub_s, [0.025, 0.075], atol=1.01 * TSAMP)
    np.testing.assert_allclose(arch.weights, [[1.0, 1.0], [1.0, 0.8]], atol=1e-4)
    assert arch.data.max() < 20
    assert arch.excluded_samples == 10_000 // 2
    # 1-D mask: the same samples lost in every channel
    g = make_folder()
    v1 = np.ones(n, bool)
    v1[:25_000] = False
    g.add(x[:1], 0, valid=v1)
    assert g.result(Observation(1, 1, 1400.0, 1.0, TSAMP)).weights[0, 0] == pytest.approx(0.75)


def test_subintegrations_and_phase_from_start_time():
    # first_sample offsets time: a stream starting mid-period must fold the same.
    rng = np.random.default_rng(4)
    n = 50 * 1024
    x = pulse_train(rng, n + 512, 0.5, 0.55)
    f = make_folder(tsub=0.01)
    f.add(x[None, None, 512:], 512)
    arch = f.result(Observation(1, 1, 1400.0, 1.0, TSAMP))
    assert arch.nsub == 6
    assert arch.tsubint_s[0] == pytest.approx(0.01 - 512 * TSAMP, abs=1.01 * TSAMP)
    assert arch.tsubint_s[-1] == pytest.approx((n + 512) * TSAMP - 0.05, abs=1.01 * TSAMP)
    for s in range(arch.nsub):
        assert 64 <= arch.data[s, 0, 0].argmax() <= 70


def test_empty_bins_get_the_profile_mean_and_bad_shapes_are_refused():
    f = make_folder()
    x = np.random.default_rng(5).exponential(1.0, 300)
    f.add(x[None, None], 0)  # a third of a period: most bins empty
    prof = f.result(Observation(1, 1, 1400.0, 1.0, TSAMP)).data[0, 0, 0]
    assert np.all(np.isfinite(prof))
    np.testing.assert_allclose(prof[-10:], x.mean())
    with pytest.raises(ConfigError, match="shaped"):
        f.add(np.ones((2, 1, 10)), 0)
    with pytest.raises(ConfigError, match="nothing was folded"):
        make_folder().result(Observation(1, 1, 1400.0, 1.0, TSAMP))


def test_profile_snr():
    rng = np.random.default_rng(6)
    noise = rng.standard_normal((200, 256))
    snrs = np.array([profile_snr(p) for p in noise])
    assert np.median(snrs) < 5 and snrs.max() < 7
    prof = rng.standard_normal(256)
    prof[100:108] += 3.0  # 8 bins of 3 sigma: S/N = 24 / sqrt(8) = 8.5
    assert 7.0 < profile_snr(prof) < 10.5
    prof2 = 10 + rng.standard_normal(256) * 0.1
    prof2[250:] += 1.0
    prof2[:2] += 1.0  # wraps around the edge: 8 bins of 10 sigma -> 28
    assert 24 < profile_snr(prof2) < 33
