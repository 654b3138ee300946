"""`voltstream inspect` prints a command line that works for every VDIF shape it
reports (issue 27, item 3): baseband (PyPI, the peer) writes the file; the real CLI
inspects it and writes its stream description (--write-stream); each printed command
then runs as printed, placeholders filled in: the file's fold, and capture, record and
fold --listen fed the file's frames over loopback. Counts are exact, the file's fold
reads the samples baseband reads, the recording is the frames sent (no fill before
the first or after the last) and reads as baseband reads the file, and the live fold
folds what the file's fold folds (every width baseband writes: 1, 2, 4, 8 bits; 1 bit
on the CPU only, as printed; legacy headers through the description)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time
from baseband import vdif as baseband_vdif  # requirements-dev.txt: a real peer

from cli_process import run_cli
from fold_compare import assert_same_fold
from loopback import free_bind, send
from voltstream.io.baseband import open_baseband
from voltstream.io.psrfits import read_psrfits
from voltstream.io.vdif import decode_headers

FPS = 20  # frames per second per thread: 1.5 s of frames cross a second boundary
SECONDS = 1.5
# A period no sample time divides: no sample sits on a bin edge, where the live and
# the file fold (other start times) could round its phase apart.
PERIOD = "0.0100037"

# name: (bits, complex, channels, threads, EDV (None: legacy headers), samples a frame)
SHAPES = {
    "edv3-2bit-real-4-threads": (2, False, 1, 4, 3, 20000),  # the common VLBI shape
    "2bit-real-8-channels-1-thread": (2, False, 8, 1, 0, 1000),
    "legacy-2bit-real": (2, False, 4, 2, None, 1000),
    "1bit-real": (1, False, 4, 2, 0, 1024),
    "1bit-complex-1-thread": (1, True, 8, 1, 0, 512),
    "4bit-complex-1-thread": (4, True, 2, 1, 0, 500),
    "4bit-real-4-threads": (4, False, 2, 4, 0, 1000),
    "8bit-complex-4-threads": (8, True, 4, 4, 0, 250),
    "8bit-real-legacy-1-thread": (8, False, 4, 1, None, 500),
    "2bit-complex-2-threads": (2, True, 4, 2, 0, 500),  # the format options describe it
}


def _write(path: Path, bps, cplx, nchan, nthread, edv, spf) -> None:
    rng = np.random.default_rng(bps * 100 + nchan * 10 + nthread)
    n = int(spf * FPS * SECONDS)
    x = rng.normal(0, 2.0 if bps == 2 else 1.0, (n, nthread, nchan)).astype(np.float32)
    if cplx:
        x = x + 1j * rng.normal(0, 1.0, x.shape).astype(np.float32)
    x = x if nthread > 1 else x[:, 0]
    x = x[..., 0] if nchan == 1 else x  # baseband's sample shape has no axis of one
    kw = {"edv": False} if edv is None else {"edv": edv, "station": 0x4142}
    with baseband_vdif.open(path, "ws", sample_rate=spf * FPS * u.Hz, samples_per_frame=spf,
                            nchan=nchan, nthread=nthread, complex_data=cplx, bps=bps,
                            time=Time("2024-03-04T05:06:07"), **kw) as fw:  # fmt: skip
        fw.write(x)
    side = {"freq_mhz": 1400.0, "frames_per_second": FPS, "source": "J0000+0000"}
    Path(str(path) + ".json").write_text(json.dumps(side))


def _frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The file's frames (n, frame_len) and each one's thread."""
    raw = np.fromfile(path, np.uint8)
    flen = int(decode_headers(raw[None, :16])["frame_len"][0])
    frames = raw.reshape(-1, flen)
    return frames, decode_headers(frames[:, :16])["thread"]


def _baseband_read(frames: np.ndarray, path: Path, spf: int) -> np.ndarray:
    """baseband's reading of ``frames`` (one thread's, in time order)."""
    frames.tofile(path)
    with baseband_vdif.open(path, "rs", sample_rate=spf * FPS * u.Hz) as fh:
        return fh.read()


