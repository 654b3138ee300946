"""How runs end, as a newcomer running the README tour sees them (issue 30): the real
CLI in processes of its own, small simulated streams on loopback and small files."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_process import fold_of_a_file, run_cli
from loopback import free_bind, wait_bound
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


@pytest.mark.parametrize("bits", ["1", "2", "4", "16"])
def test_live_cpu_fold_of_packed_vdif_equals_the_file_fold(tmp_path, bits):
    """1-, 2-, 4- and 16-bit VDIF folds live on the CPU (2 and 4 bits died at the first
    chunk with "still exported to a NumPy array"; 1 and 16 bits were refused), to the
    very samples of a fold of the same frames from a file."""
    sim = ("simulate", *VDIF16, "--bits", bits, "--duration", "0.2", "--seed", "3")
    fold_of_a_file(sim, FOLD, tmp_path / "f.vdif")

    bind = free_bind()
    fold = Listening("fold", "--listen", bind, *VDIF16, "--bits", bits, *FOLD,
                     "--device", "cpu", "--duration", "60", "--idle-timeout", "3",
                     "-o", str(tmp_path / "live.fits"))  # fmt: skip
    r = run_cli(*sim, "--dest", bind, "--rate", "0.1")
    assert r.returncode == 0, r.stderr
    rc, out, err = fold.wait()
    assert rc == 0, out + err
    per_thread = 400 * int(bits)  # 0.2 s at 4 MHz in 8000-byte frames: 800 of 2-bit
    assert f"received={2 * per_thread}  missing=0" in out  # 2 threads

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


def test_capture_that_receives_nothing_says_so_and_leaves_no_file(tmp_path):
    """Nothing sent: status 3, one line naming the address, no header-only DADA file
    (it was status 0 and a DADA header posing as a recording)."""
    bind, out = free_bind(), tmp_path / "obs.dada"
    r = run_cli("capture", "--format", "ynao", "--listen", bind, "--duration", "1",
                "--output", str(out), "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"nothing arrived on {bind} in 1 s" in r.stderr and "firewall" in r.stderr
    assert not out.exists() and "removed" in r.stderr
    assert json.loads((tmp_path / "r.json").read_text())["totals"]["received"] == 0


def test_idle_timeout_ends_a_run_that_never_received(tmp_path):
    """--idle-timeout counts from the start while nothing arrives (it waited out the
    whole --duration), and the run says why it ended."""
    t = time.monotonic()
    r = run_cli("capture", "--format", "ynao", "--listen", free_bind(), "--duration", "60",
                "--idle-timeout", "1")  # fmt: skip
    assert time.monotonic() - t < 30
    assert r.returncode == 3, r.stderr
    assert "no packet in 1 s (--idle-timeout)" in r.stderr


def test_capture_of_another_format_points_to_inspect(tmp_path):
    """VDIF frames sent to a YNAO capture: status 3 and a pointer to inspect (it was
    status 0 with malformed=6400 and received=0)."""
    bind = free_bind()
    cap = Listening("capture", "--format", "ynao", "--listen", bind, "--duration", "60",
                    "--idle-timeout", "3", "--output", str(tmp_path / "x.dada"))  # fmt: skip
    r = run_cli("simulate", *VDIF16, "--duration", "0.02", "--dest", bind, "--rate", "0.1")
    assert r.returncode == 0, r.stderr
    rc, out, err = cap.wait()
    assert rc == 3, out + err
    assert "received=0" in out
    assert "packets arrived on" in err and f"voltstream inspect --listen {bind}" in err
    assert not (tmp_path / "x.dada").exists()


def test_live_fold_that_receives_nothing_says_so(tmp_path):
    """fold --listen with nothing sent: status 3 and the same line, no archive (it was
    status 2, "input of 0 samples is shorter than one dedispersion FFT")."""
    bind = free_bind()
    r = run_cli("fold", "--listen", bind, *VDIF16, *FOLD, "--device", "cpu",
                "--duration", "1", "-o", str(tmp_path / "x.fits"))  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert f"nothing arrived on {bind}" in r.stderr and "not written" in r.stderr
    assert not (tmp_path / "x.fits").exists()


def test_duration_that_cuts_a_live_stream_warns(tmp_path):
    """A --duration that runs out while packets still arrive: a warning saying so and
    how to capture all of it (it ended silently with part of the data, missing=0);
    exit status 0, nothing lost of what was captured."""
    bind = free_bind()
    cap = Listening("capture", *VDIF16, "--listen", bind, "--duration", "1.5",
                    "--report", str(tmp_path / "r.json"))  # fmt: skip
    # About 4 s of sending: still going when the capture stops (then it is refused).
    run_cli("simulate", *VDIF16, "--duration", "0.1", "--dest", bind, "--rate", "0.05")
    rc, out, err = cap.wait()
    assert rc == 0, out + err
    assert "warning: the stream was still arriving when --duration" in out
    assert "longer --duration and --idle-timeout" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["still_arriving"] and report["ended"] == "duration"
    assert 0 < report["totals"]["received"] < 3200  # of 2 x 1600 frames sent


def test_duration_after_the_stream_ended_does_not_warn(tmp_path):
    """The warning is for a stream cut short only: a stream over well before the end
    of --duration gets none."""
    bind = free_bind()
    cap = Listening("capture", *VDIF16, "--listen", bind, "--duration", "3",
                    "--report", str(tmp_path / "r.json"))  # fmt: skip
    r = run_cli("simulate", *VDIF16, "--duration", "0.01", "--dest", bind, "--rate", "0.1")
    assert r.returncode == 0, r.stderr
    rc, out, err = cap.wait()
    assert rc == 0, out + err
    assert "still arriving" not in out
    assert (
        json.loads((tmp_path / "r.json").read_text())["totals"]["received"] == 320
    )  # 2 threads x 160 frames


def test_vdif_threads_auto_does_not_refuse_a_running_sender(tmp_path):
    """--vdif-threads auto learns from a sender already running; the port stays bound
    from the learning to the capture, so the sender (a connected socket, which an ICMP
    port-unreachable ends) is never refused, and the capture gets its stream."""
    bind = free_bind()
    cap = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "capture", *VDIF16, "--npol", "1",
         "--vdif-threads", "auto", "--station", "Ef", "--listen", bind, "--duration", "60",
         "--idle-timeout", "3", "--report", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_bound(bind)  # the learning socket
        sim = run_cli("simulate", *VDIF16, "--npol", "1", "--vdif-threads", "5",
                      "--station", "Ef", "--duration", "0.1", "--dest", bind,
                      "--rate", "0.02")  # fmt: skip
        out, err = cap.communicate(timeout=120)
    finally:
        cap.kill()
    assert sim.returncode == 0, sim.stderr  # was: "refused the packets"
    assert cap.returncode == 0, out + err
    assert "VDIF threads [5] of station" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["totals"]["received"] > 0 and report["totals"]["foreign"] == 0


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (("fold", "IN", *FOLD, "-o", "nodir/x.fits"), "-o nodir/x.fits"),
        (("fold", "IN", *FOLD, "-o", "TMP/x.fits", "--report", "nodir/r.json"), "--report"),
        (("fold", "IN", *FOLD, "-o", "TMP/x.fits", "--plot", "nodir/p.png"), "--plot"),
        (("capture", "--listen", "BIND", "--output", "nodir/x.dada"), "--output"),
        (("capture", "--listen", "BIND", "--report", "nodir/r.json"), "--report"),
        (("record", "--listen", "BIND", "--scan", "s", "--dirs", "nodir"), "--dirs"),
    ],
)
def test_output_paths_are_checked_before_the_work(tmp_path, argv, option):
    """An output in a directory that does not exist: one line naming the option, exit
    2, before the work (a fold failed only after the whole fold had run)."""
    r = run_cli("simulate", *VDIF16, "--duration", "0.05", "--output", str(tmp_path / "f.vdif"))
    assert r.returncode == 0, r.stderr
    bind = free_bind()
    sub = {"IN": str(tmp_path / "f.vdif"), "BIND": bind}
    args = [sub.get(a, a.replace("nodir", str(tmp_path / "nodir")).replace("TMP", str(tmp_path)))
            for a in argv]  # fmt: skip
    t = time.monotonic()
    r = run_cli(*args, "--duration", "30") if argv[0] != "fold" else run_cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert option.replace("nodir", str(tmp_path / "nodir")) in r.stderr
    assert "does not exist" in r.stderr or "not a directory" in r.stderr
    assert "listening" not in r.stderr and "Traceback" not in r.stderr
    assert "sub-integration" not in r.stdout and time.monotonic() - t < 20


def test_inspect_refuses_what_it_does_not_recognise(tmp_path):
    """A FITS archive (a product) and a text file: exit 2 saying what they are not
    (inspect exited 0 and advised `voltstream fold obs.fits`)."""
    r = run_cli("simulate", "--format", "ynao", "--signal", "noise", "--duration", "0.01",
                "--output", str(tmp_path / "s.dada"))  # fmt: skip
    r = run_cli("fold", str(tmp_path / "s.dada"), "--dm", "1", "--period", "0.001",
                "--tsub", "1", "-o", str(tmp_path / "obs.fits"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("inspect", str(tmp_path / "obs.fits"))
    assert r.returncode == 2 and "a FITS file, a product" in r.stderr, r.stdout + r.stderr
    assert "voltstream fold" not in r.stdout
    (tmp_path / "notes.txt").write_text("observing notes\n" * 200)
    r = run_cli("inspect", str(tmp_path / "notes.txt"))
    assert r.returncode == 2 and "not a VDIF or DADA file" in r.stderr, r.stdout + r.stderr


def test_truncated_dada_warns_in_one_line_and_plurals_fit(tmp_path):
    """A DADA file cut mid-sample: one "warning: ..." line, not Python's UserWarning
    with its source file and line of code; and "1 sub-integration" (it said "1
    sub-integrations")."""
    r = run_cli("simulate", "--format", "ynao", "--signal", "noise", "--duration", "0.01",
                "--output", str(tmp_path / "s.dada"))  # fmt: skip
    data = (tmp_path / "s.dada").read_bytes()
    (tmp_path / "t.dada").write_bytes(data[:-1001])
    r = run_cli("fold", str(tmp_path / "t.dada"), "--dm", "1", "--period", "0.001",
                "--tsub", "1", "-o", str(tmp_path / "x.fits"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    warn = [line for line in r.stderr.splitlines() if "trailing bytes" in line]
    assert len(warn) == 1 and warn[0].startswith("warning: "), r.stderr
    assert "UserWarning" not in r.stderr and "open_dada(" not in r.stderr
    assert "1 sub-integration x 32 channels x 256 bins" in r.stdout


def test_fengine_says_its_rate_is_a_pace_not_a_measure(tmp_path):
    """The default output rate is a pacing cap derived from the sample rate: said so
    (it announced "at 30.40 Gb/s" as if it ran at that rate)."""
    r = run_cli("fengine", "--listen", free_bind(), "--device", "cpu", "--channels", "64",
                "--output-file", str(tmp_path / "f.spead"), "--duration", "0.5",
                "--no-status")  # fmt: skip
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "output paced at up to" in first and "MHz digitiser + 10 %" in first, first
    assert " at " not in first.replace("paced at up to", "")


def test_progress_off_a_terminal_is_a_plain_line_every_few_seconds(monkeypatch, caplog):
    """stderr not a terminal (a log): no bar, but a plain line every PLAIN_EVERY_S
    (there was nothing at all); --no-progress/--no-status (enabled=False): none."""
    from voltstream.service import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.05)
    caplog.set_level("INFO", logger="voltstream.progress")
    with progress.progress_bar("fold", 1000, "samples", True, plain=True) as update:
        for done in range(0, 1000, 100):
            update(done)
            time.sleep(0.02)
    lines = [r.getMessage() for r in caplog.records if r.name == "voltstream.progress"]
    assert 2 <= len(lines) <= 5, lines  # every ~0.05 s of 0.2 s, not every update
    assert lines[0].startswith("fold: ") and " of 1000 (" in lines[0]
    caplog.clear()
    with progress.progress_bar("fold", 1000, "samples", False) as update:
        for done in range(0, 1000, 100):
            update(done)
            time.sleep(0.02)
    assert not caplog.records
