"""Smoke runs of bench/record.py: tiny numbers, no fio needed.

Sustained: a paced sender at 0.5 Gb/s for half a second to a capture recording into a
temporary directory; the rate search, the capture-alone and tmpfs runs, every packet
and chunk accounted for, the reason for the missing fio baseline in the JSON. Burst:
the first measurement's mode still runs."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import record as bench  # noqa: E402

SMALL = ["--seconds", "0.5", "--trials", "2", "--start-rate", "0.5", "--max-rate", "0.6"]


def test_sustained_record_bench_is_lossless_at_a_low_rate(tmp_path, capsys):
    path = tmp_path / "record.json"
    out = bench.main(["--dirs", str(tmp_path), *SMALL, "--no-fio", "--tmpfs-gib", "1",
                      "--json", str(path)])  # fmt: skip
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    assert "record Gb/s (highest lossless)" in capsys.readouterr().out
    assert out["mode"] == "sustained" and out["machine"] and out["date"]
    disk, alone, tmpfs = out["configurations"]
    assert [c["where"] for c in (disk, alone, tmpfs)] == ["disk", "capture alone", "tmpfs"]
    for c in (disk, tmpfs):
        assert c["fio_gbps"] is None and c["fio_skipped"] == "--no-fio given", c
        for p in c["trials"]:
            # Every chunk the capture emitted is written, unwritten or lost; every
            # packet sent is received or counted.
            assert (
                p["chunks_written"] + p["chunks_unwritten"] + p["chunks_lost"]
                == (p["chunks_emitted"])
            ), p
            assert p["sent"] > 0 and p["received"] + p["kernel_drops"] <= p["sent"], p
    for c in (disk, alone, tmpfs):
        # 0.5 Gb/s is far below any disk, core or tmpfs: lossless at the first trial,
        # then once more at --max-rate, where the search stops.
        first = c["trials"][0]
        assert first["lossless"] and first["received"] == first["sent"], first
        assert 0.4 < first["sent_gbps"] < 0.7, first
        assert c["loss"]["chunks_unwritten" if c is not alone else "dropped"] == 0
        assert len(c["trials"]) <= 2
    assert disk["record_gbps"] > 0.4 and tmpfs["capture_alone_gbps"] == alone["capture_alone_gbps"]
    assert disk["ratio"] is None and tmpfs["ratio"] == tmpfs["record_gbps"] / tmpfs[
        "capture_alone_gbps"]  # fmt: skip
    # The benchmark cleans up after itself.
    assert list(tmp_path.iterdir()) == [path]


def test_burst_mode_accounts_for_every_chunk(tmp_path, capsys):
    path = tmp_path / "record.json"
    out = bench.main(["--burst", "--dirs", str(tmp_path), "--packets", "20000", "--no-fio",
                      "--no-tmpfs", "--json", str(path)])  # fmt: skip
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    assert "record / disk alone" in capsys.readouterr().out
    (row,) = out["runs"]["dirs"]
    rec, alone = row["record"], row["disk_alone"]
    assert rec["received"] == rec["packets"] == 20000 and rec["kernel_drops"] == 0
    chunks = -(-20000 // bench.PER_CHUNK)  # the last chunk is flushed part-filled
    assert rec["chunks_written"] + rec["chunks_unwritten"] == chunks, rec
    assert rec["chunks_written"] >= 1 and rec["gbps"] > 0 and alone["gbps"] > 0
    assert list(tmp_path.iterdir()) == [path]


def test_without_fio_the_bench_says_how_to_get_it(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("PATH", str(tmp_path))  # no fio on it
    with pytest.raises(SystemExit, match="apt-get install -y fio.*fio_portable.sh"):
        bench.main(["--dirs", str(tmp_path), "--seconds", "0.1"])
    with pytest.raises(SystemExit, match="not executable"):
        bench.main(["--dirs", str(tmp_path), "--fio", str(tmp_path / "fio")])
    assert list(tmp_path.iterdir()) == []  # nothing ran
