"""DADA files: round trips, header conventions, every bad-header path, full disk."""

import contextlib
import errno
import os
import subprocess
import tempfile
import warnings

import numpy as np
import pytest

from bad_files import random_file, refuses
from voltstream.errors import FormatError, TruncatedFileError, VoltstreamError
from voltstream.io import dada
from voltstream.io.dada import REQUIRED_KEYS, DadaWriter, open_dada
from voltstream.observation import Observation

RNG = np.random.default_rng(20240611)


def make_obs(**kw) -> Observation:
    base = dict(
        nchan=4,
        npol=2,
        freq_mhz=1382.5,
        bw_mhz=-64.0,
        tsamp_s=4 / 64e6,
        start_mjd=60471,
        start_sec=45296.5,
        source="J1136+1551",
        telescope="YNAO40m",
    )
    base.update(kw)
    return Observation(**base)


def random_samples(obs: Observation, nsamp: int, dtype=np.int8) -> np.ndarray:
    info = np.iinfo(dtype)
    shape = (nsamp, obs.nchan, obs.npol, obs.ndim)
    return RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def write_file(path, obs, samples, extra=None):
    with DadaWriter(path, obs, extra) as w:
        w.write(samples)
    return path


def header_lines(**override) -> bytes:
    """A valid header text, keys replaced or removed (value None) by ``override``."""
    keys = {
        "HEADER": "DADA",
        "HDR_VERSION": "1.0",
        "HDR_SIZE": "4096",
        "DADA_VERSION": "1.0",
        "TELESCOPE": "Parkes",
        "SOURCE": "J0437-4715",
        "FREQ": "1369.0",
        "BW": "64",
        "NCHAN": "2",
        "NPOL": "2",
        "NBIT": "8",
        "NDIM": "2",
        "TSAMP": "0.03125",
        "UTC_START": "2024-01-02-03:04:05",
        "OBS_OFFSET": "0",
        "ORDER": "TFP",
    }
    keys.update(override)
    text = "".join(f"{k} {v}\n" for k, v in keys.items() if v is not None).encode()
    size = int(keys["HDR_SIZE"]) if str(keys["HDR_SIZE"]).isdigit() else 4096
    return text.ljust(size, b"\0")


def test_round_trip_array(tmp_path):
    obs = make_obs()
    samples = random_samples(obs, 1000)
    path = write_file(tmp_path / "a.dada", obs, samples)
    assert path.stat().st_size == 4096 + samples.size
    r = open_dada(path)
    assert r.nsamp == 1000
    np.testing.assert_array_equal(r.read_raw(0, 1000), samples)
    np.testing.assert_array_equal(r.read_raw(123, 7), samples[123:130])
    blocks = list(r.read_blocks(300))
    assert [b.shape[0] for b in blocks] == [300, 300, 300, 100]
    assert all(b.dtype == np.complex64 and b.shape[1:] == (4, 2) for b in blocks)
    got = np.concatenate(blocks)
    want = samples[..., 0].astype(np.float32) + 1j * samples[..., 1].astype(np.float32)
    np.testing.assert_array_equal(got, want)
    o = r.obs
    assert (o.nchan, o.npol, o.nbit, o.ndim) == (4, 2, 8, 2)
    assert o.freq_mhz == 1382.5 and o.bw_mhz == -64.0 and o.sideband == -1
    assert o.source == "J1136+1551" and o.telescope == "YNAO40m"
    assert o.tsamp_s == pytest.approx(obs.tsamp_s, rel=1e-15)
    # Lower sideband: sky frequency falls with channel index.
    assert np.all(np.diff(o.chan_freqs_mhz) < 0)


