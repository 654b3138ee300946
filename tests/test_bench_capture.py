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
    for name in ("voltstream socket", "voltstream packet_ring", "python recv_into"):
        d = drained[name]
        assert d["received"] == d["packets"] == 3000, d
        assert d["gbps"] > 0 and d["seconds"] > 0
    assert [s["engine"] for s in out["sweep"]] == ["socket", "packet_ring"]
    for s in out["sweep"]:
        assert s["sent"] > 1000 and s["received"] == s["sent"], s
        assert s["lost"] == s["dropped"] == s["kernel_drops"] == s["missing"] == 0, s
        assert 0.3 < s["sent_gbps"] < 0.7
