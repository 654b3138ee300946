"""VDIF of every sample width digitisers write (1, 2, 4, 8, 16 bits), real and complex,
one and four threads, threads that start and end on different frames and seconds:
written by baseband (PyPI, the peer; 16-bit by voltstream, baseband writes no 16-bit
VDIF), read by voltstream, samples equal baseband's reading of the same frames; the
CLI's inspect and fold take them; an absurd header is an error naming the frame."""

from __future__ import annotations

import json

import numpy as np
import pytest
from baseband import vdif as baseband_vdif  # requirements-dev.txt: a real peer

from cli_process import run_cli
from voltstream.errors import FormatError
from voltstream.io.vdif import decode_headers, encode_headers, open_vdif, pack

FPS = 10  # frames per second per thread: files span seconds in a few frames
REF_EPOCH, SECOND0 = 48, 5000  # 2024-01-01, and seconds after it


def _payload(rng, bps, cplx, spf, nchan):
    """Values baseband encodes to every code of its ``bps``-bit levels."""
    scale = {1: 1.0, 2: 2.0, 4: 1.0, 8: 1.0}[bps]
    x = rng.normal(0, scale, (spf, nchan)).astype(np.float32)
    if cplx:
        x = x + 1j * rng.normal(0, scale, x.shape).astype(np.float32)
    return x


def _write_frames(path, bps, cplx, nchan, spf, runs, rng, second0=SECOND0):
    """Frames baseband writes, thread by thread time step: ``runs`` maps thread id to
    (first, last) frame time (0 = second SECOND0, frame 0). Frames of one time step
    are written together, in thread order, as a station's multiplexer does."""
    t0 = min(a for a, _ in runs.values())
    t1 = max(b for _, b in runs.values())
    with open(path, "wb") as fh:
        for t in range(t0, t1 + 1):
            for thread, (a, b) in sorted(runs.items()):
                if not a <= t <= b:
                    continue
                sec, frame = divmod(t, FPS)
                header = baseband_vdif.VDIFHeader.fromvalues(
                    edv=0, ref_epoch=REF_EPOCH, seconds=second0 + sec, frame_nr=frame,
                    thread_id=thread, bps=bps, complex_data=cplx, nchan=nchan,
                    samples_per_frame=spf, station=0x4142,
                )  # fmt: skip
                data = _payload(rng, bps, cplx, spf, nchan)
                baseband_vdif.VDIFFrame.fromdata(data, header).tofile(fh)


def _baseband_reading(path, threads, spf):
    """(time, nchan, pol) as baseband decodes each frame, and the frame times present
    per pol; time 0 is the earliest frame."""
    frames = []
    with open(path, "rb") as fh:
        while True:
            try:
                fr = baseband_vdif.VDIFFrame.fromfile(fh)
            except EOFError:
                break
            h = fr.header
            frames.append((h["seconds"] * FPS + h["frame_nr"], h["thread_id"], fr.data))
    t0 = min(t for t, _, _ in frames)
    ntime = max(t for t, _, _ in frames) - t0 + 1
    nchan = frames[0][2].shape[1]
    out = np.zeros((ntime * spf, nchan, len(threads)), frames[0][2].dtype)
    have = np.zeros((ntime, len(threads)), bool)
    for t, thread, data in frames:
        p = threads.index(thread)
        out[(t - t0) * spf : (t - t0 + 1) * spf, :, p] = data
        have[t - t0, p] = True
    return out, have


def _ours(bb, bps):
    """baseband's decoded values in voltstream's levels (docs/formats.md): the same
    codes, each reader with its own levels (1-bit: +-1 in both)."""
    if bps == 2:
        return np.sign(bb) * np.where(np.abs(bb) > 2, 3.3359, 1.0)
    scale, shift = {1: (1.0, 0.0), 4: (2.95, 0.0), 8: (35.5, -0.5)}[bps]
    return bb * scale + shift


