"""Several antennas in one `voltstream fengine` process (issue 26 item 3): each antenna
its own capture, engine and output stream; the real CLI on loopback, fed by the
simulator's digitiser sender with a different signal per antenna, each antenna's
heaps equal to the NumPy reference of its own input; a silent antenna counted, not
waited for; the settings split per antenna with one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_process import reaped, run_cli
from loopback import address, free_ports, udp_receiver
from test_fengine_pipeline import drain
from voltstream.capture.config import CaptureSettings
from voltstream.cli import main
from voltstream.errors import ConfigError
from voltstream.fengine import FEngineReference, HeapLayout, decode_packets
from voltstream.fengine.antennas import split_capture, split_settings
from voltstream.fengine.heaps import decode_output_heap
from voltstream.fengine.output import parse_destinations, read_packet_file
from voltstream.fengine.settings import FEngineSettings
from voltstream.ops.counters import samples
from voltstream.sim.spead import digitiser_samples

NCH, NSPEC, SPH, FS, HEAPS = 64, 16, 1024, 1e6, 200
#: Each antenna's signal: the simulator's --tone (MHz), --seed and --dig-ids.
SIGNALS = [(0.15625, 1, (0, 1)), (0.25, 7, (2, 3))]  # channels 20 and 32 of 64
STOP_CNT = (1 << 48) - 2  # descriptor and stop heaps: cnts from here up


def start_fengine(listen: str, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    """`voltstream fengine` (CPU engine, small channeliser) until it says it listens
    on every antenna's port; its first lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "fengine", "--listen", listen,
         "--channels", str(NCH), "--spectra-per-heap", str(NSPEC), "--taps", "16",
         "--samples-per-heap", str(SPH), "--sample-rate-hz", str(FS), "--device", "cpu",
         "--duration", "60", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines.append(proc.stdout.readline())
        if "listening on" in lines[-1] or not lines[-1]:
            break
    if "listening on" not in lines[-1]:
        proc.kill()
        raise AssertionError("".join(lines) + proc.stderr.read())
    return proc, lines


def simulate(port: int, tone: float, seed: int, ids: tuple[int, int], *extra: str
             ) -> subprocess.Popen:  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "simulate", "--format", "spead-dig",
         "--samples-per-heap", str(SPH), "--sample-rate-hz", str(FS), "--tone", str(tone),
         "--seed", str(seed), "--dig-ids", f"{ids[0]},{ids[1]}", "--heaps", str(HEAPS),
         "--dest", f"127.0.0.1:{port}", "--rate", "0.05", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def reference(tone: float, seed: int, feng_id: int) -> list:
    """The heaps antenna ``feng_id`` must send: the reference engine on the samples
    the simulator made for it."""
    x = digitiser_samples(0, HEAPS, samples_per_heap=SPH, sample_rate_hz=FS,
                          tone_hz=tone * 1e6, tone_amplitude=100.0, noise_rms=20.0,
                          seed=seed)  # fmt: skip
    return FEngineReference(NCH, 16, NSPEC, sample_rate_hz=FS, feng_id=feng_id).process(x, 0)


def test_two_antennas_in_one_process_each_send_the_reference_of_their_own_input(tmp_path):
    ports = free_ports(2)
    sinks = [udp_receiver(), udp_receiver()]
    files = [tmp_path / "a0.spead", tmp_path / "a1.spead"]
    report_path = tmp_path / "report.json"
    proc, lines = start_fengine(
        f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}",
        "--dig-ids", "0,1,2,3", "--dest", ",".join(address(s) for s in sinks),
        "--output", f"{files[0]},{files[1]}", "--idle-timeout", "8",
        "--report", str(report_path),
    )  # fmt: skip
    with reaped(proc):
        sims = [simulate(p, *sig) for p, sig in zip(ports, SIGNALS, strict=True)]
        for s in sims:
            assert s.wait(60) == 0, s.stderr.read()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    text = "".join(lines) + out
    assert "antenna 0: 127.0.0.1" in text and "feng_id 1 of 2" in text
    assert "fengine totals, 2 antennas:" in text and "antenna 1 (127.0.0.1" in text
    report = json.loads(report_path.read_text())
    assert len(report["antennas"]) == 2
    tot = report["totals"]
    for k, (tone, seed, _) in enumerate(SIGNALS):
        ant = report["antennas"][k]
        assert [s["received"] for s in ant["capture"]["streams"]] == [HEAPS, HEAPS]
        assert ant["capture"]["totals"]["missing"] == 0 and ant["capture"]["foreign"] == 0
        expected = reference(tone, seed, k)
        assert ant["engine"]["heaps_made"] == ant["output"]["heaps_sent"] == len(expected)
        assert ant["output"]["send_errors"] == 0
        got = [d for d in decode_packets(drain(sinks[k])) if d.heap_cnt < STOP_CNT]
        heaps = [decode_output_heap(d, HeapLayout(NCH, NSPEC)) for d in got]
        assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
        assert {h.feng_id for h in heaps} == {k}
        for h, e in zip(heaps, expected, strict=True):
            np.testing.assert_array_equal(h.payload, e.payload)
        power = sum((h.payload.astype(float) ** 2).sum(axis=(1, 2, 3)) for h in heaps)
        assert int(np.argmax(power)) == round(tone / (FS / 2e6) * NCH)  # its own tone
        assert len(read_packet_file(files[k])) == 1 + len(expected) + 1  # descriptor, stop
    assert tot["received"] == 4 * HEAPS and tot["lost"] == 0 and tot["antennas_silent"] == 0
    assert tot["heaps_sent"] == sum(a["output"]["heaps_sent"] for a in report["antennas"])
    for s in sinks:
        s.close()


