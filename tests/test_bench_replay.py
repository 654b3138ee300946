"""Smoke run of bench/replay.py: a tiny scan replayed unpaced and at two rates, every
packet received, each run's figures present and the JSON equal to what it returned.
(The pacing error itself is the benchmark's to measure, not a test's to time.)"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import replay as bench  # noqa: E402


def test_quick_replay_bench_receives_every_packet(tmp_path, capsys):
    path = tmp_path / "replay.json"
    dirs = [tmp_path / f"d{k}" for k in range(3)]
    out = bench.main(["--mb", "4", "--rates", "0.5,1", "--json", str(path),
                      "--dirs", ",".join(map(str, dirs))])  # fmt: skip
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    assert "pacing error" in capsys.readouterr().out
    n = out["packets"]
    assert n == bench.PER_FILE and out["ceiling"]["sent"] == n
    assert [r["asked_gbps"] for r in out["runs"]] == [0.5, 1.0]
    for r in [out["ceiling"], *out["runs"]]:
        assert r["sent"] == r["received"] == n and r["lost"] == 0, r
    for r in out["runs"]:
        assert r["rx_gbps"] > 0 and r["pacing_error"] is not None and r["sender_gbps"] > 0
    # The benchmark removes its scan.
    assert all(not (d / bench.SCAN).exists() for d in dirs)
