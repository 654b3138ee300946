"""Smoke run of bench/capture.py: a few thousand packets, structure and zero loss."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import capture as bench  # noqa: E402


def test_quick_bench_reports_every_engine_without_loss(tmp_path, capsys):
    path = tmp_path / "capture.json"
    out = bench.main(["--quick", "--packets", "3000", "--rates", "0.5", "--json", str(path)])
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    text = capsys.readouterr().out
    assert "## Drain rate" in text and "## Loss versus rate" in text
    drained = {d["receiver"]: d for d in out["drain"]}
    for name in (
        "voltstream socket",
        "voltstream packet_ring",
        "python recv_into",
        "spead2 chunk stream",
    ):
        d = drained[name]
        assert d["received"] == d["packets"] == 3000, d
        assert d["gbps"] > 0 and d["seconds"] > 0
    # spead2 placed every heap into a chunk: none rejected by our callback, none too old.
    s2 = drained["spead2 chunk stream"]["spead2_stats"]
    assert s2["heaps"] == 3000 and s2["rejected_heaps"] == s2["too_old_heaps"] == 0, s2
    assert drained["spead2 chunk stream"]["chunks"] > 0
    medians = {m["receiver"]: m for m in out["drain_median"]}
    assert medians.keys() == drained.keys()
    assert medians["spead2 chunk stream"]["vs_spead2_chunks"] == 1.0
    assert [s["engine"] for s in out["sweep"]] == ["socket", "packet_ring"]
    for s in out["sweep"]:
        assert s["sent"] > 1000 and s["received"] == s["sent"], s
        assert s["lost"] == s["dropped"] == s["kernel_drops"] == s["missing"] == 0, s
        assert 0.3 < s["sent_gbps"] < 0.7
