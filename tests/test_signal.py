import numpy as np
import pytest

from voltstream.errors import ConfigError
from voltstream.fold.reference import Folder
from voltstream.io.polyco import ConstantPeriod
from voltstream.observation import Observation
from voltstream.sim.signal import quantize_int8, synthesize, synthesize_blocks

D = 4149.377593360996


def obs(nchan=4, npol=2, bw=16.0):
    return Observation(
        nchan=nchan, npol=npol, freq_mhz=1400.0, bw_mhz=bw, tsamp_s=nchan / abs(bw) * 1e-6
    )


def test_noise_shape_power_and_block_independence():
    o = obs()
    x = synthesize(o, 0.01, signal="noise", seed=3, block_samples=7000)
    assert x.shape == (40_000, 4, 2) and x.dtype == np.complex64
    np.testing.assert_allclose(np.mean(np.abs(x) ** 2, axis=0), 1.0, atol=0.03)
    np.testing.assert_allclose(np.mean(x.real**2), 0.5, atol=0.01)
    y = synthesize(o, 0.01, signal="noise", seed=3, block_samples=40_000)
    np.testing.assert_array_equal(x, y)
    blocks = list(synthesize_blocks(o, 0.01, signal="noise", block_samples=7000))
    assert [b.shape[0] for b in blocks] == [7000] * 5 + [5000]


@pytest.mark.parametrize("bw", [16.0, -16.0])
def test_tone_lands_at_its_sky_frequency(bw):
    o = obs(bw=bw)
    f_tone = 1403.3  # channel centres are 1394, 1398, 1402, 1406 (reversed if LSB)
    x = synthesize(o, 0.002, signal="tone", tone_mhz=f_tone, pulse_amplitude=3.0, seed=1)
    c = int(np.argmin(np.abs(o.chan_freqs_mhz - 1402.0)))
    power = np.mean(np.abs(x) ** 2, axis=(0, 2))
    assert power[c] > 9 and np.all(np.delete(power, c) < 1.1)
    spec = np.abs(np.fft.fft(x[:, c, 0].astype(np.complex128))) ** 2
    nu = np.fft.fftfreq(x.shape[0], o.tsamp_s) / 1e6  # MHz
    sky = 1402.0 + (nu if bw > 0 else -nu)
    assert sky[np.argmax(spec)] == pytest.approx(f_tone, abs=1e-3)


def test_dispersed_pulsar_arrives_later_at_lower_channels():
    # Folding raw (not dedispersed) power per channel: the pulse in each channel
    # sits at pulse_phase plus that channel's delay relative to the band centre.
    o = obs(bw=-16.0)
    period, dm = 2e-3, 10.0
    x = synthesize(
        o,
        0.08,
        signal="pulsar",
        dm=dm,
        period_s=period,
        duty=0.05,
        pulse_phase=0.25,
        pulse_amplitude=4.0,
        seed=2,
        block_samples=50_000,
    )
    f = Folder(
        200,
        4,
        1,
        o.tsamp_s,
        o.chan_freqs_mhz,
        1400.0,
        0.0,
        ConstantPeriod(period, o.start_mjd, o.start_sec),
        None,
        o.start_mjd,
        o.start_sec,
    )
    f.add((np.abs(x) ** 2).sum(axis=2).T[:, None, :], 0)
    prof = f.result(o).data[0, 0]
    for c, fc in enumerate(o.chan_freqs_mhz):
        expect = 0.25 + D * dm * (1 / fc**2 - 1 / 1400.0**2) / period
        got = (np.argmax(prof[c]) + 0.5) / 200
        assert abs((got - expect + 0.5) % 1 - 0.5) < 0.02, (c, got, expect)
    # two polarisations of unit power; intra-channel dispersion smears the pulse
    # (about 0.06 turns here), so peaks stay below the intrinsic 2 * (1 + 4)
    np.testing.assert_allclose(np.median(prof, axis=1), 2.0, atol=0.1)
    assert 5.0 < prof.max() < 9.0


def test_quantize_int8():
    rng = np.random.default_rng(9)
    x = ((rng.standard_normal(100_000) + 1j * rng.standard_normal(100_000)) / np.sqrt(2)).astype(
        np.complex64
    )
    q, nclip0 = quantize_int8(x, rms=20.0)
    assert nclip0 == 0
    assert q.shape == (100_000, 2) and q.dtype == np.int8
    assert np.std(q[:, 0].astype(float)) == pytest.approx(20.0, rel=0.02)
    np.testing.assert_array_equal(q[:, 1], np.clip(np.rint(x.imag * 20 * np.sqrt(2)), -127, 127))
    big = x * 10
    q2, nclip = quantize_int8(big, rms=20.0)
    want = np.count_nonzero(np.abs(np.rint(big.real * 20 * np.sqrt(2))) > 127) + np.count_nonzero(
        np.abs(np.rint(big.imag * 20 * np.sqrt(2))) > 127
    )
    assert nclip == want > 1000
    assert q2.max() == 127 and q2.min() == -127


def test_bad_arguments():
    with pytest.raises(ConfigError, match="unknown signal"):
        synthesize_blocks(obs(), 0.01, signal="chirp")
    with pytest.raises(ConfigError, match="outside the band"):
        synthesize_blocks(obs(), 0.01, signal="tone", tone_mhz=1500.0)
    with pytest.raises(ConfigError, match="duty"):
        synthesize_blocks(obs(), 0.01, duty=1.5)
