"""The latency mode without a GPU: the Rust hot loop (`_core.LatencySession`) over real
loopback UDP, with the host stand-in playing the kernel (the same slots, trailers,
acks and ordering as the CUDA kernels), and `voltstream latency --standin` as a user
runs it. The GPU itself is tests/gpu/test_latency_session.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from voltstream import _core
from voltstream.errors import ConfigError, VoltstreamError
from voltstream.latency.run import LatencyRun, LatencySettings
from voltstream.latency.stats import STATUS_OK, records_array, stage_stats

MODES = ["copy", "persistent", "persistent-flag", "zerocopy"]


def run_standin(mode, frames, ppf=4, payload=1024, skip=None, rate=1000.0, **kw):
    settings = LatencySettings(
        mode=mode, packets_per_frame=ppf, standin=True, check_pattern=True,
        records=frames + 16, timeout_us=5000, **kw,
    )  # fmt: skip
    with LatencyRun("127.0.0.1:0", settings, format_kwargs={"payload_len": payload}) as run:
        run.start(frames=frames, idle_s=2.0)
        sender = _core.FrameSender(run.local_addr, ppf, payload)
        sent = sender.send_frames(0, frames, rate, skip=skip)
        report = run.wait(30.0)
        recs = records_array(run.records())
    return report, recs, sent


@pytest.mark.parametrize("mode", MODES)
def test_standin_session_hands_every_frame_over_exactly(mode):
    frames = 400
    report, recs, sent = run_standin(mode, frames)
    assert sent["frames"] == frames and sent["packets"] == 4 * frames
    # Every frame is either processed whole or dropped whole because the (slow,
    # 2-core) stand-in still held its slot; nothing else, and nothing lost.
    assert report["frames_complete"] + report["frames_gpu_busy"] == frames, report
    assert report["frames_incomplete"] == report["frames_lost"] == 0
    assert report["received"] + report["dropped"] == 4 * frames
    assert report["frames_acked"] == report["frames_complete"]
    assert report["sum_mismatch"] == 0 and report["torn"] == 0
    assert report["bad_writes"] == 0
    assert report["end"] == "frames"
    ok = recs[recs["status"] == STATUS_OK]
    assert len(ok) == report["frames_complete"] and np.all(ok["ok"] == 1)
    assert np.all(np.diff(ok["seq"].astype(np.int64)) > 0)
    # Stamps in order: sent, received, handed over, acknowledged.
    assert np.all(ok["t_send"] <= ok["t_done"]) and np.all(ok["t_done"] <= ok["t_handed"])
    assert np.all(ok["t_handed"] <= ok["t_ack"])
    stages = stage_stats(recs, warmup=10)
    assert stages["received_to_ack"]["frames"] == len(ok) - 10


@pytest.mark.parametrize("mode", ["copy", "zerocopy"])
def test_incomplete_frames_are_counted_and_skipped(mode):
    frames = 200
    report, recs, _ = run_standin(mode, frames, skip=(5, 1))
    busy = report["frames_gpu_busy"]
    assert report["frames_incomplete"] + report["frames_complete"] + busy == frames
    # Packet 1 of every 5th frame never came: 40 frames short of one packet each
    # (a frame dropped for a busy slot still counts its hole as missing).
    assert report["missing"] == frames // 5
    assert report["bad_writes"] == 0 and report["sum_mismatch"] == 0
    skipped = recs[recs["status"] == 2]
    assert len(skipped) == report["frames_incomplete"]
    assert np.all(skipped["frame"] % 5 == 0)
    assert not np.any(recs[recs["status"] == STATUS_OK]["frame"] % 5 == 0)


def test_foreign_and_malformed_packets_are_counted_not_placed():
    settings = LatencySettings(mode="copy", packets_per_frame=2, standin=True, records=64)
    with LatencyRun("127.0.0.1:0", settings, format_kwargs={"payload_len": 1024}) as run:
        run.start(idle_s=0.5, seconds=10.0)
        host, port = run.local_addr.rsplit(":", 1)
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"\x00" * 1056, (host, int(port)))  # wrong magic: malformed
            s.sendto(b"\x01" * 10, (host, int(port)))  # too short: malformed/truncated
        sender = _core.FrameSender(run.local_addr, 2, 1024)
        sender.send_frames(0, 5, 1000.0)
        report = run.wait(10.0)
    assert report["frames_complete"] == 5
    assert report["malformed"] + report["truncated"] + report["foreign"] == 2


def test_bad_settings_are_clear_errors():
    with pytest.raises(ConfigError, match="latency mode"):
        LatencySettings(mode="fastest")
    with pytest.raises(VoltstreamError, match="power of two|slots"):
        LatencyRun("127.0.0.1:0", LatencySettings(standin=True, slots=3))
    with pytest.raises(VoltstreamError, match="packets"):
        LatencyRun("127.0.0.1:0", LatencySettings(standin=True, packets_per_frame=0))


def test_cli_latency_standin_reports_and_writes_json(tmp_path):
    report_path = tmp_path / "lat.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "latency", "--listen", "127.0.0.1:0",
         "--standin", "--mode", "copy", "--packets-per-frame", "2", "--frames", "100",
         "--warmup", "10", "--report", str(report_path), "--print-address"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    addr = line.split()[-1]
    time.sleep(0.2)
    _core.FrameSender(addr, 2, 1024).send_frames(0, 100, 1000.0)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "100 whole" in out and "received_to_ack" in out
    doc = json.loads(report_path.read_text())
    assert doc["counters"]["frames_complete"] == 100
    assert doc["stages"]["received_to_ack"]["frames"] == 90


def test_cli_latency_without_a_gpu_says_what_to_do(tmp_path):
    # A machine without CuPy (as CI): a `cupy` that cannot be imported comes first
    # on the path, so this holds on a GPU machine too.
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('no CuPy here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "latency", "--listen", "127.0.0.1:0",
         "--frames", "1"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "CuPy" in proc.stderr and "--standin" in proc.stderr
    # Before: "use --device cpu otherwise", an option latency does not have.
    assert "--device" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sender_thread_and_records_survive_an_early_stop():
    settings = LatencySettings(mode="zerocopy", packets_per_frame=1, standin=True, records=10)
    with LatencyRun("127.0.0.1:0", settings, format_kwargs={"payload_len": 1024}) as run:
        run.start(seconds=30.0)
        t = threading.Thread(
            target=lambda: _core.FrameSender(run.local_addr, 1, 1024).send_frames(0, 50, 500.0)
        )
        t.start()
        t.join()
        time.sleep(0.1)
        run.stop()
        report = run.wait(10.0)
        recs = records_array(run.records())
    assert report["end"] == "stopped"
    # 50 frames, 10 records kept, the rest counted.
    assert len(recs[recs["status"] == STATUS_OK]) + report["records_dropped"] >= 10
    assert report["frames_complete"] + report["frames_gpu_busy"] == 50


def test_cli_latency_serves_its_counters_live(tmp_path):
    # `--metrics`: every counter while the loop runs (0.1 s old at most), as for the
    # other long-running verbs (docs/operations.md).
    from voltstream.ops.status_view import scrape_metrics

    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "latency", "--listen", "127.0.0.1:0",
         "--standin", "--mode", "copy", "--packets-per-frame", "2", "--duration", "30",
         "--idle-timeout", "3", "--print-address", "--metrics", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        addr = proc.stdout.readline().split()[-1]
        metrics = ""
        while not metrics:
            line = proc.stderr.readline()
            assert line, proc.communicate()
            if "metrics on http://" in line:
                metrics = line.split("http://")[1].split("/")[0]
        _core.FrameSender(addr, 2, 1024).send_frames(0, 50, 1000.0)
        key = ("voltstream_latency_frames_complete_total", ())
        got: dict = {}
        for _ in range(100):
            got = scrape_metrics(metrics)
            if got.get(key) == 50:
                break
            time.sleep(0.05)
        assert got.get(key) == 50, got
        assert got[("voltstream_latency_frames_acked_total", ())] == 50
        assert got[("voltstream_latency_missing_total", ())] == 0
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_cli_latency_loop_errors_are_clear_and_exit_2():
    # A CPU the process may not use: the loop's thread cannot pin itself.
    proc = subprocess.run(
        [sys.executable, "-m", "voltstream.cli", "latency", "--listen", "127.0.0.1:0",
         "--standin", "--cpus", "4095", "--frames", "1", "--idle-timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "CPU 4095" in proc.stderr and "Traceback" not in proc.stderr
