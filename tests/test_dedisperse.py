import math

import numpy as np
import pytest

from voltstream.dsp.dedisperse import (
    Dedisperser,
    chirp,
    chirps,
    choose_fft_length,
    dispersion_delay_s,
    smearing_samples,
)
from voltstream.errors import ConfigError

D = 4149.377593360996  # 1 / 2.41e-4 s MHz^2, written out independently


def crandn(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_dispersion_delay_by_hand():
    # DM 10 between 400 and 800 MHz: D * 10 * (1/400^2 - 1/800^2) = 0.1945021 s.
    assert dispersion_delay_s(10.0, 400.0, 800.0) == pytest.approx(0.19450208, rel=1e-7)
    assert dispersion_delay_s(10.0, 800.0, 400.0) == pytest.approx(-0.19450208, rel=1e-7)


def test_smearing_samples_by_hand():
    # Lowest edge 1398 MHz of a 4 MHz channel at 1400 MHz, sampled at 4 MHz.
    t = 2 * D * 26.833 * 4.0 / 1398.0**3
    assert smearing_samples(26.833, 1400.0, 4.0) == math.ceil(t * 4e6)
    assert smearing_samples(26.833, 1400.0, -4.0) == math.ceil(t * 4e6)
    assert smearing_samples(0.0, 1400.0, 4.0) == 0


@pytest.mark.parametrize(
    ("n_smear", "max_log2", "expected"),
    [
        # 128: 32.0, 256: 13.13, 512: 11.18, 1024: 11.08, 2048: 11.57 -> 1024
        (100, 24, 1024),
        (100, 9, 512),
        # 2048: 30.0, 4096: 17.57, 8192: 15.45, 16384: 15.20, 32768: 15.62
        (1298, 24, 16384),
        # exactly a power of two: the FFT must be strictly longer
        (1024, 11, 2048),
        (0, 24, 64),
    ],
)
def test_choose_fft_length_by_hand(n_smear, max_log2, expected):
    assert choose_fft_length(n_smear, max_log2=max_log2) == expected


def test_choose_fft_length_refuses_smearing_beyond_cap():
    with pytest.raises(ConfigError, match="narrower channels"):
        choose_fft_length(1 << 20, max_log2=20)


def test_chirp_shape_dc_and_unit_modulus():
    h = chirp(26.833, 1400.0, 4.0, 4096)
    assert h.shape == (4096,) and h.dtype == np.complex128
    assert h[0] == 0
    np.testing.assert_allclose(np.abs(h[1:]), 1.0, rtol=1e-12)
    hs = chirps(26.833, [1396.0, 1400.0], -4.0, 4096)
    np.testing.assert_allclose(hs[1], chirp(26.833, 1400.0, -4.0, 4096))


def arrival_sample(y, nu_bin, nfft, width_bins):
    """Arrival time of the part of signal y near FFT bin nu_bin (envelope peak)."""
    k = np.fft.fftfreq(nfft, 1.0 / nfft)
    dist = (k - nu_bin + nfft / 2) % nfft - nfft / 2
    win = np.exp(-0.5 * (dist / width_bins) ** 2)
    env = np.abs(np.fft.ifft(np.fft.fft(y) * win))
    return int(np.argmax(env))


@pytest.mark.parametrize("bw", [4.0, -4.0])
def test_dispersion_delays_lower_sky_frequencies_by_cold_plasma_delay(bw):
    # Disperse an impulse with the inverse chirp; the part near a sky frequency
    # f must then arrive D DM (1/f^2 - 1/f0^2) later than the part at f0.
    f0, dm, nfft, n0 = 1400.0, 26.833, 8192, 3000
    x = np.zeros(nfft, complex)
    x[n0] = 1.0
    h = chirp(dm, f0, bw, nfft)
    h[0] = 1.0
    y = np.fft.ifft(np.fft.fft(x) / h)
    for f in (f0 - 1.2, f0 + 1.2, f0 - 0.5):
        # upper sideband: sky f0+d sits at baseband +d; lower: at -d
        nu = (f - f0) if bw > 0 else (f0 - f)
        nu_bin = round(nu / abs(bw) * nfft)
        expected = n0 + D * dm * (1 / f**2 - 1 / f0**2) * abs(bw) * 1e6
        got = arrival_sample(y, nu_bin, nfft, width_bins=100)
        assert abs(got - expected) <= 3, (f, got, expected)
    lo = arrival_sample(y, round((-1.2 if bw > 0 else 1.2) / abs(bw) * nfft), nfft, 100)
    assert lo > n0 + 300  # the lower edge really is late, not early


def disperse_long(x, dm, freqs, bw):
    """Independent float64 reference: one long FFT per channel, circular."""
    n = x.shape[-1]
    df = np.fft.fftfreq(n, 1.0 / bw)
    s = 1.0 if bw > 0 else -1.0
    f0 = np.asarray(freqs)[:, None, None]
    phi = 2 * np.pi * 1e6 * D * dm * df**2 / (f0**2 * (f0 + df))
    return np.fft.ifft(np.fft.fft(x, axis=-1) * np.exp(1j * s * phi), axis=-1)


@pytest.mark.parametrize("bw", [4.0, -4.0])
def test_dispersed_impulses_dedisperse_back_to_impulses(bw):
    rng = np.random.default_rng(7)
    freqs = np.array([1398.0, 1402.0]) if bw > 0 else np.array([1402.0, 1398.0])
    dm, n = 26.833, 1 << 15
    x = 0.01 * crandn(rng, (2, 2, n))
    where = np.array([5000, 9100, 17000, 26000])
    amps = (3 + rng.random((2, 2, where.size))) * np.exp(2j * np.pi * rng.random((2, 2, 4)))
    x[..., where] += amps
    xd = disperse_long(x, dm, freqs, bw)
    # The dispersed impulse is spread out: its peak holds a tiny fraction of its energy.
    assert np.abs(xd[0, 0, 4000:6500]).max() ** 2 < 0.05 * np.abs(amps[0, 0, 0]) ** 2

    dd = Dedisperser(dm, freqs, bw)
    y = dd.process(xd)
    nout = y.shape[-1]
    assert nout % dd.step == 0 and nout >= n - dd.nfft
    ref = x - x.mean(axis=-1, keepdims=True)
    got = y
    want = ref[..., dd.discard_head : dd.discard_head + nout]
    err = np.abs(got - want).max()
    assert err < 0.02 * np.abs(amps).min(), err
    on = where - dd.discard_head
    on = on[(on >= 0) & (on < nout)]
    assert on.size >= 3
    np.testing.assert_allclose(got[..., on], x[..., on + dd.discard_head], atol=0.05)
    # and only there: everything else is back at the noise level
    off = np.ones(nout, bool)
    off[on] = False
    assert np.abs(got[..., off]).max() < 0.1


def test_overlap_save_equals_bruteforce_circular_convolution():
    # Exact check of the segmenting and discards: each output equals a circular
    # convolution, done by a dense matrix, of its own input segment.
    rng = np.random.default_rng(3)
    freqs = np.array([150.0, 151.0, 152.0])
    dd = Dedisperser(0.03, freqs, 1.0, nfft=256)
    assert dd.overlap > 10
    x = crandn(rng, (3, 2, 1000))
    y = dd.process(x)
    nseg = (1000 - dd.overlap) // dd.step
    assert y.shape == (3, 2, nseg * dd.step)
    idx = (np.arange(256)[:, None] - np.arange(256)[None, :]) % 256
    for c in range(3):
        h_t = np.fft.ifft(chirp(0.03, freqs[c], 1.0, 256))
        circ = h_t[idx]
        for s in range(nseg):
            seg = x[c, :, s * dd.step : s * dd.step + 256]
            full = seg @ circ.T
            want = full[:, dd.discard_head : 256 - dd.discard_tail]
            np.testing.assert_allclose(
                y[c, :, s * dd.step : (s + 1) * dd.step], want, rtol=0, atol=1e-10
            )


def test_streaming_equals_one_shot_with_odd_blocks():
    rng = np.random.default_rng(11)
    freqs = np.array([330.0, 331.0, 332.0, 333.0])
    dd = Dedisperser(5.0, freqs, -1.0)
    n = 6 * dd.nfft + 123
    x = crandn(rng, (4, 2, n))
    once = dd.process(x)
    st = dd.streaming()
    outs, starts = [], []
    edges = [0, 17, 1000, dd.nfft + 5, 3 * dd.nfft, 3 * dd.nfft + 1, n]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        starts.append(st.next_output_sample)
        out, valid = st.process(x[..., a:b])
        assert valid.all()
        outs.append(out)
    joined = np.concatenate(outs, axis=-1)
    assert starts[0] == dd.discard_head
    np.testing.assert_allclose(joined[..., : once.shape[-1]], once, rtol=0, atol=1e-10)
    assert joined.shape[-1] >= once.shape[-1]


def test_streaming_valid_mask_marks_outputs_whose_span_touches_a_lost_sample():
    rng = np.random.default_rng(5)
    dd = Dedisperser(5.0, [330.0, 331.0], 1.0)
    n = 4 * dd.nfft
    x = crandn(rng, (2, 1, n))
    valid = np.ones(n, bool)
    bad = 2 * dd.nfft + 7
    valid[bad] = False
    st = dd.streaming()
    out1, v1 = st.process(x[..., : n // 3], valid[: n // 3])
    out2, v2 = st.process(x[..., n // 3 :], valid[n // 3 :])
    v = np.concatenate([v1, v2])
    k = np.arange(v.size)
    # output k uses inputs k .. k + overlap
    expected = ~((k <= bad) & (bad <= k + dd.overlap))
    np.testing.assert_array_equal(v, expected)


def test_nfft_too_short_and_bad_blocks_are_refused():
    with pytest.raises(ConfigError, match="must exceed"):
        Dedisperser(26.833, [1400.0], 4.0, nfft=1024)
    dd = Dedisperser(1.0, [1400.0], 4.0)
    with pytest.raises(ConfigError, match="shorter than the FFT"):
        dd.process(np.ones((1, 2, dd.nfft - 1), complex))
    with pytest.raises(ConfigError, match="nchan"):
        dd.process(np.ones((2, 2, dd.nfft), complex))