def test_a_silent_antenna_is_counted_and_does_not_hold_the_run_and_loss_sets_the_status(
    tmp_path,
):
    ports = free_ports(2)
    report_path = tmp_path / "report.json"
    mine = sorted(os.sched_getaffinity(0))
    cpus = [mine[-1], mine[0]]  # each antenna's capture thread on a CPU of its own
    t0 = time.monotonic()
    proc, lines = start_fengine(
        f"127.0.0.1:{ports[0]}+1", "--output", f"{tmp_path / 'a'},{tmp_path / 'b'}",
        "--idle-timeout", "4", "--report", str(report_path), "--cpus", f"{cpus[0]},{cpus[1]}",
        "--max-loss", "0",
    )  # fmt: skip
    with reaped(proc):
        sim = simulate(ports[0], *SIGNALS[0], "--drop", "1:50")  # nothing to the second port
        assert sim.wait(60) == 0, sim.stderr.read()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # one heap lost of antenna 0's, over --max-loss 0
    assert "lost 0.25 % of the data (1 of 400)" in err
    assert time.monotonic() - t0 < 45  # each antenna ended on its idle timeout
    assert f"antenna 1 (127.0.0.1:{ports[1]}): NOTHING RECEIVED" in out
    assert f"antenna 1 (127.0.0.1:{ports[1]}) received nothing" in err
    report = json.loads(report_path.read_text())
    a0, a1 = report["antennas"]
    assert a0["capture"]["totals"]["received"] == 2 * HEAPS - 1 and a0["engine"]["heaps_made"] > 0
    assert a1["capture"]["totals"]["received"] == 0 and a1["engine"]["heaps_made"] == 0
    assert report["totals"]["antennas_silent"] == 1 and report["totals"]["lost"] == 1
    assert report["totals"]["received"] == 2 * HEAPS - 1
    assert [a["capture"]["threads"][0]["cpu"] for a in (a0, a1)] == cpus


# -- the split, and its one-line errors -------------------------------------------------


def test_settings_split_per_antenna():
    s = FEngineSettings(substreams=2, output="x")
    four = parse_destinations("127.0.0.1:7150+3")  # given apart: the settings need not split
    a, b = split_settings(s, 2, dest=four, dig_ids=[(0, 1), (4, 5)], outputs=["f0", "f1"])
    assert a.dest == ("127.0.0.1:7150", "127.0.0.1:7151") and a.n_substreams == 2
    assert b.dest == ("127.0.0.1:7152", "127.0.0.1:7153")
    assert (a.dig_ids, b.dig_ids, a.output, b.output) == ((0, 1), (4, 5), "f0", "f1")
    assert (a.feng_id, b.feng_id, a.n_fengs, b.n_fengs) == (0, 1, 2, 2)
    same = split_settings(FEngineSettings(dest="127.0.0.1:7150+1", feng_id=2, n_fengs=8), 2)
    assert [x.dig_ids for x in same] == [(0, 1), (0, 1)] and [x.feng_id for x in same] == [2, 3]
    assert split_settings(s, 1) == [s]  # one antenna: as given
    for dest, kw, message in (
        ("127.0.0.1:7150+2", {}, "3 destinations for 2 antennas"),
        ("127.0.0.1:7150+3", dict(substreams=1), "give 2"),
        ("127.0.0.1:7150+1", dict(n_fengs=3, feng_id=2), "--n-fengs 3"),
    ):
        with pytest.raises(ConfigError, match=message):
            split_settings(FEngineSettings(**kw), 2, dest=parse_destinations(dest))
    with pytest.raises(ConfigError, match="--dig-ids: 3 given for 2 antennas"):
        split_settings(s, 2, dig_ids=[(0, 1), (2, 3), (4, 5)])
    with pytest.raises(ConfigError, match="--output: 1 file"):
        split_settings(s, 2, outputs=["only"])


