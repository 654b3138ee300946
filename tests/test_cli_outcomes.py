"""How runs end, as a newcomer running the README tour sees them (issue 30): the real
CLI in processes of its own, small simulated streams on loopback and small files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cli_process import run_cli
from loopback import free_bind
from voltstream.io.psrfits import read_psrfits


class Listening:
    """``voltstream <args>`` started in a process of its own, returned once it logs
    that it listens (so a sender does not race the bind)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voltstream.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.err_head = ""
        assert self.proc.stderr is not None
        while "listening on" not in self.err_head:
            line = self.proc.stderr.readline()
            if not line:
                out, err = self.proc.communicate()
                raise AssertionError(f"ended before it listened: {out}{self.err_head}{err}")
            self.err_head += line

    def wait(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            self.proc.kill()
        return self.proc.returncode, out, self.err_head + err


VDIF16 = ("--format", "vdif", "--nchan", "16")
FOLD = ("--dm", "26.833", "--period", "0.0333", "--nbin", "64", "--tsub", "0.1")


@pytest.mark.parametrize("bits", ["2", "4"])
def test_live_cpu_fold_of_packed_vdif_equals_the_file_fold(tmp_path, bits):
    """2- and 4-bit VDIF folds live on the CPU (it died at the first chunk with
    "still exported to a NumPy array"), to the very samples of a fold of the same
    frames from a file."""
    sim = ("simulate", *VDIF16, "--bits", bits, "--duration", "0.2", "--seed", "3")
    r = run_cli(*sim, "--output", str(tmp_path / "f.vdif"))
    assert r.returncode == 0, r.stderr
    r = run_cli("fold", str(tmp_path / "f.vdif"), *FOLD, "--device", "cpu",
                "-o", str(tmp_path / "file.fits"))  # fmt: skip
    assert r.returncode == 0, r.stderr

    bind = free_bind()
    fold = Listening("fold", "--listen", bind, *VDIF16, "--bits", bits, *FOLD,
                     "--device", "cpu", "--duration", "60", "--idle-timeout", "1.5",
                     "-o", str(tmp_path / "live.fits"))  # fmt: skip
    r = run_cli(*sim, "--dest", bind, "--rate", "0.1")
    assert r.returncode == 0, r.stderr
    rc, out, err = fold.wait()
    assert rc == 0, out + err
    assert "received=1600  missing=0" in out  # 2 threads x 800 frames

    live, file = read_psrfits(tmp_path / "live.fits"), read_psrfits(tmp_path / "file.fits")
    assert live.data.shape == file.data.shape
    assert np.abs(file.data).max() > 0
    np.testing.assert_array_equal(live.data, file.data)


def test_capture_output_of_packed_vdif_is_refused_before_it_listens(tmp_path):
    """2-bit VDIF cannot go to an 8-bit DADA file: said at once, before the capture
    opens (it was a "still exported" error at the first chunk, hiding this one)."""
    r = run_cli("capture", "--listen", free_bind(), *VDIF16, "--bits", "2",
                "--duration", "30", "--output", str(tmp_path / "x.dada"))  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "2-bit VDIF cannot be written" in r.stderr and "listening" not in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.dada").exists()
