"""YNAO frames: NumPy packetizer against the Rust parser."""

import numpy as np
import pytest

from voltstream import _core
from voltstream.errors import FormatError
from voltstream.sim.packetize import (
    YNAO_FRAME_LEN,
    depacketize_ynao,
    packetize_ynao,
    ynao_headers,
)


def _samples(rng, nsamp):
    shape = (nsamp, 32, 2)
    return rng.integers(-128, 128, shape) + 1j * rng.integers(-128, 128, shape)


def test_packetize_round_trip_and_rust_agrees():
    rng = np.random.default_rng(7)
    x = _samples(rng, 5 * 64)
    # Start 40 us before midnight: frames 3 and 4 fall on the next day.
    pk = packetize_ynao(
        x, start_sequence=2**40 + 3, mjd=60500, second=86399, nanosecond=999_960_000, subband=6
    )
    assert pk.shape == (5, YNAO_FRAME_LEN) and pk.flags.c_contiguous
    for k, frame in enumerate(pk):
        assert _core.locate("ynao", frame.tobytes(), subband=6) == (0, 2**40 + 3 + k, 24)
        rust = _core.parse_header("ynao", frame.tobytes())
        ns = 999_960_000 + 16_000 * k
        day, ns = divmod(86399 * 10**9 + ns, 86400 * 10**9)
        want = {
            "sequence": 2**40 + 3 + k,
            "mjd": 60500 + day,
            "second": ns // 10**9,
            "nanosecond": ns % 10**9,
            "subband": 6,
        }
        assert rust == want
    h = ynao_headers(pk)
    assert (h["version"] == 1).all() and (h["nchan"] == 32).all()
    _, back = depacketize_ynao(pk)
    assert back.dtype == np.complex64
    np.testing.assert_array_equal(back, x)


def test_byte_layout_is_tfp():
    rng = np.random.default_rng(8)
    x = _samples(rng, 64)
    pk = packetize_ynao(x)
    t, c, p = 37, 21, 1
    off = 24 + ((t * 32 + c) * 2 + p) * 2
    assert pk[0, off : off + 2].view(np.int8).tolist() == [x[t, c, p].real, x[t, c, p].imag]
    assert pk[0, :8].tolist() == [0] * 8
    assert pk[0, 20:24].tolist() == [1, 0, 0, 32]


def test_int8_samples_are_the_frames_bytes_as_they_are():
    """int8 re/im (what the simulator quantises to, what a capture gives) packetised
    without a float copy: the frames of the same values given as complex."""
    rng = np.random.default_rng(9)
    q = rng.integers(-128, 128, (3 * 64, 32, 2, 2)).astype(np.int8)
    x = q.astype(np.float32).view(np.complex64)[..., 0]
    kw = dict(start_sequence=77, mjd=60500, second=12, nanosecond=5, subband=2)
    np.testing.assert_array_equal(packetize_ynao(q, **kw), packetize_ynao(x, **kw))


def test_clipping():
    rng = np.random.default_rng(9)
    x = rng.normal(0, 300, (64, 32, 2)) + 1j * rng.normal(0, 300, (64, 32, 2))
    _, back = depacketize_ynao(packetize_ynao(x))
    want = np.clip(np.rint(x.real), -128, 127) + 1j * np.clip(np.rint(x.imag), -128, 127)
    np.testing.assert_array_equal(back, want)


def test_rust_rejects_bad_frames():
    rng = np.random.default_rng(10)
    f = packetize_ynao(_samples(rng, 64), subband=2)[0]

    def edit(i, v):
        g = f.copy()
        g[i] = v
        return g.tobytes()

    with pytest.raises(FormatError, match="shorter"):
        _core.locate("ynao", f[:-1].tobytes())
    with pytest.raises(FormatError, match="forbids"):
        _core.locate("ynao", f.tobytes() + b"\x00")
    with pytest.raises(FormatError, match="forbids"):
        _core.locate("ynao", edit(20, 2))  # version
    with pytest.raises(FormatError, match="forbids"):
        _core.locate("ynao", edit(23, 16))  # nchan
    with pytest.raises(FormatError, match="forbids"):
        _core.locate("ynao", edit(12, 0xFF))  # second of day
    with pytest.raises(FormatError, match="not from a configured"):
        _core.locate("ynao", f.tobytes(), subband=3)