def _read_all(f):
    blocks, valid = [], []
    for b in f.read_blocks(1000):
        b, v = b if isinstance(b, tuple) else (b, np.ones(len(b), bool))
        blocks.append(b)
        valid.append(v)
    return np.concatenate(blocks), np.concatenate(valid)


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("bps", [1, 2, 4, 8])
@pytest.mark.parametrize("nthread", [1, 4])
def test_baseband_stream_of_every_width_reads_as_baseband_reads_it(tmp_path, bps, cplx, nthread):
    import astropy.units as u
    from astropy.time import Time

    path = tmp_path / "b.vdif"
    spf, nchan = 64, 2
    rng = np.random.default_rng(bps * 10 + cplx + nthread)
    x = np.stack([_payload(rng, bps, cplx, spf * 25, nchan) for _ in range(nthread)], axis=1)
    rate = spf * FPS * u.Hz
    with baseband_vdif.open(path, "ws", edv=0, station=0x4142, sample_rate=rate,
                            samples_per_frame=spf, nchan=nchan, nthread=nthread,
                            complex_data=cplx, bps=bps,
                            time=Time("2024-03-04T05:06:07.3")) as fw:  # fmt: skip
        fw.write(x if nthread > 1 else x[:, 0])
    with baseband_vdif.open(path, "rs", sample_rate=rate) as fh:
        want = fh.read()  # (time, thread, channel) or (time, channel)
    want = want.reshape(len(want), nthread, nchan).transpose(0, 2, 1)
    f = open_vdif(path, freq_mhz=1400.0, frames_per_second=FPS)
    assert (f.obs.nbit, f.obs.ndim, f.obs.npol, f.obs.nchan) == (bps, 1 + cplx, nthread, nchan)
    assert f.obs.start_sec == pytest.approx(18367.3)  # 05:06:07.3
    got = f.read()
    assert got.shape == want.shape
    for part in (np.real, np.imag) if cplx else (np.real,):
        np.testing.assert_allclose(part(got), _ours(part(want), bps), atol=2e-3)


# Four threads, each starting and ending on its own frame, across second boundaries
# (FPS frames a second): thread 3 starts a second after thread 0, thread 1 ends first.
RUNS = {0: (0, 27), 1: (3, 19), 2: (7, 31), 3: (10, 30)}


@pytest.mark.parametrize("bps,cplx", [(1, False), (1, True), (2, False), (4, True), (8, True)])
def test_threads_starting_on_different_seconds_read_as_baseband_reads_each_frame(
    tmp_path, bps, cplx
):
    path = tmp_path / "s.vdif"
    spf, nchan = 32, 4
    _write_frames(path, bps, cplx, nchan, spf, RUNS, np.random.default_rng(bps))
    want, have = _baseband_reading(path, [0, 1, 2, 3], spf)
    f = open_vdif(path, freq_mhz=1400.0, frames_per_second=FPS)
    nframes = sum(b - a + 1 for a, b in RUNS.values())
    assert f.frame_table.shape == (32, 4)  # the span of all threads' frames
    assert f.missing_frames == 32 * 4 - nframes and f.invalid_frames == 0
    assert (f.frame_table >= 0).tolist() == have.tolist()
    assert (f.obs.start_mjd, f.obs.start_sec) == (60310, 5000.0)
    got, valid = _read_all(f)
    assert got.shape == want.shape
    # Samples of a time where some thread has no frame are lost (zeros, masked).
    assert valid.tolist() == np.repeat(have.all(axis=1), spf).tolist()
    present = np.repeat(have, spf, axis=0)[:, None, :].repeat(nchan, axis=1)
    assert not got[~present].any()  # a thread's absent frame reads as zeros
    for part in (np.real, np.imag) if cplx else (np.real,):
        np.testing.assert_allclose(part(got)[present], _ours(part(want), bps)[present], atol=2e-3)


