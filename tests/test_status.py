"""`voltstream status HOST:PORT` against a live loopback capture: in a real terminal
(tmux), once (--once, for scripts), a rising loss counter flagged, and a clear error
where nothing listens."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from rich.console import Console

from cli_process import run_cli
from live_capture import PPC, LiveCapture, packets
from voltstream.ops.status_view import Frame, render


def _row(text: str, label: str) -> list[str]:
    """The cells (value, rate, value, rate...) of the table row whose labels start with
    ``label``; rich separates columns, and a value from its rate, by 2 spaces or more."""
    for line in text.splitlines():
        if line.strip().startswith(label):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no row {label!r} in:\n{text}")


@pytest.fixture
def capture(tmp_path):
    run = LiveCapture(tmp_path, idle_timeout=30)
    yield run
    run.kill()


def test_status_in_a_terminal_shows_the_live_counters_and_rates(capture):
    # tmux comes with `make` (scripts/bootstrap.sh): its absence is a failure here.
    assert shutil.which("tmux"), "tmux is not installed (scripts/bootstrap.sh installs it)"
    sent = packets(0, 30 * PPC, skip={(11, 1)})
    capture.send(sent)
    capture.scrape_when_received(len(sent))
    session = f"vs-status-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m voltstream.cli status {capture.address}"
    env = ["-e", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50", *env,
                    command], check=True)  # fmt: skip
    try:
        pane = ""
        for _ in range(200):  # until the view has polled twice (it has rates then)
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                  capture_output=True, text=True).stdout  # fmt: skip
            if re.search(r"stream=1 .*\d/s", pane):
                break
            time.sleep(0.05)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    n = 30 * PPC
    assert "voltstream capture at " + capture.address in pane and "running" in pane
    assert re.search(r"in\s+[\d.]+ Gb/s\s+[\d,]+ packets/s", pane), pane
    # stream 0 got every packet, stream 1 all but one (missing: 1); rates beside them.
    assert _row(pane, "stream=0")[1:4] == [f"{n:,}", "0/s", "0"], pane
    assert _row(pane, "stream=1")[1:4] == [f"{n - 1:,}", "0/s", "1"], pane
    assert _row(pane, "thread=0")[1] == f"{2 * n - 1:,}"
    assert re.search(r"pool\s+\d+ of \d+ chunks free", pane)


def test_status_once_prints_one_frame_and_exits(capture):
    sent = packets(0, 8 * PPC)
    capture.send(sent)
    capture.scrape_when_received(len(sent))
    r = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "status", capture.address, "--once",
         "--interval", "0.2"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, COLUMNS="200"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _row(r.stdout, "stream=0")[1] == f"{8 * PPC:,}"
    assert _row(r.stdout, "all")[1] == f"{2 * 8 * PPC:,}"  # capture-wide received
    assert "\x1b[" not in r.stdout  # not a terminal: plain text for scripts


def test_a_loss_counter_that_rises_is_a_red_warning(capture):
    capture.send(packets(0, 4 * PPC))
    capture.scrape_when_received(2 * 4 * PPC)
    before = Frame(capture.status())
    gap = packets(4 * PPC, 12 * PPC, skip={(4 * PPC + 2, 0), (4 * PPC + 3, 0)})
    capture.send(gap)
    capture.scrape_when_received(2 * 4 * PPC + len(gap))
    frame = Frame(capture.status(), before)
    assert frame.rising_losses == ["missing +2 (stream_packets stream=0)",
                                   "missing +2 (capture_packets)",
                                   "missing +2 (thread_packets thread=0)"]  # fmt: skip
    console = Console(record=True, width=200, force_terminal=True, color_system="standard")
    console.print(render(frame, capture.address))
    assert "warnings: missing +2" in console.export_text(clear=False)
    ansi = console.export_text(styles=True)  # bold red: ESC[1;31m
    assert re.search(r"\x1b\[1;31m\s*2\s+[\d.]+/s", ansi), "the missing count is not red"
    assert not re.search(r"\x1b\[1;31m\s*0\s", ansi), "a loss that did not rise is red"


def test_status_where_nothing_listens_is_a_clear_error():
    r = run_cli("status", "127.0.0.1:9", "--once")
    assert r.returncode == 2
    assert "nothing serves voltstream status at 127.0.0.1:9" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_narrow_terminal_wraps_labels_instead_of_cutting_them():
    """Before: `status` cut a long label to `label=VD…` in an 80-column terminal."""
    from voltstream.ops.counters import Sample
    from voltstream.ops.status_view import counter_tables

    frame = Frame({"report": {}})
    label = "VDIF station Ef thread 3 polarisation 0"
    frame.samples = [
        Sample("voltstream_stream_packets_total", "counter", "", 64000 + k,
               {"kind": kind, "stream": "0", "label": label})
        for k, kind in enumerate(("received", "missing", "late", "duplicate", "malformed",
                                  "foreign", "dropped", "invalid"))
    ]  # fmt: skip
    for width in (80, 110):
        console = Console(width=width, record=True)
        for table in counter_tables(frame):
            console.print(table)
        text = console.export_text()
        assert f"stream=0: {label}" in text and " stream=0 " in text
        if width > 100:  # room for every kind's column too
            assert "…" not in text and "64,007" in text
