import numpy as np
import pytest

from voltstream.dsp.detect import detect, npol_out
from voltstream.errors import ConfigError


def crandn(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.fixture
def volts():
    return crandn(np.random.default_rng(42), (3, 2, 257))


def test_total_intensity(volts):
    got = detect(volts, "AA+BB")
    a, b = volts[:, 0], volts[:, 1]
    want = a.real**2 + a.imag**2 + b.real**2 + b.imag**2
    assert got.shape == (3, 1, 257) and got.dtype == np.float64
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-12)
    one = detect(volts[:, :1], "AA+BB")
    np.testing.assert_allclose(one[:, 0], a.real**2 + a.imag**2, rtol=1e-12)


def test_coherence_products(volts):
    got = detect(volts.astype(np.complex64), "AABBCRCI")
    a, b = volts[:, 0], volts[:, 1]
    assert got.shape == (3, 4, 257)
    np.testing.assert_allclose(got[:, 0], np.abs(a) ** 2, rtol=1e-6)
    np.testing.assert_allclose(got[:, 1], np.abs(b) ** 2, rtol=1e-6)
    # Re and Im of A conj(B) written out in components
    cr = a.real * b.real + a.imag * b.imag
    ci = a.imag * b.real - a.real * b.imag
    np.testing.assert_allclose(got[:, 2], cr, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 3], ci, rtol=1e-5, atol=1e-5)


def test_stokes_linear_by_hand(volts):
    got = detect(volts, "IQUV", basis="linear")
    x, y = volts[:, 0], volts[:, 1]
    np.testing.assert_allclose(got[:, 0], np.abs(x) ** 2 + np.abs(y) ** 2)
    np.testing.assert_allclose(got[:, 1], np.abs(x) ** 2 - np.abs(y) ** 2)
    np.testing.assert_allclose(got[:, 2], 2 * (np.conj(x) * y).real)
    np.testing.assert_allclose(got[:, 3], 2 * (np.conj(x) * y).imag)
    # Stokes of a single wave: I^2 = Q^2 + U^2 + V^2
    np.testing.assert_allclose(got[:, 0] ** 2, (got[:, 1:] ** 2).sum(axis=1), rtol=1e-10)


def test_stokes_same_in_both_bases(volts):
    x, y = volts[:, 0], volts[:, 1]
    left = (x + 1j * y) / np.sqrt(2)
    right = (x - 1j * y) / np.sqrt(2)
    lin = detect(volts, "IQUV", basis="linear")
    circ = detect(np.stack([left, right], axis=1), "IQUV", basis="circular")
    np.testing.assert_allclose(circ, lin, rtol=1e-10, atol=1e-10)


def test_pure_polarisations_by_hand():
    # X only: Q = +I; X = 1, Y = i: V = +I (right-hand in this convention).
    x = np.zeros((1, 2, 2), complex)
    x[0, 0, 0] = 2.0
    x[0, :, 1] = [1.0, 1j]
    s = detect(x, "IQUV")
    np.testing.assert_allclose(s[0, :, 0], [4, 4, 0, 0], atol=1e-12)
    np.testing.assert_allclose(s[0, :, 1], [2, 0, 0, 2], atol=1e-12)


def test_errors():
    v = np.ones((2, 1, 8), complex)
    with pytest.raises(ConfigError, match="needs 2 polarisations"):
        detect(v, "AABBCRCI")
    with pytest.raises(ConfigError, match="unknown detection mode"):
        detect(v, "XX")
    with pytest.raises(ConfigError, match="basis"):
        detect(np.ones((2, 2, 8), complex), "IQUV", basis="elliptic")
    assert npol_out("AA+BB") == 1 and npol_out("IQUV") == 4