@pytest.mark.parametrize("cplx", [False, True])
def test_sixteen_bit_vdif_reads_its_codes(tmp_path, cplx):
    """16-bit VDIF (baseband writes none): offset binary, code - 32768, little-endian
    within the 32-bit words, first part lowest (the spec's order)."""
    rng = np.random.default_rng(16)
    ndim, spf, nchan, nthread, nt = 1 + cplx, 16, 2, 4, 12
    values = rng.integers(-32768, 32768, (nt, nthread, spf * nchan * ndim))
    data = pack(values, 16)
    heads = encode_headers(
        seconds=SECOND0 + np.arange(nt)[:, None] // FPS, frame=np.arange(nt)[:, None] % FPS,
        thread=np.arange(nthread)[None], frame_len=32 + data.shape[-1], nchan=nchan,
        bits_per_sample=16, complex_data=cplx, ref_epoch=REF_EPOCH,
    ).reshape(nt, nthread, 32)  # fmt: skip
    path = tmp_path / "w.vdif"
    np.concatenate([heads, data], axis=-1).tofile(path)
    f = open_vdif(path, freq_mhz=1400.0, frames_per_second=FPS)
    assert f.obs.nbit == 16 and f.nsamp == nt * spf
    want = values.reshape(nt, nthread, spf, nchan, ndim).transpose(0, 2, 3, 1, 4)
    want = want.reshape(nt * spf, nchan, nthread, ndim).astype(np.float32)
    got = f.read()
    assert np.array_equal(got.real, want[..., 0])
    if cplx:
        assert np.array_equal(got.imag, want[..., 1])


def test_an_absurd_header_is_an_error_naming_the_frame(tmp_path):
    path = tmp_path / "s.vdif"
    _write_frames(path, 2, False, 4, 32, RUNS, np.random.default_rng(0))
    raw = np.fromfile(path, np.uint8)
    flen = int(decode_headers(raw[None, :16])["frame_len"][0])
    frames = raw.reshape(-1, flen)
    words = frames[:, :4].view("<u4")
    words[40, 0] = (words[40, 0] & np.uint32(0xC0000000)) | np.uint32((1 << 30) - 1)
    frames.tofile(path)
    with pytest.raises(FormatError, match=r"frame 40 \(byte \d+\) has seconds=1073741823"):
        open_vdif(path, freq_mhz=1400.0, frames_per_second=FPS)


def test_an_invalid_frame_with_a_zeroed_time_leaves_the_span_alone(tmp_path):
    """A fill frame whose header says second 0 (invalid bit set), as a station writes
    for a thread not started yet, is counted, not placed: the span is the valid
    frames'. (It once made the reader ask for a table from second 0 on: 170 GB here.)"""
    path = tmp_path / "s.vdif"
    _write_frames(path, 2, False, 4, 32, RUNS, np.random.default_rng(0), second0=1 << 29)
    raw = np.fromfile(path, np.uint8)
    flen = int(decode_headers(raw[None, :16])["frame_len"][0])
    frames = raw.reshape(-1, flen)
    words = frames[:, :8].view("<u4")
    words[40, 0] = np.uint32(1 << 31)  # invalid, seconds 0
    words[40, 1] &= np.uint32(0xFF000000)  # frame 0
    frames.tofile(path)
    f = open_vdif(path, freq_mhz=1400.0, frames_per_second=FPS)
    assert f.frame_table.shape == (32, 4) and f.invalid_frames == 1


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
def test_inspect_and_fold_take_one_bit_threads_starting_apart(tmp_path, cplx):
    """inspect takes all four threads; fold takes two (polarisations), one starting
    a second after the other and ending before it."""
    for name, runs in (("four", RUNS), ("two", {0: RUNS[0], 3: RUNS[3]})):
        path = tmp_path / f"{name}.vdif"
        _write_frames(path, 1, cplx, 4, 32, runs, np.random.default_rng(1))
        path.with_suffix(".vdif.json").write_text(
            json.dumps({"freq_mhz": 1400.0, "frames_per_second": FPS, "source": "J0000+0000"})
        )
        r = run_cli("inspect", str(path), "--json")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["bits"] == [1] and info["threads"] == sorted(runs)
        assert info["frames_per_thread"] == {str(t): b - a + 1 for t, (a, b) in runs.items()}
    out = tmp_path / "two.fits"
    r = run_cli("fold", str(path), "--device", "cpu", "--dm", "0", "--period", "0.01",
                "--nbin", "16", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
