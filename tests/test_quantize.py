import numpy as np
import pytest

from voltstream.dsp.quantize import (
    apply_gains,
    pack4,
    quantize,
    quantize4,
    quantize8,
    slot_dither,
    uniform_dither,
    unpack4,
)
from voltstream.errors import ConfigError


def crandn(rng, shape, scale):
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def by_hand(values, limit, dither=None):
    """Python's round() is round-half-to-even, like rint; clip by hand."""
    flat = np.asarray(values).reshape(-1)
    d = None if dither is None else np.asarray(dither).reshape(-1, 2)
    out, saturated = [], 0
    for i, v in enumerate(flat.tolist()):
        parts = [v.real, v.imag]
        if d is not None:
            parts = [parts[0] + d[i, 0], parts[1] + d[i, 1]]
        r = [round(p) for p in parts]
        saturated += any(abs(q) > limit for q in r)
        out.append([max(-limit, min(limit, q)) for q in r])
    return np.array(out).reshape(np.shape(values) + (2,)), saturated


def test_quantize8_matches_by_hand_with_saturation():
    rng = np.random.default_rng(1)
    v = crandn(rng, (6, 50), 60.0)  # about 3% of parts beyond 127
    q, saturated = quantize8(v)
    expected, expected_sat = by_hand(v, 127)
    assert q.dtype == np.int8
    assert q.shape == (6, 50, 2)
    np.testing.assert_array_equal(q, expected)
    assert saturated == expected_sat
    assert 5 < saturated < 60
    assert q.min() >= -127


def test_quantize8_rounds_half_to_even_and_clips_symmetrically():
    v = np.array([0.5 + 1.5j, 2.5 - 2.5j, 127.49 - 127.5j, -300 + 0.2j, 126.6 + 0j])
    q, saturated = quantize8(v)
    np.testing.assert_array_equal(q, [[0, 2], [2, -2], [127, -127], [-127, 0], [127, 0]])
    # -127.5 rounds to -128 (even): clipped; -300 clipped; 127.49 and 126.6 are not.
    assert saturated == 2


def test_quantize8_with_dither_array_and_seed():
    rng = np.random.default_rng(2)
    v = crandn(rng, (4, 33), 20.0)
    d = uniform_dither(v.shape, 11)
    assert d.shape == (4, 33, 2)
    assert d.min() >= -0.5 and d.max() < 0.5
    q, saturated = quantize8(v, d)
    expected, expected_sat = by_hand(v, 127, d)
    np.testing.assert_array_equal(q, expected)
    assert saturated == expected_sat
    q_seed, _ = quantize8(v, 11)
    np.testing.assert_array_equal(q_seed, q)
    assert not np.array_equal(quantize8(v, 12)[0], q)


def test_dither_removes_quantisation_bias():
    v = np.full(40000, 0.3 + 0.7j)
    plain, _ = quantize8(v)
    dithered, _ = quantize8(v, dither=5)
    assert plain[:, 0].mean() == 0 and plain[:, 1].mean() == 1
    assert dithered[:, 0].mean() == pytest.approx(0.3, abs=0.01)
    assert dithered[:, 1].mean() == pytest.approx(0.7, abs=0.01)


def test_quantize4_saturation_and_packing():
    rng = np.random.default_rng(3)
    v = crandn(rng, (5, 40), 4.0)
    packed, saturated = quantize4(v)
    expected, expected_sat = by_hand(v, 7)
    assert packed.dtype == np.uint8 and packed.shape == (5, 40)
    assert saturated == expected_sat and saturated > 10
    np.testing.assert_array_equal(unpack4(packed), expected)
    # Nibble order by hand: real high, imaginary low, two's complement.
    hi = (packed >> 4).astype(int)
    lo = (packed & 0xF).astype(int)
    np.testing.assert_array_equal(np.where(hi > 7, hi - 16, hi), expected[..., 0])
    np.testing.assert_array_equal(np.where(lo > 7, lo - 16, lo), expected[..., 1])


def test_pack4_round_trip_every_pair():
    re, im = np.meshgrid(np.arange(-8, 8), np.arange(-8, 8), indexing="ij")
    pairs = np.stack([re, im], axis=-1)
    packed = pack4(pairs)
    assert len(set(packed.reshape(-1).tolist())) == 256
    np.testing.assert_array_equal(unpack4(packed), pairs)
    assert pack4(np.array([1, -2])) == 0x1E
    assert pack4(np.array([-7, 7])) == 0x97


def test_quantize_dispatch_and_errors():
    v = np.array([3.2 - 9.7j])
    np.testing.assert_array_equal(quantize(v, 8)[0], [[3, -10]])
    assert quantize(v, 4) == (pack4(np.array([[3, -7]])), 1)
    with pytest.raises(ConfigError, match="8 or 4"):
        quantize(v, 2)
    with pytest.raises(ConfigError, match="dither"):
        quantize8(v, np.zeros((2, 2)))
    with pytest.raises(ConfigError, match="NaN"):
        quantize8(np.array([np.nan + 0j]))
    with pytest.raises(ConfigError, match="-8..7"):
        pack4(np.array([8, 0]))


def test_apply_gains_per_pol_per_channel():
    rng = np.random.default_rng(4)
    x = crandn(rng, (2, 3, 5), 1.0)
    g = crandn(rng, (2, 5), 1.0)
    out = apply_gains(x, g)
    for p in range(2):
        for s in range(3):
            for k in range(5):
                assert out[p, s, k] == pytest.approx(x[p, s, k] * g[p, k])
    with pytest.raises(ConfigError, match="npol, nchan"):
        apply_gains(x, g[:, :4])


def test_slot_dither_is_uniform_deterministic_and_slot_dependent():
    d = slot_dither(7, 123, (2, 64, 32))
    assert d.shape == (2, 64, 32, 2)
    assert d.min() >= -0.5 and d.max() < 0.5
    # 24-bit values: exact multiples of 2**-24, mean near 0, variance near 1/12.
    assert np.all((d + 0.5) * 2**24 == np.round((d + 0.5) * 2**24))
    assert abs(d.mean()) < 0.01 and abs(d.var() - 1 / 12) < 0.005
    np.testing.assert_array_equal(d, slot_dither(7, 123, (2, 64, 32)))
    assert not np.array_equal(d, slot_dither(7, 124, (2, 64, 32)))
    assert not np.array_equal(d, slot_dither(8, 123, (2, 64, 32)))
    # Element e depends on e only, not on the shape it sits in.
    np.testing.assert_array_equal(slot_dither(7, 123, (4096,)).ravel(), d.ravel()[:8192])

    # One value by hand (splitmix64 in Python integers).
    def sm(z):
        z = (z + 0x9E3779B97F4A7C15) & (2**64 - 1)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        return z ^ (z >> 31)

    h = sm((sm((sm(7) + 123) & (2**64 - 1)) + 5) & (2**64 - 1))
    assert d.ravel()[5] == (h >> 40) / 2**24 - 0.5