def _ours(theirs: np.ndarray, bps: int) -> np.ndarray:
    """baseband's decoded values in voltstream's levels (docs/formats.md): the same
    codes, each reader with its own levels (1-bit: +-1 in both)."""
    if bps == 2:
        return np.sign(theirs) * np.where(np.abs(theirs) > 2, 3.3359, 1.0)
    scale, shift = {1: (1.0, 0.0), 4: (2.95, 0.0), 8: (35.5, -0.5)}[bps]
    return theirs * scale + shift


def _filled(command: str, **values: str) -> list[str]:
    """The printed command's words, placeholders replaced, without `voltstream`."""
    words = shlex.split(command)
    assert words[0] == "voltstream", command
    return [values.get(w, w) for w in words[1:]]


def _run_fed(argv: list[str], bind: str, frames: np.ndarray, ready) -> tuple[int, str]:
    """Runs `voltstream ARGV` in a process, sends ``frames`` to ``bind`` once
    ``ready()`` (the verb listens), then stops it as a user does (Ctrl-C)."""
    proc = subprocess.Popen([sys.executable, "-m", "voltstream.cli", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and ready(), proc.communicate(timeout=5)[1]
        send(bind, frames, pace_every=32)
        time.sleep(1.0)  # the last frames in, through the reorder window
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, out + err


def _listening(bind: str):
    from loopback import wait_bound

    def ready() -> bool:
        try:
            wait_bound(bind, timeout=0.01)
        except AssertionError:
            return False
        return True

    return ready


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_command_inspect_prints_runs_and_takes_the_stream(tmp_path, shape):
    bps, cplx, nchan, nthread, edv, spf = SHAPES[shape]
    path = tmp_path / "scan.vdif"
    _write(path, bps, cplx, nchan, nthread, edv, spf)
    frames, thread_of = _frames(path)
    threads = sorted(set(thread_of.tolist()))
    toml = tmp_path / "stream.toml"
    r = run_cli("inspect", str(path), "--json", "--write-stream", str(toml))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    commands, not_taken = info["commands"], info["not_taken"]
    assert "not yet on the command line" not in r.stdout and "_core.Capture" not in r.stdout
    plain = cplx and bps in (2, 4, 8) and edv is not None
    # The description is what the capture and the recording use, where they need one.
    assert (f"--stream {toml}" in commands["record"]) == (not plain or nthread > 2)
    assert toml.read_text() == info["stream"] and "FILE.toml" not in r.stdout

    # The file's fold, as printed: every thread (more than two: subbands, --npol 1).
    folded = threads
    out = tmp_path / "file.fits"
    argv = _filled(commands["fold"], DM="0", P=PERIOD, **{"out.fits": str(out)})
    assert ("--npol" in argv) == (nthread > 2) and "--vdif-threads" not in argv
    r = run_cli(*argv, "--device", "cpu", "--nbin", "16", "--tsub", "5")
    assert r.returncode == 0, r.stderr
    nchan_folded = nchan * (nthread if nthread > 2 else 1)
    assert f"x {nchan_folded} channel" in r.stdout, r.stdout
    reader = open_baseband(path)
    want = reader.nsamp if cplx else (reader.nsamp - 64) // 2  # real: RealToComplex's taps
    assert f"{want} samples folded" in r.stdout and out.stat().st_size > 0
    # What it folded: every thread, each as baseband reads its frames.
    got = reader.read()
    for pol, t in enumerate(folded):
        theirs = _baseband_read(frames[thread_of == t], tmp_path / "one.vdif", spf)
        theirs = theirs.reshape(len(theirs), -1)
        assert got.shape[0] == len(theirs)
        for part in (np.real, np.imag) if cplx else (np.real,):
            np.testing.assert_allclose(part(got[:, :, pol]), _ours(part(theirs), bps), atol=2e-3)

    # record, as printed, fed the file's frames: every frame recorded, as sent.
    bind, rec = free_bind(), tmp_path / "disk"
    rec.mkdir()
    report = tmp_path / "record.json"
    argv = _filled(commands["record"], **{"HOST:PORT": bind, "NAME": "s1", "DIR": str(rec)})
    code, text = _run_fed([*argv, "--engine", "socket", "--duration", "60", "--report",
                           str(report)], bind, frames,
                          lambda: (rec / "s1.manifest.json").exists())  # fmt: skip
    assert code == 0, text
    totals = json.loads(report.read_text())["capture"]["totals"]
    assert (totals["received"], totals["missing"], totals["foreign"]) == (len(frames), 0, 0)
    for stream, t in enumerate(threads):
        (kept,) = (rec / "s1").glob(f"s1_s{stream:02}_*.vdif")
        mine = np.fromfile(kept, np.uint8).reshape(-1, frames.shape[1])
        # The frames sent, first to last: no fill frame before or after them.
        assert not decode_headers(mine[:, :16])["invalid"].any()
        assert mine.tobytes() == frames[thread_of == t].tobytes()
        ours = _baseband_read(mine, tmp_path / "mine.vdif", spf)
        theirs = _baseband_read(frames[thread_of == t], tmp_path / "theirs.vdif", spf)
        assert np.array_equal(ours, theirs)

    # capture, as printed: every frame counted, none lost.
    bind, report = free_bind(), tmp_path / "capture.json"
    argv = _filled(commands["capture"], **{"HOST:PORT": bind, "S": "60"})
    code, text = _run_fed([*argv, "--engine", "socket", "--report", str(report)], bind,
                          frames, _listening(bind))  # fmt: skip
    assert code == 0, text
    totals = json.loads(report.read_text())["totals"]
    assert (totals["received"], totals["missing"], totals["foreign"]) == (len(frames), 0, 0)

    # fold --listen, as printed (real samples with --real, legacy headers through the
    # description, 1 bit on the CPU): it folds what the file's fold folded.
    assert "fold_listen" in commands and "fold_listen" not in not_taken
    live_argv = commands["fold_listen"]
    assert ("--real" in live_argv) == (not cplx and edv is not None)  # else the description
    assert (f"--stream {toml}" in live_argv) == (edv is None)
    assert ("--device cpu" in live_argv) == (bps == 1)
    bind, live_out, report = free_bind(), tmp_path / "live.fits", tmp_path / "live.json"
    argv = _filled(live_argv, **{"HOST:PORT": bind, "DM": "0", "P": PERIOD,
                                 "out.fits": str(live_out)})  # fmt: skip
    if bps != 1:
        argv += ["--device", "cpu"]
    code, text = _run_fed([*argv, "--nbin", "16", "--tsub", "5", "--engine", "socket",
                           "--duration", "60", "--report", str(report)], bind, frames,
                          _listening(bind))  # fmt: skip
    assert code == 0, text
    totals = json.loads(report.read_text())["totals"]
    assert (totals["received"], totals["missing"], totals["foreign"]) == (len(frames), 0, 0)
    assert_same_fold(read_psrfits(live_out), read_psrfits(out))


def test_fold_listen_takes_the_description_inspect_wrote_and_folds_two_of_its_threads(tmp_path):
    """The 4-thread complex stream's description (its capture's and recording's): the
    live fold takes it, with the two threads it folds picked by --vdif-threads."""
    path, toml = tmp_path / "scan.vdif", tmp_path / "stream.toml"
    _write(path, *SHAPES["8bit-complex-4-threads"])
    frames, thread_of = _frames(path)
    r = run_cli("inspect", str(path), "--write-stream", str(toml))
    assert r.returncode == 0 and f"--stream {toml}" in r.stdout, r.stderr
    bind, out, report = free_bind(), tmp_path / "live.fits", tmp_path / "live.json"
    code, text = _run_fed(["fold", "--listen", bind, "--stream", str(toml), "--vdif-threads",
                           "2,3", "--device", "cpu", "--dm", "0", "--period", "0.01", "--nbin",
                           "16", "-o", str(out), "--engine", "socket", "--duration", "60",
                           "--report", str(report)], bind, frames, _listening(bind))  # fmt: skip
    assert code == 0, text
    totals = json.loads(report.read_text())["totals"]
    mine = int(np.isin(thread_of, [2, 3]).sum())
    assert (totals["received"], totals["missing"]) == (mine, 0)
    assert totals["foreign"] == len(frames) - mine and out.stat().st_size > 0


@pytest.mark.parametrize("bps,cplx", [(2, True), (1, False)], ids=["2bit-complex", "1bit-real"])
def test_threads_starting_apart_record_from_their_first_frame_and_fold_live_as_the_file(
    tmp_path, bps, cplx
):
    """Four threads that start and end on their own frames, across seconds (as a
    station writes them; baseband writes each frame): the recording, as inspect
    prints it, holds each thread's frames from its first to its last (no fill frame
    before a thread's start, the stream having begun mid-chunk for three of them),
    and fold --listen of all four (subbands) folds what the file's fold of them folds."""
    from test_vdif_widths import FPS as STATION_FPS
    from test_vdif_widths import RUNS, _write_frames

    path = tmp_path / "station.vdif"
    _write_frames(path, bps, cplx, 4, 32, RUNS, np.random.default_rng(bps))
    side = {"freq_mhz": 1400.0, "frames_per_second": STATION_FPS, "source": "J0000+0000"}
    Path(str(path) + ".json").write_text(json.dumps(side))
    frames, thread_of = _frames(path)
    toml = tmp_path / "stream.toml"
    r = run_cli("inspect", str(path), "--json", "--write-stream", str(toml))
    assert r.returncode == 0, r.stderr
    commands = json.loads(r.stdout)["commands"]

    bind, rec, report = free_bind(), tmp_path / "disk", tmp_path / "record.json"
    rec.mkdir()
    argv = _filled(commands["record"], **{"HOST:PORT": bind, "NAME": "s1", "DIR": str(rec)})
    code, text = _run_fed([*argv, "--engine", "socket", "--duration", "60", "--packets-per-chunk",
                           "16", "--report", str(report)], bind, frames,
                          lambda: (rec / "s1.manifest.json").exists())  # fmt: skip
    assert code == 0, text
    assert json.loads(report.read_text())["capture"]["totals"]["received"] == len(frames)
    for stream, t in enumerate(sorted(RUNS)):
        (kept,) = (rec / "s1").glob(f"s1_s{stream:02}_*.vdif")
        mine = np.fromfile(kept, np.uint8).reshape(-1, frames.shape[1])
        assert mine.tobytes() == frames[thread_of == t].tobytes(), t

    period = "0.1000037"  # 32 samples a period at 320 samples a second, off the bins
    file_out, live_out = tmp_path / "file.fits", tmp_path / "live.fits"
    fold = ("--nbin", "16", "--tsub", "50", "--device", "cpu")
    argv = _filled(commands["fold"], DM="0", P=period, **{"out.fits": str(file_out)})
    r = run_cli(*argv, *fold)
    assert r.returncode == 0, r.stderr
    bind = free_bind()
    argv = _filled(commands["fold_listen"], **{"HOST:PORT": bind, "DM": "0", "P": period,
                                               "out.fits": str(live_out)})  # fmt: skip
    argv = [w for w in argv if w not in ("--device", "cpu")]  # given once, below
    code, text = _run_fed([*argv, *fold, "--engine", "socket", "--duration", "60"], bind,
                          frames, _listening(bind))  # fmt: skip
    assert code == 0, text
    live, file = read_psrfits(live_out), read_psrfits(file_out)
    assert live.excluded_samples == file.excluded_samples
    assert_same_fold(live, file)