def test_header_keys_written(tmp_path):
    obs = make_obs(start_sec=3723.25)
    path = write_file(tmp_path / "h.dada", obs, random_samples(obs, 3), {"PROJID": "P123"})
    raw = path.read_bytes()[:4096]
    text = raw.split(b"\0", 1)[0].decode("ascii")
    assert raw[len(text) :] == b"\0" * (4096 - len(text))
    h = open_dada(path).header
    for key in REQUIRED_KEYS:
        assert key in h, key
    assert h["HEADER"] == "DADA" and h["ORDER"] == "TFP" and h["HDR_SIZE"] == "4096"
    assert h["UTC_START"] == "2024-06-10-01:02:03"
    assert h["PICOSECONDS"] == "250000000000"
    assert float(h["TSAMP"]) == pytest.approx(0.0625, rel=1e-14)  # microseconds
    assert float(h["BW"]) == -64.0 and h["PROJID"] == "P123"
    assert float(h["MJD_START"]) == pytest.approx(60471 + 3723.25 / 86400, abs=1e-11)


def test_start_time_to_the_picosecond(tmp_path):
    path = tmp_path / "ps.dada"
    path.write_bytes(header_lines(PICOSECONDS="123456789012") + bytes(range(64)))
    o = open_dada(path).obs
    assert o.start_mjd == 60311  # 2024-01-02
    # Float64 seconds of day near 11045 s resolve 1.8 ps.
    assert abs(o.start_sec - (11045 + 0.123456789012)) < 2e-12


def test_start_includes_obs_offset(tmp_path):
    # 2 chan * 2 pol * 2 dim = 8 bytes per 31.25 ns sample = 256 MB/s.
    path = tmp_path / "off.dada"
    offset = 256_000_000 * 86400 + 128  # a day and half a microsecond later
    path.write_bytes(header_lines(OBS_OFFSET=str(offset), PICOSECONDS="999999999900") + bytes(8))
    o = open_dada(path).obs
    assert o.start_mjd == 60312
    assert abs(o.start_sec - (11045 + 0.9999999999 + 0.5e-6)) < 2e-12


def test_writer_start_round_trip_crosses_midnight(tmp_path):
    for sec in (86399.999999999, 0.000000000007, 45296.123456789):
        obs = make_obs(start_sec=sec)
        o = open_dada(write_file(tmp_path / "t.dada", obs, random_samples(obs, 2))).obs
        assert o.start_mjd == obs.start_mjd
        assert abs(o.start_sec - sec) <= 1e-12 + np.spacing(sec)
    obs = make_obs(start_sec=86400.0 + 12.5)
    o = open_dada(write_file(tmp_path / "m.dada", obs, random_samples(obs, 2))).obs
    assert (o.start_mjd, o.start_sec) == (obs.start_mjd + 1, 12.5)


def test_write_raw_bytes_and_int16(tmp_path):
    obs = make_obs(nbit=16, bw_mhz=32.0, nchan=3, npol=1)
    samples = random_samples(obs, 50, np.int16)
    path = tmp_path / "raw.dada"
    with DadaWriter(path, obs) as w:
        w.write(samples[:20].tobytes())
        w.write(bytearray(samples[20:30]))
        w.write(samples[30:].view(np.uint8).ravel())
        assert w.nsamp == 50
        with pytest.raises(FormatError, match="whole number"):
            w.write(b"\1\2\3")
        with pytest.raises(FormatError, match="int16"):
            w.write(samples.astype(np.int8))
    r = open_dada(path)
    assert r.obs.bw_mhz == 32.0 and r.obs.nbit == 16
    np.testing.assert_array_equal(r.read_raw(0, 50), samples)
    first = next(r.read_blocks(64))
    np.testing.assert_array_equal(first.imag, samples[..., 1])


def test_larger_declared_header_is_honoured(tmp_path):
    path = tmp_path / "big.dada"
    payload = RNG.integers(-128, 127, size=80, dtype=np.int8)
    header = header_lines(HDR_SIZE="8192", COMMENT_PAD="x" * 100)
    path.write_bytes(header + payload.tobytes())
    r = open_dada(path)
    assert r.hdr_size == 8192 and r.nsamp == 10
    np.testing.assert_array_equal(r.read_raw(0, 10).ravel(), payload)


