"""VDIF: NumPy packetizer against the Rust parser, and the VDIF file reader."""

import datetime as dt

import numpy as np
import pytest

from voltstream import _core
from voltstream.errors import ConfigError, FormatError, TruncatedFileError
from voltstream.io.vdif import LEVELS_2BIT, decode_headers, open_vdif, write_sidecar
from voltstream.observation import Observation
from voltstream.sim.packetize import depacketize_vdif, packetize_vdif

FPS = 1000


def _samples(rng, nsamp, nchan, npol, nbit, complex_data):
    """Random samples that quantize exactly (integers or the 2-bit levels)."""

    def draw(shape):
        if nbit == 8:
            return rng.integers(-128, 128, shape).astype(np.float64)
        if nbit == 4:
            return rng.integers(-8, 8, shape).astype(np.float64)
        return LEVELS_2BIT[rng.integers(0, 4, shape)].astype(np.float64)

    shape = (nsamp, nchan, npol)
    return draw(shape) + 1j * draw(shape) if complex_data else draw(shape)


def _dated_frames(x, nbit, spf, start, threads, **kw):
    """``x`` as VDIF frames of ``threads`` at FPS from ``start`` (seconds, frame) of
    reference epoch 48, not the default 0: every date field is exercised."""
    seconds, frame = start
    return packetize_vdif(x, frames_per_second=FPS, nbit=nbit, samples_per_frame=spf,
                          start_seconds=seconds, start_frame=frame, ref_epoch=48,
                          threads=threads, **kw)  # fmt: skip


COMBOS = [(8, True), (8, False), (4, True), (4, False), (2, True), (2, False)]


@pytest.mark.parametrize("nbit,complex_data", COMBOS)
def test_packetize_round_trip_and_rust_agrees(nbit, complex_data):
    rng = np.random.default_rng(nbit + 10 * complex_data)
    x = _samples(rng, 256, 8, 2, nbit, complex_data)
    pk = _dated_frames(x, nbit, 64, (77, FPS - 2), [9, 4], station=0x5A5A)
    assert pk.flags.c_contiguous and pk.dtype == np.uint8
    payload = 64 * 8 * (2 if complex_data else 1) * nbit // 8
    assert pk.shape == (8, 32 + payload)
    for k, frame in enumerate(pk):
        stream, index, off = _core.locate(
            "vdif", frame.tobytes(), threads=[9, 4], frames_per_second=FPS, station=0x5A5A
        )
        assert (stream, off) == (k % 2, 32)
        assert index == 77 * FPS + FPS - 2 + k // 2
        rust = _core.parse_header("vdif", frame.tobytes())
        ours = {key: v[k].item() for key, v in decode_headers(pk).items()}
        assert rust == ours
        assert rust["seconds"] == 77 + (FPS - 2 + k // 2) // FPS
        assert rust["nchan"] == 8 and rust["bits_per_sample"] == nbit
    h, back = depacketize_vdif(pk)
    assert back.dtype == (np.complex64 if complex_data else np.float32)
    np.testing.assert_allclose(back, x, rtol=1e-6)


def test_2bit_quantization_and_8bit_clipping():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 3, (64, 4, 1))
    _, back = depacketize_vdif(
        packetize_vdif(x, frames_per_second=FPS, nbit=2, samples_per_frame=64)
    )
    levels = LEVELS_2BIT.astype(np.float64)
    want = levels[np.argmin(np.abs(x[..., None] - levels), axis=-1)]
    np.testing.assert_allclose(back, want, rtol=1e-6)
    y = rng.normal(0, 200, (64, 4, 1))
    _, back = depacketize_vdif(
        packetize_vdif(y, frames_per_second=FPS, nbit=8, samples_per_frame=64)
    )
    np.testing.assert_array_equal(back, np.clip(np.rint(y), -128, 127))


