import numpy as np
import pytest

from voltstream.dsp.delay import DelayModel, apply_fine_delay, split_delay
from voltstream.dsp.pfb import channel_frequencies, pfb_channelize
from voltstream.errors import ConfigError


def test_model_evaluates_linearly_from_its_epoch():
    m = DelayModel(
        delay_s=2e-6, delay_rate=1e-3, phase_rad=0.5, phase_rate_rad_s=-4.0, epoch_sample=1000
    )
    # fs = 1 MHz: 3000 samples after the epoch is 3 ms.
    tau, phi = m.evaluate([1000, 4000, -2000], 1e6)
    np.testing.assert_allclose(tau, [2e-6, 2e-6 + 3e-6, 2e-6 - 3e-6], rtol=1e-12)
    np.testing.assert_allclose(phi, [0.5, 0.5 - 0.012, 0.5 + 0.012], rtol=1e-12)


def test_model_keeps_precision_at_large_timestamps():
    m = DelayModel(delay_rate=1e-9, epoch_sample=2**47)
    tau, _ = m.evaluate([2**47 + 1712], 1712e6)
    assert tau[0] == pytest.approx(1e-15, rel=1e-9)


@pytest.mark.parametrize(
    ("samples", "coarse", "fine"),
    [(2.3, 2, 0.3), (2.7, 3, -0.3), (2.5, 3, -0.5), (-1.2, -1, -0.2), (0.0, 0, 0.0)],
)
def test_split_rounds_to_nearest_sample(samples, coarse, fine):
    fs = 4e6
    c, r = split_delay(samples / fs, fs)
    assert int(c) == coarse
    assert float(r) * fs == pytest.approx(fine, abs=1e-9)
    c3, r3, phi = DelayModel(delay_s=samples / fs, phase_rad=0.25).split([0, 8], fs)
    np.testing.assert_array_equal(c3, [coarse, coarse])
    np.testing.assert_allclose(phi, [0.25, 0.25])


def test_fine_delay_rotates_like_a_true_delay_of_a_tone():
    # A tone at a channel centre, delayed by 0.37 samples in the time domain, must come
    # out of the PFB as the undelayed tone's spectrum rotated by apply_fine_delay.
    nchan, taps, k, fs = 32, 4, 9, 1e6
    step = 2 * nchan
    n = np.arange(taps * step + 4 * step)
    f = k * fs / step
    tau = 0.37 / fs
    x = np.cos(2 * np.pi * f * n / fs + 0.2)
    y = np.cos(2 * np.pi * f * (n / fs - tau) + 0.2)
    freqs = channel_frequencies(nchan, fs)
    rotated = apply_fine_delay(pfb_channelize(x, nchan, taps), freqs, tau, 0.0)
    direct = pfb_channelize(y, nchan, taps)
    np.testing.assert_allclose(rotated[:, k], direct[:, k], rtol=1e-6)
    # The phase term adds: exp(+i phi).
    shifted = apply_fine_delay(pfb_channelize(x, nchan, taps), freqs, 0.0, 0.9)
    expected = pfb_channelize(x, nchan, taps)[:, k] * np.exp(0.9j)
    np.testing.assert_allclose(shifted[:, k], expected, rtol=1e-12)


def test_apply_fine_delay_per_spectrum_values():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    f = np.array([0.0, 1e3, 2e3, 3e3])
    tau = np.array([1e-4, -2e-4, 0.0])
    phi = np.array([0.1, 0.0, -1.0])
    out = apply_fine_delay(x, f, tau, phi)
    for s in range(3):
        for k in range(4):
            expected = x[s, k] * np.exp(1j * (phi[s] - 2 * np.pi * f[k] * tau[s]))
            assert out[s, k] == pytest.approx(expected)


def test_errors_say_what_to_do():
    with pytest.raises(ConfigError, match="not finite"):
        DelayModel(delay_s=float("nan"))
    with pytest.raises(ConfigError, match="whole"):
        DelayModel(epoch_sample=1.5)
    with pytest.raises(ConfigError, match="positive"):
        split_delay(1e-6, 0.0)
    with pytest.raises(ConfigError, match="one frequency per channel"):
        apply_fine_delay(np.ones((2, 4), complex), np.ones(3), 0.0, 0.0)
