"""`voltstream search --listen ... --ring-seconds T --dump-dir DIR` (issue 28 item 3):
the live search keeps the voltage ring beside its capture and dumps each candidate
above --dump-threshold, end to end over loopback (tests/search_dump_run.py: the dumps
hold the bursts where the candidates say); one under the threshold dumps nothing; bad
option combinations are one line, status 2."""

from __future__ import annotations

import pytest

from cli_process import run_cli
from loopback import free_bind
from search_dump_run import check_burst_dumps, search_with_dumps
from voltstream.ops.counters import samples as metric_samples


def test_a_burst_found_live_is_dumped_with_its_sweep_and_counted(tmp_path):
    report, out, _ = search_with_dumps(tmp_path, "cpu")
    check_burst_dumps(report)
    assert report["capture"]["lost"] == 0
    got = {(s.name, tuple(s.labels.items())): s.value for s in metric_samples(report)}
    assert got[("voltstream_dump_candidates_total", (("outcome", "dumped"),))] == 2
    assert got[("voltstream_dump_triggers_total", (("outcome", "dumps"),))] == 2
    assert "candidates with S/N >= 10: 2 of 2 triggered: dumped=2" in out, out
    for x in report["dumps"]["list"]:
        assert x["path"] in out  # each dump listed in the summary


def test_a_candidate_under_the_dump_threshold_dumps_nothing(tmp_path):
    report, out, _ = search_with_dumps(tmp_path, "cpu", "--dump-threshold", "1000")
    c = report["dumps"]["candidates"]
    assert c["candidates"] == report["search"]["n_candidates"] >= 2, c
    assert (c["below_threshold"], c["triggers"], c["dumped"]) == (c["candidates"], 0, 0), c
    assert report["dumps"]["dumps"] == 0 and not list(tmp_path.glob("*.dada"))
    assert "candidates with S/N >= 1000: 0 of" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--dump-threshold", "8"], "--dump-threshold is an option of the voltage ring"),
        (["--trigger-listen", "127.0.0.1:0"], "--trigger-listen is an option of the voltage"),
        (["--ring-seconds", "1", "--dump-dir", "/nonexistent/dumps"], "no such directory"),
        (["--ring-seconds", "0.01", "--dm-max", "2000"], "shorter than a burst's window"),
        (["--ring-seconds", "1", "--format", "vdif", "--real"], "real-sampled"),
    ],
)
def test_bad_dump_options_of_a_live_search_are_one_line(tmp_path, argv, words):
    cand = tmp_path / "x.cand"
    r = run_cli("search", "--listen", free_bind(), "--duration", "1", "--candidates",
                str(cand), *argv)  # fmt: skip
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not cand.exists()  # refused before any file was opened


def test_dump_options_without_a_live_ring_are_one_line(tmp_path):
    fil = tmp_path / "x.fil"
    fil.write_bytes(b"")
    r = run_cli("search", str(fil), "--ring-seconds", "1")
    assert r.returncode == 2 and "a live stream (--listen)" in r.stderr, r.stderr
    r = run_cli("capture", "--listen", free_bind(), "--duration", "1", "--dump-dir", ".")
    assert r.returncode == 2 and "--dump-dir is an option of the voltage ring" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