def test_legacy_headers():
    rng = np.random.default_rng(4)
    x = _samples(rng, 128, 4, 1, 8, True)
    pk = packetize_vdif(x, frames_per_second=FPS, samples_per_frame=64, legacy=True)
    assert pk.shape[1] == 16 + 64 * 4 * 2
    rust = _core.parse_header("vdif", pk[0].tobytes())
    assert rust["legacy"] and rust["frame_len"] == pk.shape[1]
    np.testing.assert_allclose(depacketize_vdif(pk)[1], x)


def test_rust_rejects_bad_frames():
    rng = np.random.default_rng(5)
    pk = packetize_vdif(
        _samples(rng, 64, 4, 1, 8, True), frames_per_second=FPS, samples_per_frame=64
    )
    f = pk[0].tobytes()
    kw = {"frames_per_second": FPS}
    with pytest.raises(FormatError, match="shorter"):
        _core.locate("vdif", f[:-8], frame_len=len(f), **kw)
    with pytest.raises(FormatError, match="not from a configured"):
        _core.locate("vdif", f, threads=[1], **kw)
    with pytest.raises(FormatError, match="flagged invalid by its sender"):
        _core.locate("vdif", f[:3] + bytes([f[3] | 0x80]) + f[4:], **kw)  # invalid flag
    with pytest.raises(FormatError, match="forbids"):
        _core.locate("vdif", f[:4] + bytes([5]) + f[5:], frames_per_second=5)  # frame 5 of 5
    with pytest.raises(ConfigError):
        _core.locate("vdif", f)
    with pytest.raises(ConfigError, match="unknown capture format 'mark5b'"):
        _core.locate("mark5b", f, **kw)  # locate() knows the formats Capture() knows
    with pytest.raises(ConfigError, match="needs digitiser_ids"):
        _core.locate("spead", f, **kw)
    with pytest.raises(FormatError):
        _core.parse_header("vdif", b"\x00" * 15)


def _write(tmp_path, pk, name="x.vdif"):
    p = tmp_path / name
    p.write_bytes(np.ascontiguousarray(pk).tobytes())
    return p


@pytest.mark.parametrize("nbit,complex_data", COMBOS)
def test_file_reader_round_trip(tmp_path, nbit, complex_data):
    rng = np.random.default_rng(20 + nbit + complex_data)
    nchan, spf = 4, 32
    x = _samples(rng, 40 * spf, nchan, 2, nbit, complex_data)
    start_sec = 86400 * 3 + 5
    pk = _dated_frames(x, nbit, spf, (start_sec, 10), [3, 1])
    path = _write(tmp_path, pk)
    ndim = 2 if complex_data else 1
    bw = nchan / (1 / (FPS * spf)) / 1e6 / (1 if complex_data else 2)
    obs = Observation(
        nchan=nchan, npol=2, freq_mhz=1400.0, bw_mhz=-bw, tsamp_s=0.0, source="J1234+5678"
    )
    write_sidecar(path, obs, FPS)
    with open_vdif(path, threads=[3, 1]) as f:
        assert f.nsamp == x.shape[0]
        o = f.obs
        assert (o.nchan, o.npol, o.nbit, o.ndim) == (nchan, 2, nbit, ndim)
        assert (o.freq_mhz, o.bw_mhz, o.source) == (1400.0, -bw, "J1234+5678")
        assert o.tsamp_s == pytest.approx(1 / (FPS * spf))
        mjd_2024 = (dt.date(2024, 1, 1) - dt.date(1858, 11, 17)).days
        assert (o.start_mjd, o.start_sec) == (mjd_2024 + 3, pytest.approx(5 + 10 / FPS))
        blocks = list(f.read_blocks(100))
        assert [len(b) for b in blocks[:-1]] == [100] * (len(blocks) - 1)
        got = np.concatenate(blocks)
        assert got.dtype == (np.complex64 if complex_data else np.float32)
        np.testing.assert_allclose(got, x, rtol=1e-6)
        assert f.missing_frames == 0 and f.invalid_frames == 0


