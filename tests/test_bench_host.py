"""Smoke runs of the host benches. bench/dump_ring.py at a trivial rate: both ways of
taking a dump write the whole window (the DADA header and every sample), the consumer
counts its drops, and the JSON is what it returned (which way holds the capture better is
the benchmark's to measure on a loaded host, not a test's). bench/quantise.py on a
tiny row."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import dump_ring as bench  # noqa: E402


def test_both_ways_write_the_whole_window_at_a_trivial_rate(tmp_path):
    path = tmp_path / "dr.json"
    out = bench.main(["--rate", "0.05", "--window-s", "0.2", "--warm-s", "0.2",
                      "--packets-per-chunk", "64", "--pool-mb", "64", "--tries", "1",
                      "--dir", str(tmp_path), "--json", str(path)])  # fmt: skip
    assert json.loads(path.read_text()) == out
    assert [t["how"] for t in out["tries"]] == ["whole copy", "piecewise"]
    for t in out["tries"]:
        want = 4096 + t["window_samples"] * bench.FMT.nchan * 2 * 2
        assert t["window_samples"] > 0 and t["file_bytes"] == want, t
        # Drops are the bench's to measure (a loaded CI host stalls the consumer): here
        # only that they are counted consistently.
        assert t["chunks_dropped"] >= t["dropped_during_dump"] >= 0, t
        assert 0 <= t["answer_s"] <= t["written_s"] > 0, t
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dr.json"]  # dumps removed


def test_the_quantiser_bench_times_both_ways_on_the_same_rows(tmp_path):
    import quantise

    path = tmp_path / "q.json"
    out = quantise.main(["--nsblk", "64", "--channels", "16", "--lost", "0.2",
                         "--repeats", "2", "--json", str(path)])  # fmt: skip
    assert json.loads(path.read_text()) == out and out["values_per_row"] == 64 * 16
    assert out["float64_mvalues_per_s"] > 0 and out["quantiser_mvalues_per_s"] > 0
    assert out["speedup"] == out["quantiser_mvalues_per_s"] / out["float64_mvalues_per_s"]
