"""The command line: --help everywhere, one clear line for every kind of bad
input, and the end-to-end loopback run (simulate → capture → fold)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pytest

from cli_process import run_cli
from voltstream.cli import build_parser, main

VERBS = ("simulate", "capture", "fold", "fengine", "demo")


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: voltstream {verb}" in out
    assert len(out.splitlines()) > 5


def test_top_level_help_lists_verbs():
    text = build_parser().format_help()
    for verb in VERBS:
        assert verb in text


def test_unknown_format_is_rejected(capsys):
    with pytest.raises(SystemExit) as e:
        main(["capture", "--format", "mk7", "--listen", "127.0.0.1:7000", "--duration", "1"])
    assert e.value.code == 2
    assert "invalid choice: 'mk7'" in capsys.readouterr().err


def test_bad_host_port_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["capture", "--listen", "localhost", "--duration", "1"])
    assert "expected HOST:PORT" in capsys.readouterr().err


def test_fold_missing_file_is_one_line(tmp_path):
    r = run_cli(
        "fold",
        str(tmp_path / "nope.dada"),
        "--dm",
        "10",
        "--period",
        "0.1",
        "-o",
        str(tmp_path / "x.fits"),
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "no such file" in r.stderr


def test_fold_rejects_a_non_baseband_file(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    r = run_cli("fold", str(junk), "--dm", "10", "--period", "0.1", "-o", str(tmp_path / "x.fits"))
    assert r.returncode == 2
    assert "not a DADA file" in r.stderr
    assert "Traceback" not in r.stderr


def _dada_bytes(header: dict, nbytes: int) -> bytes:
    text = "".join(f"{k} {v}\n" for k, v in header.items()).encode()
    rng = np.random.default_rng(5)
    return text.ljust(4096, b"\0") + rng.integers(-128, 128, nbytes, dtype=np.int8).tobytes()


GOOD_HEADER = {
    "HEADER": "DADA",
    "HDR_VERSION": "1.0",
    "HDR_SIZE": 4096,
    "DADA_VERSION": "1.0",
    "TELESCOPE": "test",
    "SOURCE": "J0000+0000",
    "FREQ": 1420,
    "BW": 8,
    "NCHAN": 2,
    "NPOL": 2,
    "NBIT": 8,
    "NDIM": 2,
    "TSAMP": 0.25,
    "UTC_START": "2026-01-01-00:00:00",
    "OBS_OFFSET": 0,
    "ORDER": "TFP",
}


def test_fold_dada_missing_key_names_it(tmp_path):
    hdr = dict(GOOD_HEADER)
    del hdr["TSAMP"]
    path = tmp_path / "nokey.dada"
    path.write_bytes(_dada_bytes(hdr, 8 * 4096))
    r = run_cli("fold", str(path), "--dm", "1", "--period", "0.01", "-o", str(tmp_path / "x.fits"))
    assert r.returncode == 2
    assert "TSAMP" in r.stderr
    assert "Traceback" not in r.stderr


def test_fold_truncated_dada_is_an_error(tmp_path):
    path = tmp_path / "short.dada"
    path.write_bytes(_dada_bytes(GOOD_HEADER, 0)[:1000])
    r = run_cli("fold", str(path), "--dm", "1", "--period", "0.01", "-o", str(tmp_path / "x.fits"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_capture_port_in_use_is_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = run_cli("capture", "--listen", f"127.0.0.1:{port}", "--duration", "0.5")
    assert r.returncode == 2
    assert "in use" in r.stderr
    assert "Traceback" not in r.stderr


def test_capture_keeps_bind_as_the_old_name_of_listen():
    args = build_parser().parse_args(["capture", "--bind", "127.0.0.1:7000", "--duration", "1"])
    assert args.listen == "127.0.0.1:7000"


def test_end_to_end_loopback(tmp_path):
    """simulate → UDP loopback → capture → DADA → fold: zero loss, pulsar at its phase."""
    out = tmp_path / "demo"
    r = run_cli("demo", "--output", str(out), "--duration", "0.25", "--rate", "1", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "demo-report.json").read_text())
    totals = report["capture"]["totals"]
    assert totals["received"] > 0
    assert all(totals[k] == 0 for k in ("missing", "late", "duplicate", "dropped", "malformed"))
    assert report["fold"]["snr"] > 10
    assert abs(report["fold"]["peak_phase"] - report["fold"]["expected_phase"]) < 0.02
    for name in ("demo.fits", "demo.png", "demo.dada", "capture-report.json"):
        assert (out / name).stat().st_size > 0


def test_device_gpu_without_a_gpu_is_refused(monkeypatch):
    from voltstream import device
    from voltstream.errors import ConfigError

    monkeypatch.setattr(device, "gpu_available", lambda: False)
    assert device.resolve_device("auto") == "cpu"
    assert device.resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="no usable CUDA GPU"):
        device.resolve_device("gpu")


def test_fold_needs_exactly_one_input(tmp_path):
    r = run_cli("fold", "--dm", "1", "--period", "0.1", "-o", str(tmp_path / "x.fits"))
    assert r.returncode == 2
    assert "either an INPUT file or --listen" in r.stderr


def test_live_fold_of_vdif_over_loopback(tmp_path):
    """fold --listen captures VDIF (two threads = two pols) and folds it in one process."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--format", "vdif", "--nchan", "16", "--chan-bw", "2", "--freq", "1400"]
    fold = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voltstream.cli",
            "fold",
            "--listen",
            f"127.0.0.1:{port}",
            "--duration",
            "60",
            "--idle-timeout",
            "5",  # counted from the start too: room for the simulator's start-up
            "--dm",
            "10",
            "--period",
            "0.01",
            "--nbin",
            "64",
            "--device",
            "cpu",
            "-o",
            str(tmp_path / "live.fits"),
            "--report",
            str(tmp_path / "live.json"),
            *common,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import time

        time.sleep(1.5)  # let it bind
        sim = run_cli(
            "simulate",
            *common,
            "--signal",
            "pulsar",
            "--dm",
            "10",
            "--period",
            "0.01",
            "--pulse-phase",
            "0.6",
            "--duration",
            "0.1",
            "--dest",
            f"127.0.0.1:{port}",
            "--rate",
            "0.5",
        )
        assert sim.returncode == 0, sim.stderr
        out, err = fold.communicate(timeout=120)
    finally:
        fold.kill()
    assert fold.returncode == 0, out + err
    report = json.loads((tmp_path / "live.json").read_text())
    assert report["totals"]["received"] == 2 * (200_000 // 250)  # 2 threads x frames
    assert report["totals"]["missing"] == 0 and report["totals"]["foreign"] == 0
    from voltstream.fold.reference import profile_snr
    from voltstream.io.psrfits import read_psrfits

    arch = read_psrfits(tmp_path / "live.fits")
    prof = arch.profile()
    assert profile_snr(prof) > 10
    assert abs((np.argmax(prof) + 0.5) / arch.nbin - 0.6) < 0.03


def test_fold_par_without_pint_says_what_to_do(tmp_path, monkeypatch, capsys):
    """--par needs PINT; without it the user is told how to get it or use --polyco."""
    from voltstream.errors import ConfigError
    from voltstream.io import par

    monkeypatch.setitem(sys.modules, "pint", None)
    (tmp_path / "p.par").write_text("PSRJ J0000+0000\nF0 30.03\nDM 26.833\n")
    with pytest.raises(ConfigError, match="pint-pulsar"):
        par.predictor_from_par(tmp_path / "p.par", 60000, 0.0, 1.0, 1420.0)
    with pytest.raises(SystemExit):
        main(["fold", "--help"])
    assert "--par PAR" in capsys.readouterr().out
