"""Any DADA file folded live over loopback (issue 27, "Done when": DADA folded live):
`voltstream replay FILE.dada` sends a PSRDADA-style file (header comments and all;
NDIM 2 and NDIM 1, NBIT 8 and 16) as VDIF frames and prints the stream description
and the commands that take them; `fold --listen` run as printed, fed by the replay,
gives the archive `fold FILE.dada` gives. All through the CLI, in processes."""

from __future__ import annotations

import json
import shlex
import tomllib

import numpy as np
import pytest

from cli_process import run_cli
from fold_compare import assert_same_fold
from loopback import free_bind
from test_cli_outcomes import Listening
from test_dada_psrdada import complex_pulsar, psrdada_header
from voltstream.dsp.real import ComplexToReal
from voltstream.io.psrfits import read_psrfits
from voltstream.replay.dada_file import frame_payload
from voltstream.sim.signal import quantize_int8

FOLD = ["--dm", "20", "--period", "0.0200037", "--nbin", "32", "--tsub", "0.1",
        "--device", "cpu"]  # fmt: skip
KEYS = dict(FREQ=1400.0, SOURCE="J0000+0000", UTC_START="2024-06-11-12:34:56", OBS_OFFSET=0)


def _complex(tmp_path, nbit: int):
    """A lower-sideband band of 2 channels x 2 pols, complex, NBIT 8 or 16."""
    _, z = complex_pulsar(nchan=2, chan_bw=1.0, seconds=0.4)
    q, _ = quantize_int8(z)  # (n, nchan, npol, re/im) int8
    data = q if nbit == 8 else q.astype("<i2") * 100  # 16 bits: beyond int8
    path = tmp_path / "2024-06-11-12:34:56_0000000000000000.000000.dada"
    head = psrdada_header(8192, NBIT=nbit, NDIM=2, NPOL=2, NCHAN=2, BW=-2.0, TSAMP=1.0,
                          FILE_SIZE=data.nbytes, FILE_NUMBER=0, **KEYS)  # fmt: skip
    path.write_bytes(head + data.tobytes())
    return path, len(q), 2


def _real(tmp_path, nbit: int = 8):
    """EDD-style: one real 2 MHz band (4 MS/s), 2 pols, NDIM 1."""
    _, z = complex_pulsar(nchan=1, chan_bw=2.0, seconds=0.4)
    x = ComplexToReal()(z)
    q = np.clip(np.rint(x * (20 / x.std())), -127, 127).astype(np.int8)
    path = tmp_path / "edd.dada"
    head = psrdada_header(4096, NCHAN=1, NPOL=2, NDIM=1, NBIT=8, TSAMP=0.25, BW=2.0, **KEYS)
    path.write_bytes(head + q[..., None].tobytes())
    return path, len(q), 2


CASES = {"complex-8bit-lsb": lambda p: _complex(p, 8), "complex-16bit": lambda p: _complex(p, 16),
         "real-ndim1": _real}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_dada_file_replayed_folds_live_as_the_file_folds(tmp_path, case):
    path, nsamp, npol = CASES[case](tmp_path)
    file_out = tmp_path / "file.fits"
    r = run_cli("fold", str(path), *FOLD, "-o", str(file_out))
    assert r.returncode == 0, r.stderr

    bind, toml = free_bind(), tmp_path / "stream.toml"
    r = run_cli("replay", str(path), "--dest", bind, "--write-stream", str(toml), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert toml.exists() and "replay:" in r.stdout and "Traceback" not in r.stderr
    (fold_line,) = [ln.strip() for ln in r.stdout.splitlines() if "fold --listen" in ln]
    for verb in ("record", "capture"):
        assert f"voltstream {verb} --listen {bind} --stream {toml}" in r.stdout
    words = shlex.split(fold_line)
    assert words[:4] == ["voltstream", "fold", "--listen", bind] and str(toml) in words
    assert ("--device" in words) == case.startswith("complex-16")
    fill = {"DM": "20", "P": "0.0200037", "out.fits": str(tmp_path / "live.fits")}
    argv = [fill.get(w, w) for w in words[1:]]
    argv = [w for w in argv if w not in ("--device", "cpu")]  # given once, in FOLD
    report = tmp_path / "live.json"
    fold = Listening(*argv, *FOLD, "--engine", "socket", "--duration", "60",
                     "--idle-timeout", "3", "--report", str(report))  # fmt: skip
    sent = run_cli("replay", str(path), "--dest", bind, "--rate", "0.05", "--report",
                   str(tmp_path / "replay.json"))  # fmt: skip
    rc, out, err = fold.wait()
    assert sent.returncode == 0, sent.stderr
    assert rc == 0, out + err
    rep = json.loads((tmp_path / "replay.json").read_text())
    totals = json.loads(report.read_text())["totals"]
    assert totals["received"] == rep["packets"] and totals["missing"] == totals["foreign"] == 0
    desc = tomllib.loads(toml.read_text())
    per_sample = desc["nchan"] * desc["bits_per_sample"] * (2 if desc["complex"] else 1)
    spf = (desc["frame_len"] - 32) * 8 // per_sample
    assert nsamp % spf == 0 and rep["packets"] == nsamp // spf * npol  # every sample sent
    assert desc["threads"] == list(range(npol)) and not rep.get("tail_samples")
    assert_same_fold(read_psrfits(tmp_path / "live.fits"), read_psrfits(file_out))


def test_the_frames_fit_the_rate_and_the_file():
    # 1 MS/s of 2 channels x 8-bit complex (32 bits a sample): 2000 samples a frame
    # (8000 bytes) divide a second; a file of 3000 samples takes 1000-sample frames.
    assert frame_payload(1_000_000, 32, 400_000) == 8000
    assert frame_payload(1_000_000, 32, 3_000) == 4000
    assert frame_payload(999_983, 32, 1000) == 0  # a prime rate: no frame fits


def test_a_recording_s_packets_take_no_description(tmp_path):
    raw = tmp_path / "x.bin"
    raw.write_bytes(bytes(64))
    r = run_cli("replay", str(raw), "--packet-len", "32", "--dest", "127.0.0.1:9",
                "--dry-run")  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--write-stream and --dry-run are for a DADA file" in r.stderr