def test_file_reader_default_thread_order_rate_from_bw_and_gaps(tmp_path):
    rng = np.random.default_rng(30)
    x = _samples(rng, 16 * 64, 4, 2, 8, True)
    pk = packetize_vdif(x, frames_per_second=FPS, samples_per_frame=64, threads=[0, 1])
    keep = np.ones(len(pk), bool)
    keep[5] = False  # frame 2, thread 1
    shuffled = pk[keep][rng.permutation(keep.sum())]
    bw = 4 / (1 / (FPS * 64)) / 1e6
    f = open_vdif(_write(tmp_path, shuffled), freq_mhz=700.0, bw_mhz=bw)
    assert f.frames_per_second == FPS and f.missing_frames == 1
    got = f.read()
    want = x.copy()
    want[128:192, :, 1] = 0
    np.testing.assert_allclose(got, want)
    # The gap is marked lost in the blocks that touch it, and only there.
    blocks = list(f.read_blocks(100))
    masks = [b[1] if isinstance(b, tuple) else np.ones(len(b), bool) for b in blocks]
    valid = np.concatenate(masks)
    assert np.flatnonzero(~valid).tolist() == list(range(128, 192))
    assert sum(isinstance(b, tuple) for b in blocks) == 1
    data, v = f.read_packed(0, 16)
    assert data.shape == (16, 2, f.frame_data_len) and not data[2, 1].any()
    np.testing.assert_array_equal(v, valid)
    assert f.read_packed(3, 5)[1] is None


def test_file_reader_rate_from_frame_numbers(tmp_path):
    rng = np.random.default_rng(31)
    fps = 4
    x = _samples(rng, 12 * 64, 2, 1, 8, False)
    pk = packetize_vdif(x, frames_per_second=fps, samples_per_frame=64)
    f = open_vdif(_write(tmp_path, pk), freq_mhz=100.0)
    assert f.frames_per_second == fps
    assert f.obs.bw_mhz == pytest.approx(2 / (1 / (fps * 64)) / 1e6 / 2)


def test_file_reader_errors(tmp_path):
    rng = np.random.default_rng(40)
    pk = packetize_vdif(
        _samples(rng, 4 * 64, 4, 1, 8, True), frames_per_second=FPS, samples_per_frame=64
    )
    kw = {"freq_mhz": 1000.0, "frames_per_second": FPS}
    with pytest.raises(TruncatedFileError, match="whole number"):
        open_vdif(_write(tmp_path, pk.ravel()[:-5], "cut.vdif"), **kw)
    with pytest.raises(TruncatedFileError):
        open_vdif(_write(tmp_path, pk.ravel()[:10], "tiny.vdif"), **kw)
    garbled = pk.copy()
    garbled[2, 11] ^= 0x01  # log2(nchan) of frame 2
    with pytest.raises(FormatError, match="frame 2"):
        open_vdif(_write(tmp_path, garbled, "garbled.vdif"), **kw)
    dup = pk.copy()
    dup[3, :8] = dup[2, :8]  # frame 3 claims frame 2's time
    with pytest.raises(FormatError, match="twice"):
        open_vdif(_write(tmp_path, dup, "dup.vdif"), **kw)
    zero = pk.copy()
    zero[:, 8:11] = 0  # frame length 0
    with pytest.raises(FormatError, match="no room"):
        open_vdif(_write(tmp_path, zero, "zero.vdif"), **kw)
    with pytest.raises(FormatError, match="frame number"):
        open_vdif(_write(tmp_path, pk, "fps.vdif"), freq_mhz=1.0, frames_per_second=2)
    with pytest.raises(ConfigError, match="sky frequency"):
        open_vdif(_write(tmp_path, pk, "nofreq.vdif"), frames_per_second=FPS)
    with pytest.raises(ConfigError, match="frame rate"):
        open_vdif(_write(tmp_path, pk, "norate.vdif"), freq_mhz=1.0)
    with pytest.raises(FormatError, match="cannot read"):
        open_vdif(tmp_path / "absent.vdif", **kw)
    bad_side = _write(tmp_path, pk, "side.vdif")
    (tmp_path / "side.vdif.json").write_text("{not json")
    with pytest.raises(FormatError, match="sidecar"):
        open_vdif(bad_side, **kw)
