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


def test_quick_multicore_bench_accounts_for_every_packet(tmp_path, capsys):
    import capture_multicore as mc

    path = tmp_path / "multicore.json"
    out = mc.main(["--quick", "--json", str(path)])
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    text = capsys.readouterr().out
    assert "## Lossless ceiling" in text and "## Every point" in text
    kinds = ["socket", "packet_ring", "recvmmsg"]
    assert [(c["receiver"], c["cores"]) for c in out["ceilings"]] == [(k, 1) for k in kinds]
    assert [(p["receiver"], p["asked_gbps"]) for p in out["points"]] == [
        (k, r) for k in kinds for r in (0.5, 1.0)
    ]
    for p in out["points"]:
        (port,) = p["ports"]  # K = 1: one port
        assert p["sent"] == port["sent"] > 1000 and p["received"] == port["received"], p
        assert port["sent"] == port["received"] + port["lost"], port
        # Every packet sent is either accounted for by the receiver or a counted kernel drop.
        assert port["accounted"] + port["kernel_drops"] == port["sent"], port
        # At these rates nothing may be lost, and the receiver ran on its own core.
        assert p["lossless"] and p["lost"] == p["kernel_drops"] == 0, p
        assert p["received_gbps"] == p["offered_gbps"] and 0.1 < p["offered_gbps"] < 1.3, p
        assert port["core"] == p["receiver_cores"][0] and 0 <= p["receiver_cpu"][0] < 1.5
        if p["receiver"] == "recvmmsg":
            assert port["bytes"] == port["received"] * mc.PACKET and port["wrong_size"] == 0
            continue
        seen = sum(port[k] for k in ("received", "late", "duplicate", "dropped"))
        assert port["accounted"] == seen + port["malformed"] + port["foreign"], port
        for key in mc.LOSS_KEYS + ("chunks_dropped", "resyncs"):
            assert port[key] == 0, (key, port)
        chunks = -(-port["sent"] // mc.PACKETS_PER_CHUNK)  # indices start at 0
        assert port["chunks_emitted"] == port["chunks_released"] == chunks, port
    for c in out["ceilings"]:
        assert c["lossless_gbps"] == max(
            p["received_gbps"] for p in out["points"] if p["receiver"] == c["receiver"]
        )
