"""Smoke run of bench/cluster.py: one and two nodes at a low rate, one second of rows:
every run lossless with every packet sent received, every row written with every
node's part, each measured row's merge latency present and positive, the table
printed and the JSON equal to what main returned. (The rates and latencies themselves
are the benchmark's to measure, not a test's to time.)"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cluster as bench  # noqa: E402


def test_quick_cluster_bench_is_lossless_and_times_every_row(tmp_path, capsys):
    path = tmp_path / "cluster.json"
    out = bench.main(["--nodes", "1,2", "--rates", "0.02", "--seconds", "1", "--tsub", "0.25",
                      "--json", str(path)])  # fmt: skip
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    text = capsys.readouterr().out
    assert "| nodes | asked Gb/s |" in text and "| nodes | highest lossless" in text
    assert [(r["nodes"], r["asked_gbps"]) for r in out["runs"]] == [(1, 0.02), (2, 0.02)]
    for r in out["runs"]:
        assert r["lossless"], r
        assert r["rows_written"] == r["rows_complete"] > 0
        assert r["rows_measured"] == 4  # 1 s of 0.25 s rows; the tail row is not timed
        lat = r["merge_latency_s"]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
        assert all(v > 0 for v in r["latency_by_row_s"].values())
        assert r["sent_gbps"] > 0
        assert {"merger", "node0", "bench"} <= set(r["cpu_share"])
        for node in r["per_node"]:
            assert node["sent"] == node["received"] == r["packets_per_node"] > 0, node
            assert node["lost"] == 0 and not node["sender_error"] and not node["node_error"]
    for s in out["summary"]:
        assert s["lossless"]["gbps"] == 0.02
        assert s["ceiling"]["samples_per_s"] > 0 and s["ceiling"]["gbps_per_node"] > 0
    assert out["machine"]["cpu_count"] and out["git"]["commit"]
