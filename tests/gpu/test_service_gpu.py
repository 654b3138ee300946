"""The GPU paths of a clean stop (docs/operations.md, "Running as a service"):
SIGTERM during `fold --listen --device gpu` leaves a valid PSRFITS archive and the
report; SIGTERM ends `fengine --device gpu` with its report. As tests/test_service.py
does on the CPU: real processes, real signals, loopback UDP."""

from __future__ import annotations

import json
import signal

import pytest
from astropy.io import fits

from loopback import free_bind
from test_service import _start, signal_live_fold, sigterm_when_ready
from voltstream.service.shutdown import STOP_BOUND_S

pytestmark = pytest.mark.gpu


def test_sigterm_during_a_live_gpu_fold_leaves_a_valid_archive_and_report(tmp_path):
    bind = free_bind()
    fold, err = _start(
        "fold", "--listen", bind, "--format", "ynao", "--engine", "socket",
        "--packets-per-chunk", "256", "--buffer-mb", "64", "--duration", "600",
        "--dm", "1", "--period", "0.005", "--nbin", "32", "--tsub", "0.002",
        "--device", "gpu", "--no-status",
        "--output", str(tmp_path / "live.fits"), "--report", str(tmp_path / "live.json"),
    )  # fmt: skip
    out, stderr, stop_s = signal_live_fold(fold, err, bind, signal.SIGTERM, rate_gbps=0.5)
    assert fold.returncode == 0, out + stderr
    assert stop_s < STOP_BOUND_S, f"the stop took {stop_s:.1f} s"
    with fits.open(tmp_path / "live.fits") as hdus:
        assert hdus["SUBINT"].header["NAXIS2"] >= 1
        assert hdus["SUBINT"].header["NBIN"] == 32
    report = json.loads((tmp_path / "live.json").read_text())
    assert report["interrupted"] is True
    assert report["totals"]["received"] > 0
    assert report["pipeline"]["blocks"] > 0


def test_sigterm_ends_a_gpu_fengine_with_its_report(tmp_path):
    proc, err = _start(
        "fengine", "--listen", free_bind(), "--device", "gpu", "--engine", "socket",
        "--output", str(tmp_path / "f.spead"), "--duration", "600",
        "--no-status", "--report", str(tmp_path / "report.json"),
    )  # fmt: skip
    out, stderr = sigterm_when_ready(proc, err)
    assert proc.returncode == 0, out + stderr
    assert "SIGTERM: stopping" in stderr
    assert json.loads((tmp_path / "report.json").read_text())["interrupted"] is True