def test_capture_split_per_antenna_one_thread_and_cpu_each():
    both = CaptureSettings.of("127.0.0.1:7148", more_binds=["127.0.0.1:7149"], threads=2,
                              cpus=[3, 5], window=4)  # fmt: skip
    a, b = split_capture(both, 2)
    assert (a.network.bind, b.network.bind) == ("127.0.0.1:7148", "127.0.0.1:7149")
    assert a.network.more_binds == [] and a.threads.count == b.threads.count == 1
    assert (a.threads.cpus, b.threads.cpus, b.chunks.window) == ([3], [5], 4)
    with pytest.raises(ConfigError, match="give 2 CPUs"):
        split_capture(both.replace(cpus=[3]), 2)


def test_port_ranges_as_destinations():
    assert parse_destinations("127.0.0.1:7150+2") == [f"127.0.0.1:{p}" for p in (7150, 7151, 7152)]
    for bad in ("127.0.0.1:7150+x", "127.0.0.1:65535+1"):
        with pytest.raises(ConfigError):
            parse_destinations(bad)


BASE = ["fengine", "--listen", "127.0.0.1:7148+1", "--device", "cpu", "--duration", "1"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dest", "127.0.0.1:7150+2"], "3 destinations for 2 antennas"),
        (["--dest", "127.0.0.1:7150+1", "--cpus", "1"], "give 2 CPUs"),
        (["--output", "only.spead"], "--output: 1 file(s) for 2 antennas"),
        (["--dest", "127.0.0.1:7150+1", "--dig-ids", "0,1,2,3,4,5"], "3 pairs of ids"),
        (["--dest", "127.0.0.1:7150+1", "--n-fengs", "2", "--feng-id", "1"], "--n-fengs 2"),
        (["--dest", "127.0.0.1:7150+1", "--settings", "a,b,c"], "3 given for 2 antennas"),
    ],
)
def test_several_antennas_bad_input_is_one_line_and_exit_2(extra, message, capsys):
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("voltstream fengine: error:"), err
    assert message in err


def test_each_antennas_metrics_carry_its_label():
    one = {"heaps_paired": 3, "heaps_unpaired": [0, 0], "capture": {"streams": []},
           "output": {"heaps_sent": 2}}  # fmt: skip
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for s in samples({"antennas": [one, one | {"heaps_paired": 5}]})}  # fmt: skip
    assert got[("voltstream_fengine_heaps_paired_total", (("antenna", "0"),))] == 3
    assert got[("voltstream_fengine_heaps_paired_total", (("antenna", "1"),))] == 5
    assert got[("voltstream_fengine_output_heaps_sent_total", (("antenna", "1"),))] == 2
    assert not any(dict(labels).get("antenna") is None for _, labels in got)


def test_help_names_the_antennas():
    r = run_cli("fengine", "--help")
    assert r.returncode == 0 and "4 antennas, one GPU, one process" in r.stdout


def test_one_antenna_over_two_capture_threads_sends_the_reference(tmp_path):
    """`fengine --threads 2`: one antenna's heaps steered by chunk over two capture
    threads (issue 26: one antenna above one core), its output still the reference."""
    port = free_ports(1)[0]
    sink = udp_receiver()
    report_path = tmp_path / "report.json"
    proc, _ = start_fengine(
        f"127.0.0.1:{port}", "--threads", "2", "--engine", "packet_ring", "--chunk-heaps",
        "16", "--dig-ids", "0,1", "--dest", address(sink), "--idle-timeout", "6",
        "--report", str(report_path),
    )  # fmt: skip
    with reaped(proc):
        sim = simulate(port, *SIGNALS[0])
        assert sim.wait(60) == 0, sim.stderr.read()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    cap = json.loads(report_path.read_text())["capture"]
    assert [s["received"] for s in cap["streams"]] == [HEAPS, HEAPS]
    assert cap["totals"]["missing"] == 0 and cap["totals"]["late"] == 0
    # Both threads took their turns: chunks of 16 heaps, 200 heaps a pol.
    assert len(cap["threads"]) == 2 and all(t["packets"] > 0 for t in cap["threads"])
    assert sum(t["packets"] for t in cap["threads"]) == 2 * HEAPS
    expected = reference(SIGNALS[0][0], SIGNALS[0][1], 0)
    got = [d for d in decode_packets(drain(sink)) if d.heap_cnt < STOP_CNT]
    heaps = [decode_output_heap(d, HeapLayout(NCH, NSPEC)) for d in got]
    assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
    for h, e in zip(heaps, expected, strict=True):
        np.testing.assert_array_equal(h.payload, e.payload)
    sink.close()


def test_threads_split_evenly_over_antennas_with_their_cpus():
    both = CaptureSettings.of("127.0.0.1:7148", more_binds=["127.0.0.1:7149"],
                              cpus=[2, 3, 4, 5])  # fmt: skip
    a, b = split_capture(both, 2, threads=2)
    assert (a.threads.count, a.threads.spread, a.threads.cpus, b.threads.cpus) == (
        2, "chunks", [2, 3], [4, 5])  # fmt: skip
    assert main([*BASE, "--dest", "127.0.0.1:7150+1", "--threads", "3"]) == 2
