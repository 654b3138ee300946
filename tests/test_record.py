"""Recording a real loopback capture to several directories: every chunk lands
whole in its numbered file, and the report accounts for every chunk."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from voltstream import _core
from voltstream.capture_config import CaptureSettings
from voltstream.errors import CaptureError, ConfigError
from voltstream.streams import parse_stream

LEN = 1024
PER_CHUNK = 16
STREAMS = 2


def packet(i: int, s: int) -> bytes:
    payload = ((np.arange(LEN) * 7 + i * 131 + s) % 256).astype(np.uint8).tobytes()
    return i.to_bytes(8, "big") + s.to_bytes(2, "big") + payload


def open_capture() -> _core.Capture:
    stream = parse_stream({"format": "counter", "streams": STREAMS, "payload_len": LEN})
    settings = CaptureSettings.of(
        "127.0.0.1:0", engine="socket", packets_per_chunk=PER_CHUNK, nchunks=64
    )
    return settings.open(stream)


def test_a_recorded_capture_is_every_chunk_in_numbered_files(tmp_path):
    disks = [tmp_path / "d0", tmp_path / "d1"]
    for d in disks:
        d.mkdir()
    cap = open_capture()
    cap.start()
    rec = _core.Recorder(cap, [str(d) for d in disks], "scan_a", queue_chunks=64)
    host, port = cap.address.rsplit(":", 1)
    nchunks = 12
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for i in range(nchunks * PER_CHUNK):
            for s in range(STREAMS):
                tx.sendto(packet(i, s), (host, int(port)))
    deadline = time.monotonic() + 10
    while cap.stats()["totals"]["received"] < nchunks * PER_CHUNK * STREAMS:
        assert time.monotonic() < deadline, cap.stats()["totals"]
        time.sleep(0.01)
    cap.stop()
    report = rec.finish()
    assert report["chunks_written"] == nchunks and report["chunks_unwritten"] == 0
    assert report["chunks_lost"] == 0
    assert report["bytes_written"] == nchunks * PER_CHUNK * STREAMS * LEN
    files = sorted((int(p.name.split(".")[-1]), p) for d in disks for p in (d / "scan_a").iterdir())
    assert [n for n, _ in files] == list(range(nchunks))
    for n, path in files:
        data = np.frombuffer(path.read_bytes(), np.uint8).reshape(STREAMS, PER_CHUNK, LEN)
        for s in range(STREAMS):
            for k in range(PER_CHUNK):
                assert data[s, k].tobytes() == packet(n * PER_CHUNK + k, s)[10:]
    assert all(w["chunks"] > 0 and w["failed"] is None for w in report["writers"])
    assert rec.finish() == report  # idempotent


def test_the_recorder_refuses_what_it_cannot_do(tmp_path):
    cap = open_capture()
    with pytest.raises(CaptureError, match="not started"):
        _core.Recorder(cap, [str(tmp_path)], "s")
    cap.start()
    try:
        with pytest.raises(ConfigError, match="scan name"):
            _core.Recorder(cap, [str(tmp_path)], "a/b")
        (tmp_path / "taken").mkdir()
        with pytest.raises(OSError, match="cannot create the scan folder"):
            _core.Recorder(cap, [str(tmp_path)], "taken")
        with pytest.raises(ConfigError, match="at least one directory"):
            _core.Recorder(cap, [], "s")
    finally:
        cap.stop()
    assert not (Path(tmp_path) / "s").exists()


def test_the_record_verb_records_a_simulated_stream_end_to_end(tmp_path):
    """`voltstream simulate` -> loopback -> `voltstream record` into two directories:
    the files hold every packet's payload in order; the report counts every chunk."""
    import json
    import subprocess
    import sys

    from cli_process import run_cli
    from loopback import free_bind

    bind = free_bind()
    disks = [tmp_path / "d0", tmp_path / "d1"]
    for d in disks:
        d.mkdir()
    report_path = tmp_path / "r.json"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "record", "--format", "ynao", "--listen",
         bind, "--engine", "socket", "--packets-per-chunk", "64", "--duration", "20",
         "--idle-timeout", "1", "--dirs", ",".join(map(str, disks)), "--scan", "sim1",
         "--report", str(report_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(1.5)  # the recorder binds before the simulator sends
        sim = run_cli("simulate", "--format", "ynao", "--signal", "noise", "--duration", "0.2",
                      "--dest", bind, "--rate", "0.5")  # fmt: skip
        assert sim.returncode == 0, sim.stderr
        out, err = recorder.communicate(timeout=30)
    finally:
        recorder.kill()
    assert recorder.returncode == 0, err
    report = json.loads(report_path.read_text())
    r, totals = report["record"], report["capture"]["totals"]
    assert "record: scan sim1" in out and totals["missing"] == 0
    chunks = r["chunks_written"]
    assert chunks > 0 and r["chunks_unwritten"] == 0 and r["chunks_lost"] == 0
    files = sorted((p for d in disks for p in (d / "sim1").iterdir()), key=lambda p: p.name)
    assert len(files) == chunks
    assert sum(p.stat().st_size for p in files) == r["bytes_written"]
    # Whole chunks of 64 x 8192-byte payloads; the last chunk's slots after the
    # stream ended are written as zeros and counted, never as stale pool bytes.
    assert r["bytes_written"] == chunks * 64 * 8192
    assert r["bytes_written"] == totals["bytes"] + r["zero_filled_packets"] * 8192
    last = files[-1].read_bytes()
    assert last.endswith(bytes(8192 * r["zero_filled_packets"]))
