import math

import numpy as np
import pytest

from voltstream.dsp.pfb import (
    channel_frequencies,
    channel_response,
    pfb_channelize,
    pfb_fir,
    pfb_weights,
)
from voltstream.errors import ConfigError


def hann_sinc_by_hand(nchan, taps):
    step = 2 * nchan
    length = taps * step
    w = []
    for n in range(length):
        hann = 0.5 * (1.0 - math.cos(2.0 * math.pi * (n + 0.5) / length))
        u = (n - (length - 1) / 2.0) / step
        w.append(hann * (1.0 if u == 0 else math.sin(math.pi * u) / (math.pi * u)))
    w = np.array(w)
    return w / math.sqrt(sum(v * v for v in w))


@pytest.mark.parametrize(("nchan", "taps"), [(16, 4), (64, 16), (1024, 16), (4096, 1)])
def test_weights_formula_unit_power_symmetric(nchan, taps):
    w = pfb_weights(nchan, taps)
    assert w.dtype == np.float64
    assert w.shape == (taps * 2 * nchan,)
    assert np.sum(w**2) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_array_equal(w, w[::-1])
    np.testing.assert_allclose(w, hann_sinc_by_hand(nchan, taps), rtol=1e-10, atol=1e-15)


def test_weights_large_channel_count_is_float64_exact():
    w = pfb_weights(65536, 16)
    assert w.size == 16 * 131072
    assert np.sum(w**2) == pytest.approx(1.0, abs=1e-12)
    assert np.argmax(w) in (w.size // 2 - 1, w.size // 2)


@pytest.mark.parametrize(("nchan", "taps"), [(3, 4), (48, 4), (131072, 4), (16, 0), (16, 17)])
def test_bad_shapes_rejected(nchan, taps):
    with pytest.raises(ConfigError, match="give"):
        pfb_weights(nchan, taps)


def test_bad_window_rejected():
    with pytest.raises(ConfigError, match="hann"):
        pfb_weights(16, 4, window="kaiser")


@pytest.mark.parametrize(("nchan", "taps"), [(8, 4), (16, 3), (4, 1)])
def test_channelize_equals_direct_loop(nchan, taps):
    rng = np.random.default_rng(nchan * 10 + taps)
    step = 2 * nchan
    nspec = 5
    x = rng.standard_normal(taps * step + (nspec - 1) * step + 7)  # 7 left-over samples
    w = pfb_weights(nchan, taps)
    got = pfb_channelize(x, nchan, taps)
    assert got.dtype == np.complex128
    assert got.shape == (nspec, nchan)
    expected = np.zeros((nspec, nchan), dtype=np.complex128)
    for s in range(nspec):
        for k in range(nchan):
            acc = 0j
            for n in range(taps * step):
                angle = 2 * math.pi * k * n / step
                acc += x[s * step + n] * w[n] * complex(math.cos(angle), -math.sin(angle))
            expected[s, k] = acc
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_fir_takes_integer_input_and_short_input():
    rng = np.random.default_rng(5)
    x = rng.integers(-512, 512, 4 * 32 + 32, dtype=np.int16)
    w = pfb_weights(16, 4)
    g = pfb_fir(x, w, 16)
    assert g.shape == (2, 32)
    # The first output sample by hand: sum over taps of x[32 j] w[32 j].
    assert g[0, 0] == pytest.approx(sum(float(x[32 * j]) * w[32 * j] for j in range(4)))
    assert pfb_fir(x[:100], w, 16).shape == (0, 32)


def test_channel_frequencies():
    np.testing.assert_allclose(channel_frequencies(4, 800.0), [0.0, 100.0, 200.0, 300.0])


def test_tone_at_channel_centre_lands_in_its_channel():
    nchan, taps, k = 64, 8, 23
    step = 2 * nchan
    amp, phi = 3.0, 0.7
    n = np.arange(taps * step + 9 * step)
    x = amp * np.cos(2 * np.pi * k * n / step + phi)
    out = pfb_channelize(x, nchan, taps)
    w = pfb_weights(nchan, taps)
    # Every window starts a whole number of periods in: X = A/2 e^{i phi} sum(w).
    expected = amp / 2 * np.exp(1j * phi) * np.sum(w)
    np.testing.assert_allclose(out[:, k], expected, rtol=1e-6)
    # Neighbours see the tone through the channel skirt, far channels not at all.
    power = np.abs(out) ** 2
    for j in (k - 2, k - 1, k + 1, k + 2):
        leak = (amp / 2 * channel_response(w, nchan, [k - j])[0]) ** 2
        np.testing.assert_allclose(power[:, j], leak, rtol=1e-3)
    far = np.abs(np.arange(nchan) - k) > 2
    assert np.max(power[:, far]) < 1e-9 * np.min(power[:, k])  # -90 dB


def test_channel_edges_and_stop_band():
    w = pfb_weights(128, 16)
    r = channel_response(w, 128, [0.0, 0.5, -0.5, 1.5, 3.0])
    assert r[0] == pytest.approx(np.sum(w))
    assert 20 * np.log10(r[1] / r[0]) == pytest.approx(-6.0, abs=0.2)
    assert r[1] == pytest.approx(r[2])
    assert np.all(20 * np.log10(r[3:] / r[0]) < -90)


@pytest.mark.parametrize(("nchan", "taps"), [(64, 16), (256, 4)])
def test_tone_sweep_matches_weights_fourier_transform(nchan, taps):
    step = 2 * nchan
    k = nchan // 2
    offsets = np.linspace(-2.5, 2.5, 201)
    w = pfb_weights(nchan, taps)
    n = np.arange(taps * step + 3 * step)
    rng = np.random.default_rng(7)
    measured = np.empty(offsets.size)
    for i, d in enumerate(offsets):
        x = np.cos(2 * np.pi * (k + d) * n / step + rng.uniform(0, 2 * np.pi))
        measured[i] = np.mean(np.abs(pfb_channelize(x, nchan, taps)[:, k]) ** 2)
    expected = (0.5 * channel_response(w, nchan, offsets)) ** 2
    peak = (0.5 * np.sum(w)) ** 2
    expected_db = 10 * np.log10(expected / peak)
    measured_db = 10 * np.log10(measured / peak)
    deep = expected_db > -60
    assert np.min(expected_db[deep]) < -50  # the comparison reaches well down the skirt
    assert np.count_nonzero(~deep) > 20  # and the sweep goes past -60 dB
    np.testing.assert_array_less(np.abs(measured_db[deep] - expected_db[deep]), 1.0)
    assert np.max(measured_db[~deep]) < -55