def test_writer_grows_header_for_long_extras(tmp_path):
    obs = make_obs()
    extra = {f"NOTE{i}": "y" * 60 for i in range(80)}
    r = open_dada(write_file(tmp_path / "g.dada", obs, random_samples(obs, 4), extra))
    assert r.hdr_size == 8192 and r.header["NOTE79"] == "y" * 60 and r.nsamp == 4


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_missing_key(tmp_path, key):
    path = tmp_path / "m.dada"
    path.write_bytes(header_lines(**{key: None}) + bytes(64))
    with pytest.raises(FormatError, match=f"lacks {key}; the required keys are TELESCOPE"):
        open_dada(path)


def test_a_header_with_only_dspsrs_keys_opens_with_each_default_named(tmp_path):
    """DSPSR requires TELESCOPE SOURCE FREQ BW NPOL NBIT TSAMP UTC_START OBS_OFFSET (and
    HDR_SIZE for the layout); the rest defaults, each default said in a warning."""
    path = tmp_path / "dspsr.dada"
    gone = dict.fromkeys(("HEADER", "HDR_VERSION", "DADA_VERSION", "NCHAN", "NDIM", "ORDER"))
    data = np.arange(-50, 50, dtype=np.int8)  # 1 channel, 2 pols, real: 50 samples
    path.write_bytes(header_lines(**gone) + data.tobytes())
    with pytest.warns(UserWarning) as caught:
        r = open_dada(path)
    said = " ".join(str(w.message) for w in caught)
    assert "using NCHAN 1" in said and "using NDIM 1" in said and "HDR_SIZE" not in said
    assert (r.obs.nchan, r.obs.npol, r.obs.ndim, r.nsamp) == (1, 2, 1, 50)
    assert np.array_equal(np.asarray(r.read_raw(0, 50)).reshape(-1), data)


def test_the_writer_says_file_size_as_psrdadas_recorder_does(tmp_path):
    obs = make_obs()
    samples = random_samples(obs, 37)
    path = write_file(tmp_path / "fs.dada", obs, samples)
    h = open_dada(path).header
    assert int(h["FILE_SIZE"]) == samples.nbytes == path.stat().st_size - 4096
    assert h["FILE_NUMBER"] == "0" and h["OBS_OVERLAP"] == "0"


@pytest.mark.parametrize(
    "key,value",
    [("NCHAN", "four"), ("FREQ", "1.4GHz"), ("TSAMP", "fast"), ("OBS_OFFSET", "1.5"),
     ("HDR_SIZE", "big"), ("PICOSECONDS", "1e3")],
)  # fmt: skip
def test_non_numeric_value(tmp_path, key, value):
    path = tmp_path / "n.dada"
    path.write_bytes(header_lines(**{key: value}) + bytes(64))
    with pytest.raises(FormatError, match=f"{key} is '{value}', not an? "):
        open_dada(path)


@pytest.mark.parametrize(
    "key,value,match",
    [("NBIT", "4", "NBIT 4"), ("ORDER", "TSPF", "ORDER TSPF"), ("BW", "0", "BW"),
     ("UTC_START", "2024-01-02T03:04:05", "UTC_START"), ("TSAMP", "-1", "TSAMP")],
)  # fmt: skip
def test_bad_values(tmp_path, key, value, match):
    path = tmp_path / "b.dada"
    path.write_bytes(header_lines(**{key: value}) + bytes(64))
    with pytest.raises(FormatError, match=match):
        open_dada(path)


def test_header_not_dada(tmp_path):
    path = tmp_path / "x.dada"
    path.write_bytes(header_lines(HEADER="PSRDADA2") + bytes(64))
    with pytest.raises(FormatError, match="HEADER is 'PSRDADA2', expected DADA"):
        open_dada(path)


