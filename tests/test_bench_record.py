"""Smoke run of bench/record.py: a small burst, every packet captured and every chunk
accounted for (written or unwritten), the same-run baseline present."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import record as bench  # noqa: E402


def test_quick_record_bench_accounts_for_every_chunk(tmp_path, capsys):
    path = tmp_path / "record.json"
    out = bench.main(["--dirs", str(tmp_path), "--packets", "20000", "--json", str(path)])
    assert json.loads(path.read_text()) == json.loads(json.dumps(out))
    assert "record / disk alone" in capsys.readouterr().out
    (row,) = out["runs"]["dirs"]
    rec, alone = row["record"], row["disk_alone"]
    assert rec["received"] == rec["packets"] == 20000 and rec["kernel_drops"] == 0
    chunks = -(-20000 // bench.PER_CHUNK)  # the last chunk is flushed part-filled
    assert rec["chunks_written"] + rec["chunks_unwritten"] == chunks, rec
    assert rec["chunks_written"] >= 1 and rec["gbps"] > 0 and alone["gbps"] > 0
    # The benchmark cleans up after itself.
    assert list(tmp_path.iterdir()) == [path]
