"""bench/search.py's logic on the CPU reference at a toy size (--device cpu --tiny): the
headroom of one gulp with its burst found, the live search's latencies for bursts
sent over loopback, and the merge into the results file that keeps every figure
with its date and command and never writes a null over one."""

from __future__ import annotations

import json
from pathlib import Path

from repo_script import load_script

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_script("bench/search.py")


def test_tiny_bench_measures_headroom_and_live_latency(tmp_path):
    bench = _bench()
    out = tmp_path / "search.json"
    doc = bench.main(["--device", "cpu", "--tiny", "--bursts", "2", "--repeats", "1",
                      "--json", str(out), "--workdir", str(tmp_path)])  # fmt: skip
    run = doc["runs"][-1]
    h, live = run["headroom"], run["live"]
    assert h["burst_found"] and h["headroom"] > 0 and h["dm_trials"] > 10
    assert h["headroom"] == h["data_seconds"] / h["compute_seconds"]
    assert live["found"] == 2 and live["latency_p99_s"] >= live["latency_p50_s"] > 0
    figs = json.loads(out.read_text())["figures"]
    assert figs["headroom_tiny_cpu"]["value"] == h["headroom"]
    assert figs["live_latency_p99_s_tiny_cpu"]["command"].startswith("bench/search.py")


def test_merge_keeps_every_figure_and_never_a_null():
    bench = _bench()
    m = {"host": "h"}
    first = {"date": "d1", "command": "c1", "machine": m, "tiny": False,
             "headroom": {"device": "gpu", "headroom": 9.0, "headroom_with_copy": 7.0,
                          "compute_seconds": 0.4}, "live": None}  # fmt: skip
    second = {"date": "d2", "command": "c2", "machine": m, "tiny": False, "headroom": None,
              "live": {"device": "gpu", "latency_p50_s": 0.8, "latency_p99_s": 1.2,
                       "found": 8, "bursts": 8}}  # fmt: skip
    doc = bench.merge(bench.merge(None, first), second)
    assert doc["figures"]["headroom_ynao_gpu"] == {"value": 9.0, "date": "d1", "command": "c1",
                                                   "machine": m}  # fmt: skip
    assert doc["figures"]["live_latency_p99_s_ynao_gpu"]["date"] == "d2"
    assert len(doc["runs"]) == 2
    third = dict(first, date="d3", headroom={"device": "gpu", "headroom": None})
    doc = bench.merge(doc, third)
    assert doc["figures"]["headroom_ynao_gpu"]["value"] == 9.0  # a null replaces nothing