def test_not_a_dada_file(tmp_path):
    # A VDIF-like file: binary 32-byte frame headers then data.
    refuses(open_dada, random_file(tmp_path / "x.vdif", 20000), "is not a DADA file")
    text = tmp_path / "notes.txt"
    text.write_text("just some notes\nnothing else\n" * 300)
    refuses(open_dada, text, "is not a DADA file")
    refuses(open_dada, tmp_path / "absent.dada", "cannot read")


def test_truncated_header(tmp_path):
    path = tmp_path / "t.dada"
    path.write_bytes(header_lines()[:3000])
    with pytest.raises(TruncatedFileError, match="shorter than its 4096-byte header"):
        open_dada(path)


def test_partial_sample_warns_and_is_ignored(tmp_path):
    obs = make_obs()
    samples = random_samples(obs, 9)
    path = write_file(tmp_path / "p.dada", obs, samples)
    with open(path, "ab") as f:
        f.write(b"\7" * 5)
    with pytest.warns(UserWarning, match="5 trailing bytes of a partial sample ignored") as rec:
        r = open_dada(path)
    assert len(rec) == 1
    assert r.nsamp == 9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(r.read_raw(0, 9), samples)
    with pytest.raises(FormatError, match="outside"):
        r.read_raw(5, 5)


def test_zero_samples(tmp_path):
    path = tmp_path / "z.dada"
    path.write_bytes(header_lines())
    with pytest.raises(FormatError, match="no complete samples"):
        open_dada(path)
    path.write_bytes(header_lines() + b"\1\2\3")
    with pytest.warns(UserWarning), pytest.raises(FormatError, match="no complete samples"):
        open_dada(path)


def test_writer_rejects_bad_input(tmp_path):
    obs = make_obs()
    with DadaWriter(tmp_path / "w.dada", obs) as w:
        with pytest.raises(FormatError, match=r"\(nsamp, 4, 2, 2\)"):
            w.write(np.ones((3, 4, 2), np.int8))
        with pytest.raises(FormatError, match="numpy array or bytes"):
            w.write("not bytes")
    with pytest.raises(VoltstreamError, match="already closed"):
        w.write(random_samples(obs, 1))
    with pytest.raises(FormatError, match="NBIT 8 or 16"):
        DadaWriter(tmp_path / "w4.dada", make_obs(nbit=4))
    with pytest.raises(VoltstreamError, match="cannot create"):
        DadaWriter(tmp_path / "no" / "dir.dada", obs)


@contextlib.contextmanager
def tiny_disk(try_mount: bool):
    """A 64 KiB tmpfs when we may mount one, else None."""
    mnt = tempfile.mkdtemp(prefix="vs-tmpfs-")
    mounted = False
    try:
        if try_mount and os.geteuid() == 0:
            res = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                capture_output=True,
                timeout=10,
            )
            mounted = res.returncode == 0
        yield mnt if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", mnt], capture_output=True, timeout=10)
        os.rmdir(mnt)


@pytest.mark.parametrize("try_mount", [True, False], ids=["tmpfs", "patched-write"])
def test_full_disk(tmp_path, monkeypatch, try_mount):
    obs = make_obs()
    chunk = random_samples(obs, 1024)  # 16 KiB
    with tiny_disk(try_mount) as mnt:
        if mnt is None:
            # No tmpfs available: make every write after 40 KiB fail as a full disk would.
            real_write, budget = os.write, [40 * 1024]

            def write(fd, buf):
                if budget[0] <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                n = real_write(fd, bytes(buf)[: budget[0]])
                budget[0] -= n
                return n

            monkeypatch.setattr(dada.os, "write", write)
            path = tmp_path / "full.dada"
        else:
            path = os.path.join(mnt, "full.dada")
        w = DadaWriter(path, obs)
        with pytest.raises(VoltstreamError, match="disk full writing .*full.dada after") as exc:
            for _ in range(10):
                w.write(chunk)
        w.close()
        written = int(str(exc.value).split(" after ")[1].split(" bytes")[0])
        assert 4096 < written <= 64 * 1024
        assert written == os.path.getsize(path)
