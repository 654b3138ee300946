"""Triggered voltage dumps (issue 28 item 3), end to end on loopback: a real `voltstream
capture --ring-seconds ... --trigger-listen ...` process fed by `voltstream simulate
--dest`, triggered over HTTP (urllib) while the stream arrives; each dump compared with
the file the simulator writes of the same seed (`--output`), sample for sample, and its
header's times with the stream's clock. The stream is YNAO at 125 kHz channels (16 MB/s),
sent at its own rate, so a trigger lands mid-stream."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from cli_process import run_cli
from dump_checks import dedispersed_peak_s, read_dump
from loopback import free_bind
from voltstream.io.dada import open_dada
from voltstream.ops.status_view import scrape_metrics

YNAO = ("--format", "ynao", "--chan-bw", "0.125")
TSAMP = 8e-6  # 1 / 125 kHz
#: The stream's own rate: 8216-byte frames of 64 samples, 1953.125 a second.
RATE = "0.1284"
#: Per format: its options, its own rate (Gb/s), samples per packet, channels, streams.
STREAMS = {
    "ynao": (YNAO, RATE, 64, 32, 1),
    # Two threads (pols) of 8032-byte frames of 250 samples, 500 a second each.
    "vdif": (("--format", "vdif", "--nchan", "16", "--chan-bw", "0.125"), "0.0643", 250, 16, 2),
}
SECONDS = "1.2"


class RingCapture:
    """`voltstream capture` with the voltage ring, started in a process of its own and
    returned once it listens; ``url`` is its trigger server."""

    def __init__(self, tmp: Path, ring_seconds: str, *extra: str, fmt: tuple = YNAO) -> None:
        self.bind, self.report = free_bind(), tmp / "report.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voltstream.cli", "capture", *fmt, "--listen", self.bind,
             "--duration", "60", "--idle-timeout", "30", "--packets-per-chunk", "32",
             "--window", "4", "--ring-seconds", ring_seconds, "--trigger-listen",
             "127.0.0.1:0", "--dump-dir", str(tmp), "--report", str(self.report), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.err, self.url = "", ""
        assert self.proc.stderr is not None
        while "capture: listening on" not in self.err:
            line = self.proc.stderr.readline()
            assert line, f"the capture ended before it listened: {self.proc.communicate()}"
            self.err += line
            if "triggers: listening on http://" in line:
                self.url = "http://" + line.split("http://")[1].split()[0]
            if "metrics on http://" in line:
                self.metrics = line.split("http://")[1].split("/")[0]

    def ring(self) -> dict | None:
        with urllib.request.urlopen(self.url + "/ring", timeout=5) as r:
            return json.load(r)["ring"]

    def wait_ring(self, end_s: float) -> dict:
        """What the ring holds once it holds the stream up to ``end_s`` seconds."""
        for _ in range(1000):
            ring = self.ring()
            if ring is not None and ring["end"] >= end_s:
                return ring
            time.sleep(0.01)
        raise AssertionError(f"the ring never reached {end_s} s: {ring}")

    def trigger(self, body: bytes | dict) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + "/trigger", data=data, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def finish(self, sender: threading.Thread) -> tuple[dict, str]:
        """Once the sender is done and its last packets are in: a stop (SIGINT) ends the
        run as its duration would, the report written (no idle timeout to wait out)."""
        sender.join(timeout=60)
        time.sleep(0.5)
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, self.err + err
        return json.loads(self.report.read_text()), out


def _simulate(bind: str, *what: str, fmt: tuple = YNAO, rate: str = RATE) -> threading.Thread:
    """The simulator sending the stream to ``bind`` from a thread of its own."""
    done: list = []

    def run() -> None:
        done.append(run_cli("simulate", *fmt, *what, "--duration", SECONDS, "--seed", "7",
                            "--dest", bind, "--rate", rate))  # fmt: skip
        assert done[0].returncode == 0, done[0].stderr

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _reference(tmp: Path, *what: str, fmt: tuple = YNAO) -> np.ndarray:
    """The simulator's samples of the same seed, from its own DADA file."""
    path = tmp / "reference.dada"
    r = run_cli("simulate", *fmt, *what, "--duration", SECONDS, "--seed", "7",
                "--output", str(path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    f = open_dada(path)
    return f.read_raw(0, f.nsamp)


@pytest.mark.parametrize("kind", ["ynao", "vdif"])
def test_a_window_triggered_mid_stream_is_the_stream_s_samples_with_exact_times(tmp_path, kind):
    """Three windows triggered while the stream arrives at its rate: each dump holds the
    very samples the simulator made for that window, its header places the window's
    first sample exactly (UTC_START + PICOSECONDS + OBS_OFFSET), and the capture loses
    nothing (every counter 0); --output beside the ring still writes the whole stream.
    YNAO stamps its frames with MJD, second and nanosecond; VDIF counts seconds since
    its epoch and frames: the clock comes from either."""
    fmt, rate, spp, nchan, streams = STREAMS[kind]
    ref = _reference(tmp_path, "--signal", "pulsar", fmt=fmt)
    cap = RingCapture(tmp_path, "2", "--output", str(tmp_path / "whole.dada"), fmt=fmt)
    sender = _simulate(cap.bind, "--signal", "pulsar", fmt=fmt, rate=rate)
    cap.wait_ring(0.6)
    windows = [(0.3, 0.55), (0.0, 0.1), (0.5, 0.6)]
    answers = [cap.trigger({"start": a, "end": b}) for a, b in windows]
    report, out = cap.finish(sender)
    assert [s for s, _ in answers] == [202] * 3, answers
    d = report["dumps"]
    zero = d["ring"]["first_sample"]  # the stream's first sample on the format's axis
    assert (d["triggers"], d["dumps"], d["written"], d["lost_samples"]) == (3, 3, 3, 0), d
    tot = report["totals"]
    assert report["lost"] == 0 and tot["received"] == streams * len(ref) // spp, tot
    for (a, b), (_, answer) in zip(windows, answers, strict=True):
        header, samples, obs = read_dump(answer["path"])
        first = round(a / TSAMP)
        assert answer["first_sample"] - zero == first
        assert answer["samples"] == round((b - a) / TSAMP)
        np.testing.assert_array_equal(samples, ref[first : first + len(samples)])
        assert int(header["OBS_OFFSET"]) == first * nchan * 2 * 2
        assert header["MJD_START"] == d["ring"]["first_sample_mjd"]
        # The simulator stamps its stream with the time it starts: a minute ago at most.
        now_mjd = 40587 + time.time() / 86400
        assert 0 < now_mjd - float(header["MJD_START"]) < 60 / 86400, header["MJD_START"]
        # The simulator starts on a whole second: the window's first sample is a whole
        # second and exactly `a` after it (one sample off would be 8 us off).
        frac = obs.start_sec - a
        assert abs(frac - round(frac)) < 1e-9, (obs.start_sec, a)
        assert header["DUMP_START_MJD"] == answer["start_mjd"]
        day = (obs.start_mjd + obs.start_sec / 86400) - float(answer["start_mjd"])
        assert abs(day) < 1e-10
        assert answer["path"] in out  # listed at the end, with its window
    whole = open_dada(tmp_path / "whole.dada")
    np.testing.assert_array_equal(whole.read_raw(0, whole.nsamp), ref)


def test_triggers_for_data_gone_not_yet_or_malformed_are_answered_and_counted(tmp_path):
    """A 0.3 s ring: a window it no longer holds is answered 410, one not yet arrived
    409 (each with the reason and what the ring holds), and with "partial" the part it
    holds is dumped; malformed triggers are answered 400; all counted, none ends the
    capture, and a burst's DM trigger dumps its sweep across the band with the margin."""
    frb = ("--signal", "frb", "--dm", "1000", "--burst-times", "0.8", "--fluence", "40")
    ref = _reference(tmp_path, *frb)
    cap = RingCapture(tmp_path, "0.3")
    sender = _simulate(cap.bind, *frb)
    cap.wait_ring(0.9)
    # The burst at 0.8 s at the band centre (1420 MHz): at the top of the band earlier.
    burst = cap.trigger({"dm": 1000, "time": 0.8, "freq": 1420.0, "margin": 0.01})
    later = cap.trigger({"start": 0.9, "end": 5.0})
    ring = cap.wait_ring(1.05)
    gone = cap.trigger({"start": 0.05, "end": 0.1})
    start = ring["start"] + 0.1  # still held while this trigger comes
    part = cap.trigger({"start": start - 0.2, "end": start + 0.05, "partial": True})
    bad = [
        b"{not json", b"[1, 2]", b'{"start": 1, "end": NaN}', b'{"start": 2, "end": 1}',
        b'{"start": 1, "end": 1}', b'{"start": "soon", "end": 2}', b'{"begin": 1, "end": 2}',
        b'{"start": true, "end": 2}', b'{"dm": -1, "time": 1}', b'{"start": 1e999, "end": 2}',
        b'{"start": 0.9, "end": 1.0, "partial": "yes"}', b"",
    ]  # fmt: skip
    answers = [cap.trigger(b) for b in bad]
    report, _ = cap.finish(sender)

    assert gone[0] == 410 and "before the oldest sample" in gone[1]["error"], gone
    assert later[0] == 409 and "after the newest sample" in later[1]["error"], later
    assert part[0] == 202 and part[1]["partial"], part
    assert abs(part[1]["start_s"] - ring["start"]) < 0.15, (part, ring)  # cut to the ring
    assert [s for s, _ in answers] == [400] * len(bad), answers
    assert all(a["error"] for _, a in answers)
    d = report["dumps"]
    assert (d["triggers"], d["refused_gone"], d["refused_not_yet"], d["malformed"]) == (
        4 + len(bad), 1, 1, len(bad)), d  # fmt: skip
    assert (d["dumps"], d["partial"], d["written"], d["lost_samples"]) == (2, 1, 2, 0), d
    header, samples, _ = read_dump(part[1]["path"])
    first = part[1]["first_sample"]
    np.testing.assert_array_equal(samples, ref[first : first + len(samples)])

    # The burst's window: from its arrival at the top of the band (1422 MHz) less the
    # margin to its arrival at the bottom (1418 MHz) plus the margin.
    assert burst[0] == 202, burst
    from voltstream.dsp.dedisperse import dispersion_delay_s

    top = 0.8 - dispersion_delay_s(1000, 1420.0, 1422.0)
    bottom = 0.8 + dispersion_delay_s(1000, 1418.0, 1420.0)
    assert burst[1]["start_s"] == pytest.approx(top - 0.01, abs=TSAMP)
    assert burst[1]["end_s"] == pytest.approx(bottom + 0.01, abs=TSAMP)
    header, samples, _ = read_dump(burst[1]["path"])
    first = burst[1]["first_sample"]
    np.testing.assert_array_equal(samples, ref[first : first + len(samples)])
    # It holds the burst: power summed over the band, each channel shifted by its own
    # delay, peaks at the burst's arrival.
    freqs = 1418.0 + 0.125 * (np.arange(32) + 0.5)
    peak_s = dedispersed_peak_s(samples, burst[1]["start_s"], 1000, freqs, 1420.0, TSAMP)
    assert abs(peak_s - 0.8) < 0.002, peak_s


def test_a_ring_larger_than_its_limit_is_refused_at_start(tmp_path):
    """--ring-seconds whose memory (seconds x the stream's rate) is over --voltage-ring-mb
    is refused before anything opens: one line, status 2; so is a ring without a
    trigger server."""
    base = ("capture", "--format", "ynao", "--listen", free_bind(), "--duration", "1")
    r = run_cli(*base, "--ring-seconds", "20", "--trigger-listen", "127.0.0.1:0",
                "--voltage-ring-mb", "1024")  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--voltage-ring-mb 1024" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli(*base, "--ring-seconds", "1")
    assert r.returncode == 2 and "--trigger-listen" in r.stderr, r.stderr


def test_before_any_data_a_trigger_is_answered_not_yet_and_a_malformed_one_400(tmp_path):
    """Nothing has arrived: a well-formed trigger is answered 409 (the ring is empty), a
    malformed one 400, both counted (in the report, and live in --metrics); the run
    then stops as asked."""
    cap = RingCapture(tmp_path, "1", "--metrics", "127.0.0.1:0")
    assert cap.ring() is None
    empty = cap.trigger({"start": 0, "end": 1})
    bad = cap.trigger(b'{"start": 1, "end": 0}')
    live = scrape_metrics(cap.metrics)  # counted while the run goes on
    for outcome in ("refused_not_yet", "malformed"):
        assert live[("voltstream_dump_triggers_total", (("outcome", outcome),))] == 1
    idle = threading.Thread(target=lambda: None)
    idle.start()
    report, _ = cap.finish(idle)
    assert empty[0] == 409 and "nothing has arrived" in empty[1]["error"], empty
    assert bad[0] == 400 and "before it starts" in bad[1]["error"], bad
    d = report["dumps"]
    assert (d["triggers"], d["refused_not_yet"], d["malformed"], d["dumps"]) == (2, 1, 1, 0), d


def test_a_run_with_a_voltage_ring_gets_a_pool_that_rides_out_a_dump(tmp_path):
    """Before: the capture's default pool (36 chunks of 256 YNAO packets: 20 ms at
    30 Gb/s) ran dry while a dump was copied and written (session 15, 167 chunks)."""
    from voltstream.cli.common import _capture_format, _capture_settings
    from voltstream.cli.dump import DUMP_POOL_MB, check_dump_options, ring_and_dumps
    from voltstream.cli.parser import build_parser

    args = build_parser().parse_args(
        ["capture", "--listen", "127.0.0.1:7000", "--format", "ynao", "--duration", "1",
         "--ring-seconds", "0.2", "--dump-dir", str(tmp_path)]
    )  # fmt: skip
    assert check_dump_options(args)
    fmt = _capture_format(args)
    settings, ring, dumps = ring_and_dumps(args, fmt, _capture_settings(args, args.listen))
    try:
        chunks = settings.spec(fmt)["chunks"]
        pool = chunks["nchunks"] * chunks["packets_per_chunk"] * fmt.payload_len
        assert pool >= DUMP_POOL_MB * 2**20 and chunks["whole_packets"]
        assert chunks["nchunks"] > chunks["window"]
    finally:
        dumps.close()
