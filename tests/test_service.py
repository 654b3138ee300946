"""voltstream as a service (docs/operations.md, "Running as a service"): SIGTERM and
SIGINT end a run cleanly with its products and report, a second signal ends it at
once, --max-loss turns loss into exit status 1, logs can be JSON lines, and the
progress bar shows only at a terminal. Real processes, real signals, real sockets."""

from __future__ import annotations

import json
import os
import pty
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from cli_process import run_cli
from loopback import free_bind, send
from voltstream.formats import make_format
from voltstream.service.exit_status import Loss, capture_loss, exit_status, record_loss
from voltstream.service.shutdown import STOP_BOUND_S
from voltstream.testing import Drop, FaultPlan

CLI = [sys.executable, "-m", "voltstream.cli"]
#: How long a test waits for a line it needs before it calls the run hung (a guard
#: against hanging the suite, not a timing the test measures).
HUNG_S = 120


class Lines:
    """A process's stderr, line by line, read on a thread so a wait can give up."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(proc.stderr,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, text: str) -> str:
        while True:
            line = self._q.get(timeout=HUNG_S)
            assert line is not None, f"stderr ended before {text!r}:\n" + "".join(self.seen)
            self.seen.append(line)
            if text in line:
                return line

    def rest(self) -> str:
        while (line := self._q.get(timeout=HUNG_S)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def _finish(proc: subprocess.Popen) -> str:
    """Waits for the exit; its stdout (small: a summary). stderr stays with Lines."""
    proc.wait(timeout=HUNG_S)
    return proc.stdout.read()


def _start(*args: str) -> tuple[subprocess.Popen, Lines]:
    proc = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, Lines(proc)


def _live_fold(bind: str, tmp_path: Path) -> tuple[subprocess.Popen, Lines]:
    return _start(
        "fold", "--listen", bind, "--format", "ynao", "--engine", "socket",
        "--packets-per-chunk", "64", "--duration", "600", "--dm", "1", "--period", "0.005",
        "--nbin", "32", "--tsub", "0.002", "--device", "cpu",
        "--output", str(tmp_path / "live.fits"), "--report", str(tmp_path / "live.json"),
    )  # fmt: skip


def signal_live_fold(
    fold: subprocess.Popen, err: Lines, bind: str, sig: int, rate_gbps: float
) -> tuple[str, str, float]:
    """Feeds a started `fold --listen` a stream far longer than the test, sends it
    `sig` once data flows, and waits for it: (stdout, stderr, seconds the stop took)."""
    sim = None
    try:
        err.wait_for("fold: listening on")
        sim = subprocess.Popen(
            [*CLI, "simulate", "--format", "ynao", "--signal", "noise", "--duration", "30",
             "--dest", bind, "--rate", str(rate_gbps)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        err.wait_for("capture: data is arriving")
        fold.send_signal(sig)
        t0 = time.monotonic()
        out = _finish(fold)
        return out, err.rest(), time.monotonic() - t0
    finally:
        fold.kill()
        if sim is not None:
            sim.kill()
            sim.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_live_fold_leaves_a_valid_archive_and_report(tmp_path, sig):
    bind = free_bind()
    fold, err = _live_fold(bind, tmp_path)
    out, stderr, stop_s = signal_live_fold(fold, err, bind, sig, rate_gbps=0.2)
    assert fold.returncode == 0, out + stderr
    assert stop_s < STOP_BOUND_S, f"the stop took {stop_s:.1f} s"
    assert f"{signal.Signals(sig).name}: stopping" in stderr
    assert "Traceback" not in stderr
    with fits.open(tmp_path / "live.fits") as hdus:
        subint = hdus["SUBINT"]
        assert subint.header["NAXIS2"] >= 1  # sub-integrations
        assert subint.data["DATA"].shape[0] == subint.header["NAXIS2"]
        assert hdus["SUBINT"].header["NBIN"] == 32
    report = json.loads((tmp_path / "live.json").read_text())
    assert report["interrupted"] is True
    assert report["totals"]["received"] > 0
    assert report["samples_written"] > 0
    assert "stopped by a signal" in out


def _stuck_after_first_signal() -> subprocess.Popen:
    """A process whose clean stop never finishes (a disk that hangs, say): it takes
    the signals as cli.main does, then ignores the stop request."""
    code = (
        "import sys, threading\n"
        "from voltstream.service import logs\n"
        "from voltstream.service.shutdown import Shutdown\n"
        "logs.setup()\n"
        "s = Shutdown(); s.install(); stop = s.watch()\n"
        "print('ready', file=sys.stderr, flush=True)\n"
        "stop.wait()\n"
        "threading.Event().wait()\n"  # never ends by itself
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(("second", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_signal_ends_the_process_at_once(second, status):
    proc = _stuck_after_first_signal()
    err = Lines(proc)
    try:
        err.wait_for("ready")
        proc.send_signal(signal.SIGTERM)
        err.wait_for("SIGTERM: stopping")
        assert proc.poll() is None  # the first signal only asked
        proc.send_signal(second)
        proc.wait(timeout=HUNG_S)
    finally:
        proc.kill()
    assert proc.returncode == status
    assert f"second signal ({second.name}): exiting now" in err.rest()


def test_a_verb_that_cannot_stop_cleanly_exits_128_plus_the_signal(tmp_path):
    """inspect --listen polls no stop event: SIGTERM interrupts it, exit 143."""
    proc, err = _start("--log-level", "debug", "inspect", "--listen", free_bind(),
                       "--duration", "600")  # fmt: skip
    try:
        # inspect says nothing before it listens; wait until its socket is bound.
        _wait_bound(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HUNG_S)
    finally:
        proc.kill()
    assert proc.returncode == 143, err.rest()
    assert "interrupted" in err.rest()


def _wait_bound(pid: int) -> None:
    """Until the process holds a UDP socket (its inode in /proc/net/udp)."""
    deadline = time.monotonic() + HUNG_S
    while time.monotonic() < deadline:
        fds = Path(f"/proc/{pid}/fd")
        inodes = set()
        for fd in fds.iterdir():
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        udp = Path("/proc/net/udp").read_text().split("\n")[1:]
        if any(len(f := row.split()) > 9 and f[9] in inodes for row in udp):
            return
        time.sleep(0.01)
    raise AssertionError("the process never bound its socket")


def _ynao_packets(n: int) -> np.ndarray:
    fmt = make_format("ynao")
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    rng = np.random.default_rng(3)
    x = rng.integers(-20, 20, (n * fmt.samples_per_packet, fmt.nchan, fmt.npol, 2), np.int8)
    return fmt.packetize(x, 0, obs)


def _capture(max_loss: str | None, tmp_path: Path, drop_rate: float) -> tuple[int, dict, str]:
    """A capture of 2048 YNAO packets with ``drop_rate`` of them dropped on the way,
    stopped by SIGTERM once all are sent; its exit status, report and stderr (JSON
    log lines)."""
    bind = free_bind()
    report = tmp_path / f"capture-{max_loss}.json"
    service = ["--log-format", "json"] + (["--max-loss", max_loss] if max_loss else [])
    proc, err = _start(*service, "capture", "--format", "ynao", "--engine", "socket",
                       "--listen", bind, "--packets-per-chunk", "32", "--window", "4",
                       "--duration", "600",
                       "--report", str(report))  # fmt: skip
    try:
        err.wait_for("capture: listening on")
        plan = FaultPlan(7, rates={Drop(): drop_rate}, between=range(8, 2040))
        send(bind, plan.apply(list(_ynao_packets(2048))).packets, pace_every=64)
        err.wait_for("capture: data is arriving")
        proc.send_signal(signal.SIGTERM)  # the clean stop: the loss judged on what came
        proc.wait(timeout=HUNG_S)
    finally:
        proc.kill()
    return proc.returncode, json.loads(report.read_text()), err.rest()


def test_max_loss_makes_a_lossy_run_exit_1_and_json_log_lines(tmp_path):
    status, report, stderr = _capture("0.02", tmp_path, drop_rate=0.1)
    assert report["totals"]["missing"] > 0.05 * 2048
    assert status == 1, stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(d["level"] == "info" and "listening on" in d["message"] for d in lines)
    loss = [d for d in lines if "above --max-loss" in d["message"]]
    assert loss and loss[0]["level"] == "error" and loss[0]["logger"].startswith("voltstream")


def test_loss_within_max_loss_and_loss_without_it_exit_0(tmp_path):
    status, report, stderr = _capture("0.5", tmp_path, drop_rate=0.1)
    assert report["totals"]["missing"] > 0 and status == 0, stderr
    status, report, stderr = _capture(None, tmp_path, drop_rate=0.1)
    assert report["totals"]["missing"] > 0 and status == 0, stderr


def test_bad_input_is_exit_2_as_one_json_line(tmp_path):
    r = run_cli("--log-format", "json", "fold", str(tmp_path / "none.dada"), "--dm", "1",
                "--period", "0.01", "-o", str(tmp_path / "x.fits"))  # fmt: skip
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    doc = json.loads(line)
    assert doc["level"] == "error" and "voltstream fold: error:" in doc["message"]


def test_max_loss_must_be_a_fraction():
    r = run_cli("--max-loss", "5", "capture", "--listen", free_bind(), "--duration", "1")
    assert r.returncode == 2
    assert "fraction from 0 to 1" in r.stderr


def test_loss_counts_missing_late_dropped_and_kernel_drops():
    stats = {
        "streams": [{"received": 90, "missing": 10, "late": 1, "dropped": 2}],
        "kernel_drops": 3,
    }
    loss = capture_loss(stats)
    assert (loss.lost, loss.expected) == (16, 100)
    assert exit_status(loss, None, "capture") == 0
    assert exit_status(loss, 0.16, "capture") == 0
    assert exit_status(loss, 0.15, "capture") == 1
    assert exit_status(2, 0.0, "capture") == 2  # a status stays what it is
    assert Loss(0, 0).fraction == 0.0
    # A recording: the disks' unwritten chunks count when they are the larger part.
    rec = {"capture": {"streams": [{"received": 100}]},
           "record": {"chunks_written": 6, "chunks_unwritten": 2, "chunks_lost": 0}}  # fmt: skip
    assert record_loss(rec).fraction == 0.25


def _simulate_to_file(tmp_path: Path, stderr: int, *extra: str) -> None:
    subprocess.run(
        [*CLI, *extra, "simulate", "--format", "ynao", "--signal", "noise", "--duration",
         "0.05", "--output", str(tmp_path / "sim.dada")],
        stdout=subprocess.DEVNULL, stderr=stderr, timeout=HUNG_S, check=True,
        env=dict(os.environ, TERM="xterm", COLUMNS="100"),
    )  # fmt: skip


def _on_a_terminal(tmp_path: Path, *extra: str) -> str:
    """What simulate --output writes on stderr when stderr is a pseudo-terminal."""
    master, slave = pty.openpty()
    try:
        _simulate_to_file(tmp_path, slave, *extra)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_shows_on_a_terminal(tmp_path):
    text = _on_a_terminal(tmp_path)
    assert "100%" in text and "samples/s" in text and "\u2501" in text  # the bar: ━


def test_no_progress_bar_with_no_progress_or_off_a_terminal(tmp_path):
    assert "100%" not in _on_a_terminal(tmp_path, "--no-progress")
    r = subprocess.run(
        [*CLI, "simulate", "--format", "ynao", "--signal", "noise", "--duration", "0.05",
         "--output", str(tmp_path / "sim2.dada")],
        capture_output=True, text=True, timeout=HUNG_S,
    )  # fmt: skip
    assert r.returncode == 0
    assert r.stderr.splitlines() == [f"simulate: noise ynao -> {tmp_path / 'sim2.dada'}"]


def _verb(name: str, bind: str, tmp_path: Path) -> tuple[list[str], str]:
    """(command line, the stderr line that says it runs) of a long run of each verb."""
    report = str(tmp_path / "report.json")
    if name == "capture":
        return ["capture", "--format", "ynao", "--engine", "socket", "--listen", bind,
                "--duration", "600", "--output", str(tmp_path / "c.dada"),
                "--report", report], "capture: listening on"  # fmt: skip
    if name == "record":
        return ["record", "--format", "ynao", "--engine", "socket", "--listen", bind,
                "--dirs", str(tmp_path), "--scan", "s1", "--report", report],\
            "record: listening on"  # fmt: skip
    if name == "fengine":
        return ["fengine", "--listen", bind, "--device", "cpu", "--engine", "socket",
                "--output", str(tmp_path / "f.spead"), "--duration", "600",
                "--report", report], ""  # fmt: skip
    if name == "simulate":
        return ["simulate", "--format", "ynao", "--signal", "noise", "--duration", "600",
                "--dest", bind, "--rate", "0.05"], "simulate: noise ynao ->"  # fmt: skip
    raw = tmp_path / "packets.bin"
    raw.write_bytes(_ynao_packets(256).tobytes())
    return ["replay", str(raw), "--packet-len", "8216", "--dest", bind, "--rate", "0.0005",
            "--loop", "1000", "--report", report], "replay: raw"  # fmt: skip


@pytest.mark.parametrize("verb", ["capture", "record", "fengine", "simulate", "replay"])
def test_sigterm_ends_every_long_running_verb_cleanly(tmp_path, verb):
    bind = free_bind()
    args, ready = _verb(verb, bind, tmp_path)
    proc, err = _start(*args)
    out, stderr = sigterm_when_ready(proc, err, ready)  # fengine: ready on its stdout
    assert proc.returncode == 0, out + stderr
    assert "SIGTERM: stopping" in stderr and "Traceback" not in stderr
    if verb != "simulate":
        report = json.loads((tmp_path / "report.json").read_text())
        assert report["interrupted"] is True
    else:
        assert "stopped by a signal" in out
    if verb == "record":
        manifest = json.loads((tmp_path / "s1.manifest.json").read_text())
        assert manifest["complete"] is True


def sigterm_when_ready(proc: subprocess.Popen, err: Lines, ready: str = "") -> tuple[str, str]:
    """SIGTERM to ``proc`` once it is ready (``ready`` on its stderr; with none, the
    F-engine's "listening on" on its stdout), then its exit (killed if it hangs or
    a wait fails); its (stdout, stderr)."""
    try:
        if ready:
            err.wait_for(ready)
        else:
            _stdout_line(proc, "listening on")
        proc.send_signal(signal.SIGTERM)
        out = _finish(proc)
    finally:
        proc.kill()
    return out, err.rest()


def _stdout_line(proc: subprocess.Popen, text: str) -> str:
    for line in proc.stdout:
        if text in line:
            return line
    raise AssertionError(f"stdout ended before {text!r}")


def test_log_level_hides_the_less_severe_lines(tmp_path):
    def stderr(*service: str) -> str:
        r = subprocess.run(
            [*CLI, *service, "simulate", "--format", "ynao", "--signal", "noise",
             "--duration", "0.01", "--output", str(tmp_path / "s.dada")],
            capture_output=True, text=True, timeout=HUNG_S,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stderr

    assert "simulate: noise ynao ->" in stderr("--log-level", "info")
    assert stderr("--log-level", "warning") == ""
