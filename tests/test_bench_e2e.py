"""bench/e2e.py: restamped packets land where the capture expects them (Rust locator
and a real capture), the senders' split covers every index once, the report parser
reads both report shapes, the search finds the ceiling of a model receiver, and one
small capture-alone run through the harness on loopback is lossless."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import e2e  # noqa: E402
import e2e_receivers as rx  # noqa: E402
import e2e_traffic as tr  # noqa: E402
from capture_spec import capture as open_capture
from voltstream import _core  # noqa: E402
from voltstream.spead_items import parse_packet  # noqa: E402

FORMATS = ["ynao", "vdif8", "vdif2", "vdif2real4t", "spead"]


def place(t, packet: bytes) -> tuple[int, int]:
    """(stream, index) of one packet as the capture's classifier gives it."""
    if t.name == "ynao":
        return _core.locate("ynao", packet)[:2]
    if t.name.startswith("vdif"):
        return _core.locate("vdif", packet, **t.locate_kwargs())[:2]
    # No Rust locator for SPEAD: read the items (the real capture test below checks it).
    imm = parse_packet(packet).immediates()
    assert imm[0x1] == imm[0x1600] // 4096  # heap counter = time stamp / samples per heap
    assert imm[0x1600] % 4096 == 0
    return int(imm[0x3101]), int(imm[0x1600] // 4096)


@pytest.mark.parametrize("name", FORMATS)
def test_restamped_packets_are_located_at_their_indices(name):
    t = tr.make_traffic(name)
    block, blocks, k = 4, 3, 3
    buf = t.template(block * blocks)
    assert buf.shape == (block * blocks, t.packet_len) and buf.flags.c_contiguous
    header = {"ynao": 24, "spead": 72}.get(name, 32)  # VDIF: 32
    data = buf[:, header:].copy()
    for i, j in [(0, 0), (5, 2), (100_000, 1)]:
        g = tr.buffer_indices(i, j, k, block, blocks)
        t.restamp(buf, g)
        assert [place(t, row.tobytes()) for row in buf] == [t.expected(int(x)) for x in g]
    assert np.array_equal(buf[:, header:], data)  # only header fields are rewritten
    # Consecutive global indices are consecutive on each stream.
    seq = [t.expected(g) for g in range(8)]
    for s in range(t.streams):
        idx = [i for st, i in seq if st == s]
        assert len(idx) == 8 // t.streams and np.all(np.diff(idx) == 1), seq


def test_ynao_time_stamps_follow_the_sequence_counter():
    t = tr.make_traffic("ynao")
    buf = t.template(4)
    t.restamp(buf, np.array([0, 1, 62_500, 5_400_000_000], np.uint64))
    h = [_core.parse_header("ynao", row.tobytes()) for row in buf]
    ns = [(x["mjd"] * 86400 + x["second"]) * 10**9 + x["nanosecond"] for x in h]
    assert [x["sequence"] for x in h] == [0, 1, 62_500, 5_400_000_000]
    assert ns[1] - ns[0] == 16_000 and ns[2] - ns[0] == 10**9  # 62500 frames = 1 s
    assert ns[3] - ns[0] == 5_400_000_000 * 16_000  # a day boundary crossed, MJD carried


def capture_for(t, ppc: int):
    if t.name == "ynao":
        kw = {}
    elif t.name == "spead":
        kw = {"digitiser_ids": [0, 1], "samples_per_heap": 4096, "sample_bits": 10}
    else:
        kw = {"vdif_threads": t.locate_kwargs()["threads"], "vdif_frame_len": t.packet_len}
        kw["frames_per_second"] = t.fps
    fmt = "vdif" if t.name.startswith("vdif") else t.name
    return open_capture(fmt, "127.0.0.1:0", ppc, window=4, engine="socket", **kw)


@pytest.mark.parametrize("name", FORMATS)
def test_capture_places_every_packet_of_interleaved_senders(name):
    """Two senders' calls in the order they interleave; the real assembler sees one
    contiguous sequence: nothing missing, late, duplicate, malformed or foreign."""
    t = tr.make_traffic(name)
    k, block, blocks, calls = 2, 8, 4, 4
    cap = capture_for(t, ppc=32)
    cap.start()
    try:
        tx = _core.Sender(cap.address)
        buf = t.template(block * blocks)
        for i in range(calls):
            for j in range(k):
                t.restamp(buf, tr.buffer_indices(i, j, k, block, blocks))
                # Paced: an unprivileged socket buffer may hold only a few packets.
                assert tx.send(buf, t.packet_len, 0.2)["packets"] == block * blocks
        total = calls * k * block * blocks
        deadline = time.monotonic() + 10
        while cap.stats()["packets"] < total and time.monotonic() < deadline:
            while (chunk := cap.next_chunk(0.01)) is not None:
                chunk.release()
    finally:
        cap.stop()
    while (chunk := cap.next_chunk(0.0)) is not None:
        chunk.release()
    st = cap.stats()
    c = rx.receiver_counts({"totals": st["totals"], "engine": st})
    assert c["received"] == total and rx.lossless(total, c), c
    assert c["duplicate"] == c["malformed"] == c["foreign"] == 0, c
    assert [s["received"] for s in st["streams"]] == [total // t.streams] * t.streams


def test_sender_split_gives_each_index_exactly_once():
    for k, block, blocks, calls in [(1, 2, 1, 3), (3, 4, 2, 5), (8, 32, 16, 3)]:
        per_call = [
            [tr.buffer_indices(i, j, k, block, blocks) for j in range(k)] for i in range(calls)
        ]
        every = np.concatenate([x for call in per_call for x in call])
        assert np.array_equal(np.sort(every), np.arange(calls * k * block * blocks))
        for i, call in enumerate(per_call):
            n = k * block * blocks  # call i of all senders: one contiguous range
            assert np.array_equal(np.sort(np.concatenate(call)), np.arange(i * n, (i + 1) * n))
            # Senders at the same point of their calls are within k blocks of each other.
            spread = np.ptp(np.stack(call), axis=0)
            assert spread.max() < k * block


def engine_stats(**counts) -> dict:
    streams = [
        {"stream": s, "received": 10, "missing": 0, "late": 0, "duplicate": 0, "dropped": 0}
        for s in range(2)
    ]
    streams[1].update(counts)
    totals = {key: sum(s[key] for s in streams) for key in streams[0] if key != "stream"}
    totals.update(malformed=1, foreign=2)
    return {
        "engine": "socket",
        "streams": streams,
        "totals": totals,
        "malformed": 1,
        "foreign": 2,
        "kernel_drops": 0,
        "chunks_dropped": 0,
    }


def test_report_parser_reads_capture_and_fengine_reports():
    from voltstream.capture.run import CaptureReport
    from voltstream.fengine.pipeline import FEngineReport

    st = engine_stats(missing=3, late=4, dropped=5)
    want = {
        "received": 20,
        "missing": 3,
        "late": 4,
        "duplicate": 0,
        "malformed": 1,
        "foreign": 2,
        "dropped": 5,
        "kernel_drops": 0,
        "chunks_dropped": 0,
        "engine": "socket",
        "timeline_lost": 0,
    }
    capture = json.loads(json.dumps(CaptureReport("ynao", "127.0.0.1:1", engine=st).as_dict()))
    # A band in several streams: what the timeline lost (a silent stream) counts too.
    band = CaptureReport("ynao", "127.0.0.1:1", engine=engine_stats(), silent_packets=[0, 7])
    counts = rx.receiver_counts(json.loads(json.dumps(band.as_dict())))
    assert counts["timeline_lost"] == 7 and not rx.lossless(counts["received"], counts)
    fengine = json.loads(json.dumps(FEngineReport("127.0.0.1:1", capture=st).as_dict()))
    assert rx.receiver_counts(capture) == want
    assert rx.receiver_counts(fengine) == want
    no_totals = dict(st)
    del no_totals["totals"]
    assert rx.receiver_counts({"engine": no_totals}) == want  # summed from the streams
    assert not rx.lossless(20, want)
    clean = rx.receiver_counts({"capture": engine_stats()})
    assert rx.lossless(20, clean) and not rx.lossless(21, clean)
    assert not rx.lossless(20, dict(clean, kernel_drops=1))
    # The real engine's stats carry every key the parser reads.
    cap = open_capture("ynao", "127.0.0.1:0", 8, engine="socket")
    cap.start()
    cap.stop()
    real = cap.stats()
    assert set(rx.COUNTERS) - {"malformed", "foreign"} <= set(real["totals"])
    assert {"kernel_drops", "chunks_dropped", "malformed", "foreign"} <= set(real)


def model_run(limit, calls, long_limit=None, took=None):
    """A receiver that is lossless up to `limit` Gb/s (`long_limit` for long runs); above
    it, `took(rate)` Gb/s reach the product (default: `limit`). Unpaced senders: 40 Gb/s."""

    def run(rate, secs):
        calls.append((rate, secs))
        offered = rate or 40.0
        cap = long_limit if long_limit is not None and secs > 10 else limit
        ok = offered <= cap
        got = offered if ok else (took(rate) if took else cap)
        p = {
            "config": "capture_ynao",
            "asked_gbps": rate,
            "offered_gbps": offered,
            "received_gbps": got,
            "lossless": ok,
            "seconds": secs,
            "sent": 1000,
            "lost": 0 if ok else 1,
            "receiver_cpu": [0.5],
            "sender_limited": False,
            "notes": [],
        }
        p.update(dict.fromkeys(rx.ALL_COUNTERS, 0), received=1000 if ok else 999)
        return p

    return run


def test_search_ladders_bisects_then_confirms(capsys):
    a = e2e.parse_args(["--steps", "3"])
    calls = []
    res = e2e.find_ceiling("capture_ynao", model_run(13.0, calls), a, lambda n, s: True)
    # Capacity 13: 5, 10 lossless, 20 lossy; bisection 15 (lossy), 12.5 (lossless),
    # 13.75 (lossy); the 20 s confirmation at 12.5.
    assert [r for r, _ in calls] == pytest.approx([5, 10, 20, 15, 12.5, 13.75, 12.5])
    assert [s for _, s in calls] == [5.0] * 6 + [20.0]
    assert res["lossless_gbps"] == pytest.approx(12.5)
    assert res["confirmed_seconds"] == 20.0 and res["lowest_lossy_gbps"] == 13.75
    # A product that collapses when overloaded (3 Gb/s reach it) changes nothing.
    calls.clear()
    collapse = model_run(13.0, calls, took=lambda rate: 3.0)
    res = e2e.find_ceiling("capture_ynao", collapse, a, lambda n, s: True)
    assert res["lossless_gbps"] == pytest.approx(12.5)
    # The long run loses: the figure is the confirmed 0.9 x that rate.
    calls.clear()
    res = e2e.find_ceiling("capture_ynao", model_run(13.0, calls, 12.0), a, lambda n, s: True)
    assert calls[-2][0] == pytest.approx(12.5) and calls[-1][0] == pytest.approx(0.9 * 12.5)
    assert res["lossless_gbps"] == pytest.approx(0.9 * 12.5)
    assert any("not lossless" in n for n in res["notes"])
    # A receiver that cannot finish (killed, no report) is a lossy point at what the
    # senders offered, and the search goes on below it.
    calls.clear()
    slow = model_run(13.0, calls)

    def run(rate, secs):
        p = slow(rate, secs)
        if rate == 20:
            p.update(error="TimeoutExpired: the receiver did not finish", received_gbps=None)
        return p

    res = e2e.find_ceiling("capture_ynao", run, a, lambda n, s: True)
    assert res["errors"] and res["lowest_lossy_gbps"] == 13.75 and res["lossless_gbps"] == 12.5
    # Senders at their limit while lossless: the ladder stops there, said; a budget cut
    # of the confirmation is said too.
    calls.clear()
    limited = model_run(50.0, calls)

    def run2(rate, secs):
        p = limited(rate, secs)
        p["offered_gbps"] = p["received_gbps"] = min(rate, 9.0)  # the senders' most
        return p

    res = e2e.find_ceiling("capture_ynao", run2, a, lambda n, s: s < 10)
    assert [r for r, _ in calls] == [5, 10] and res["lossless_gbps"] == 9.0
    assert res["confirmed_seconds"] is None and any("budget" in n for n in res["notes"])
    assert any("sender-bound" in n for n in res["notes"])
    assert "LOSSLESS" in capsys.readouterr().out


def test_summary_ratio_and_merge(tmp_path):
    def cfg(g):
        return {
            "lossless_gbps": g,
            "confirmed_seconds": 20.0,
            "receiver_cpu": [1.0],
            "notes": [],
            "errors": [],
        }

    part1 = {
        "configs": {"capture_ynao": cfg(40.0)},
        "skipped": {"fold_vdif2": "`voltstream fold` has no --bits"},
    }
    unconfirmed = dict(cfg(30.0), confirmed_seconds=None)
    part2 = {
        "configs": {"fold_ynao": cfg(20.0), "capture_ynao": unconfirmed},
        "gpu_alone": {"fold_8bit_gsps": 25.0},
        "skipped": {"fold_vdif2": "not selected (--only)", "capture_ynao": "not selected (--only)"},
    }
    paths = []
    for i, part in enumerate((part1, part2)):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(part))
    out = tmp_path / "e2e.json"
    doc = e2e.main(["--merge", *map(str, paths), "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    assert doc["fold_ynao_capture_alone_gbps"] == 40.0 and doc["fold_ynao_lossless_gbps"] == 20.0
    r = doc["ratios"]["fold_ynao"]  # 20 Gb/s of 8216-byte frames of 4096 samples
    assert r["e2e_gsps"] == pytest.approx(20e9 / 8 / 8216 * 4096 / 1e9)
    assert r["gpu_alone_gsps"] == 25.0 and r["ratio"] == pytest.approx(0.5)
    assert doc["skipped"]["fold_vdif2"] == "`voltstream fold` has no --bits"
    assert "capture_ynao" not in doc["skipped"] and doc["fengine_4096_lossless_gbps"] is None
    # A later run's unconfirmed figure does not replace an earlier confirmed one.
    assert doc["configs"]["capture_ynao"]["merged_from"] == str(paths[0])
    assert doc["unconfirmed_gbps"] == {}


def test_a_merge_never_writes_a_null_over_a_figure_and_a_run_merges_into_its_json(tmp_path):
    def cfg(g, confirmed=20.0):
        return {"lossless_gbps": g, "confirmed_seconds": confirmed, "receiver_cpu": [1.0],
                "notes": [], "errors": []}  # fmt: skip

    # A figure written by hand (no configuration behind it) and one merged from an
    # earlier file: both survive a merge with a run that measured neither.
    old = {
        "configs": {
            "fengine_4096": dict(cfg(34.0), merged_from="session7.json"),
            "fengine_4ant_4096": dict(cfg(100.0), lowest_lossy_gbps=136.0),
        },
        "fold_1stream_threads_lossless_gbps": 81.0,
        "hand_written_gbps": 37.1,
        "figures": {"soak_fold_minutes": {"value": 9.0}},
        "ab_runs": {"s11": {"a": 1}},
        "command": [["a", "b"], "c"],  # an earlier merge's, nested as merges once did
    }
    new = {"configs": {"fengine_4ant_4096": dict(cfg(120.0), lowest_lossy_gbps=None),
                       "fengine_4096": cfg(30.0, None)},
           "command": "d",
           "figures": {"cluster_ynao_4nodes_sustained_gbps": {"value": 24.0}}}  # fmt: skip
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, d in zip(paths, (old, new), strict=True):
        path.write_text(json.dumps(d))
    out = tmp_path / "e2e.json"
    doc = e2e.main(["--merge", *map(str, paths), "--json", str(out)])
    assert doc["fold_1stream_threads_lossless_gbps"] == 81.0 and doc["hand_written_gbps"] == 37.1
    # Sections of figures written by hand: every entry of every input.
    assert set(doc["figures"]) == {"soak_fold_minutes", "cluster_ynao_4nodes_sustained_gbps"}
    assert doc["ab_runs"] == {"s11": {"a": 1}}
    assert doc["command"] == ["a", "b", "c", "d"]  # one flat list, in order
    # The later run's null does not overwrite what the earlier one knew.
    kept = doc["configs"]["fengine_4ant_4096"]
    assert (kept["lossless_gbps"], kept["lowest_lossy_gbps"]) == (120.0, 136.0)
    assert kept["kept_from_earlier"] == ["lowest_lossy_gbps"]
    assert doc["fengine_4096_lossless_gbps"] == 34.0  # confirmed beats a later unconfirmed
    assert doc["configs"]["fengine_4096"]["merged_from"] == "session7.json"
    assert doc["fengine_4ant_4096_lossless_gbps"] == 120.0  # the total of 4 antennas
    r = doc["ratios"]["fengine_4ant_4096"]
    assert r["e2e_gsps"] == pytest.approx(e2e.gsps("fengine_4ant_4096", 120.0))
    # A run (no configuration selected here) merges into an existing --json: it keeps
    # every figure the file had; --replace overwrites.
    before = json.loads(out.read_text())
    run = e2e.main(["--only", "", "--json", str(out), "--workdir", str(tmp_path / "w")])
    assert run["fengine_4ant_4096_lossless_gbps"] == 120.0 and run["hand_written_gbps"] == 37.1
    assert {k: v for k, v in before.items() if "gbps" in k and v is not None}.items() <= (
        run.items()
    )
    fresh = e2e.main(["--only", "", "--json", str(out), "--workdir", str(tmp_path / "w"),
                      "--replace"])  # fmt: skip
    assert fresh["fengine_4ant_4096_lossless_gbps"] is None


def test_four_antennas_are_one_receiver_on_four_ports_and_its_report_is_summed(tmp_path):
    from voltstream.fengine.antennas import FEngineArrayReport
    from voltstream.fengine.pipeline import FEngineReport

    a = e2e.parse_args(["--only", "fengine_4ant_4096", "--device", "cpu"])
    cpus = {"receiver": [0, 1], "capture": [2, 3, 4, 5], "sender": [15], "shared_cores": False}
    assert e2e.ports_of(e2e.CONFIGS["fengine_4ant_4096"][2]) == 4
    argv, mask, note = rx.receiver_argv(*e2e.CONFIGS["fengine_4ant_4096"], 0, "7148+3", 9,
                                        tmp_path / "r.json", a, cpus)  # fmt: skip
    assert argv[argv.index("--listen") + 1] == "127.0.0.1:7148+3"
    assert argv[argv.index("--cpus") + 1] == "2,3,4,5" and mask == {0, 1, 2, 3, 4, 5}
    assert argv[argv.index("--output") + 1] == ",".join(["/dev/null"] * 4) and note is None
    ants = [FEngineReport(f"127.0.0.1:{7148 + k}", capture=engine_stats(missing=k))
            for k in range(4)]  # fmt: skip
    report = json.loads(json.dumps(FEngineArrayReport(ants).as_dict()))
    counts = rx.receiver_counts(report)
    assert counts["received"] == 80 and counts["missing"] == 6 and counts["foreign"] == 8
    assert not rx.lossless(80, counts)
    assert rx.product_extras(report)["heaps_paired"] == 0


def test_four_antennas_on_two_capture_threads_each(tmp_path):
    """--capture-threads 2 of an F-engine: per antenna (its heaps turn by chunk), the 8
    threads pinned antenna by antenna, and the CLI takes the line."""
    from voltstream.cli import build_parser

    a = e2e.parse_args(["--only", "fengine_4ant_4096", "--device", "cpu", "--capture-threads", "2"])
    cpus = {"receiver": [0, 1], "capture": list(range(2, 10)), "sender": [15],
            "shared_cores": False}  # fmt: skip
    argv, mask, note = rx.receiver_argv(*e2e.CONFIGS["fengine_4ant_4096"], 0, "7148+3", 9,
                                        tmp_path / "r.json", a, cpus)  # fmt: skip
    assert argv[argv.index("--threads") + 1] == "8" and note is None
    assert argv[argv.index("--cpus") + 1] == "2,3,4,5,6,7,8,9" and mask == set(range(10))
    build_parser().parse_args(argv[len(rx.VS) :])


def test_capture_alone_through_the_harness_is_lossless(tmp_path, capsys):
    path = tmp_path / "e2e.json"
    args = [
        "--only",
        "capture_ynao",
        "--rates",
        "0.2",
        "--probe-seconds",
        "1.5",
        "--confirm-seconds",
        "1.5",
        "--warmup",
        "0.5",
        "--senders",
        "2",
        # Senders and receiver share the 2 cores of a CI machine: a generous silence
        # before the receiver ends.
        "--idle-timeout",
        "5",
        "--buffer-mib",
        "1",
        "--json",
        str(path),
        "--workdir",
        str(tmp_path / "w"),
    ]
    doc = e2e.main(args)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    for key in (
        "machine",
        "date",
        "command",
        "fold_ynao_capture_alone_gbps",
        "file_fold_gsps",
        "fold_vdif8_lossless_gbps",
        "fold_vdif2_lossless_gbps",
        "fengine_4096_lossless_gbps",
        "fengine_32768_lossless_gbps",
        "fengine_two_processes_lossless_gbps",
        "skipped",
    ):
        assert key in doc, key
    assert doc["fold_ynao_lossless_gbps"] is None and "fold_ynao" in doc["skipped"]
    res = doc["configs"]["capture_ynao"]
    assert [p["asked_gbps"] for p in res["points"]] == [0.2, 0.2]  # probe, confirmation
    for p in res["points"]:
        assert p["error"] is None, p
        assert p["lossless"] and p["sent"] == p["received"] > 1000, p
        for key in rx.ALL_COUNTERS[1:]:
            assert p[key] == 0, (key, p)
        # The rate the senders reached is the bench's to report: on a loaded 2-core host
        # they offered 0.12 of the 0.2 asked. Never more than asked, and counted whole.
        assert 0 < p["offered_gbps"] < 0.25 and sum(s["sent"] for s in p["senders"]) == p["sent"]
        assert p["receivers"][0]["engine"] in ("socket", "packet_ring")
    assert res["confirmed_seconds"] > 1.0
    assert doc["capture_ynao_lossless_gbps"] == doc["fold_ynao_capture_alone_gbps"]
    assert 0.15 < doc["capture_ynao_lossless_gbps"] < 0.25
    out = capsys.readouterr().out
    assert out.count("-> LOSSLESS") == 2 and "| capture_ynao | 0.2 |" in out


def test_a_point_says_how_often_the_consumer_held_the_capture_loop():
    """A fold that drops whole chunks lost them to a stall of its stage: each point
    keeps the stage's slow chunks from the report's histogram, wherever it is nested."""
    from voltstream.capture.stage_times import StageTimes

    times = StageTimes()
    for seconds in [2e-4] * 50 + [0.02, 0.02, 0.25]:
        times.observe(seconds)
    report = {"capture": {"totals": {}, "stage_seconds": {"consumer": times.as_dict()}}}
    got = rx.product_extras(json.loads(json.dumps(report)))
    assert got["consumer_chunks"] == 53 and got["consumer_over_10ms"] == 3
    assert got["consumer_over_100ms"] == 1 and got["consumer_slowest_at_most_s"] == 0.3
    assert rx.consumer_stalls({"stage_seconds": {}}) == {}


def test_the_filterbank_receiver_is_a_command_line_the_cli_takes(tmp_path):
    """filterbank_ynao's receiver: `voltstream filterbank --listen ... --device gpu`, its
    output on tmpfs, pinned capture threads; the CLI's own parser takes every flag."""
    from voltstream.cli.parser import build_parser

    a = e2e.parse_args(["--only", "filterbank_ynao", "--device", "gpu", "--packets-per-chunk",
                        "512", "--filterbank-args", "--nbits 8"])  # fmt: skip
    cpus = {"receiver": [0, 1], "capture": [2, 3], "sender": [15], "shared_cores": False}
    report = tmp_path / "p-0.json"
    argv, mask, note = rx.receiver_argv(*e2e.CONFIGS["filterbank_ynao"], 0, 7150, 9, report,
                                        a, cpus)  # fmt: skip
    assert argv[: len(rx.VS) + 1] == [*rx.VS, "filterbank"] and note is None
    args = build_parser().parse_args(argv[len(rx.VS) :])
    assert (args.listen, args.device, args.format) == ("127.0.0.1:7150", "gpu", "ynao")
    assert (args.fine_channels, args.tsamp, args.nbits) == (64, 0.000256, 8)
    assert args.packets_per_chunk == 512 and args.cpus == [2] and mask == {0, 1, 2}
    assert args.output == str(rx.filterbank_output(report)) and args.report == str(report)
    assert args.output.startswith("/dev/shm/") or not Path("/dev/shm").is_dir()
    assert e2e.WARMUP["filterbank"] > 0 and e2e.PRODUCT_BASELINE["filterbank_ynao"] == "fold_ynao"


def test_the_filterbank_is_rated_against_the_live_fold_of_the_same_run(tmp_path):
    def cfg(g):
        return {"lossless_gbps": g, "confirmed_seconds": 20.0, "receiver_cpu": [1.0],
                "notes": [], "errors": []}  # fmt: skip

    part = {"configs": {"fold_ynao": cfg(20.0), "filterbank_ynao": cfg(19.0),
                        "capture_ynao": cfg(40.0)}}  # fmt: skip
    path = tmp_path / "part.json"
    path.write_text(json.dumps(part))
    doc = e2e.main(["--merge", str(path), "--json", str(tmp_path / "e2e.json")])
    assert doc["filterbank_ynao_vs_fold_ratio"] == pytest.approx(0.95)
    assert doc["filterbank_ynao_capture_alone_gbps"] == 40.0
    assert doc["ratios"]["filterbank_ynao"]["gpu_alone_gsps"] is None


def test_four_thread_real_vdif_capture_through_the_harness_is_lossless(tmp_path):
    """capture_vdif4real at a tiny rate: the 4-thread traffic (vdif2real4t) restamped
    and sent as the capture's format options say (--vdif-threads 0,1,2,3 --npol 1),
    every frame placed; fold_vdif4real's baseline is this configuration."""
    assert e2e.CAPTURE_ALONE["fold_vdif4real"] == "capture_vdif4real"
    assert e2e.CONFIGS["fold_vdif4real"][:2] == ("fold", "vdif2real4t")
    path = tmp_path / "e2e.json"
    doc = e2e.main(["--only", "capture_vdif4real", "--rates", "0.2", "--probe-seconds", "1.5",
                    "--confirm-seconds", "1.5", "--warmup", "0.5", "--senders", "2",
                    "--idle-timeout", "5", "--buffer-mib", "1", "--json", str(path),
                    "--workdir", str(tmp_path / "w")])  # fmt: skip
    res = doc["configs"]["capture_vdif4real"]
    argv = res["points"][0]["receiver_argv"][0]
    assert "--vdif-threads 0,1,2,3 --npol 1" in argv and "--nchan 1" in argv, argv
    for p in res["points"]:
        assert p["error"] is None, p
        assert p["lossless"] and p["sent"] == p["received"] > 1000, p
        for key in rx.ALL_COUNTERS[1:]:
            assert p[key] == 0, (key, p)
    assert 0.15 < doc["capture_vdif4real_lossless_gbps"] < 0.25


def test_a_ring_capture_is_ready_at_its_capture_line_not_its_trigger_server(tmp_path):
    """`capture --ring-seconds` logs its trigger server's "listening on" before its
    capture has opened: the harness must wait for the capture's own line, or the
    senders start while the port drops what it gets."""
    from cli_process import run_cli

    port = rx.free_port()
    r = run_cli("capture", "--format", "ynao", "--listen", f"127.0.0.1:{port}",
                "--duration", "1", "--idle-timeout", "1", "--ring-seconds", "0.05",
                "--trigger-listen", "127.0.0.1:0", "--dump-dir", str(tmp_path))  # fmt: skip
    lines = r.stderr.splitlines()
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("capture: listening on"))
    assert any(ln.startswith("triggers: listening on") for ln in lines[:cut]), lines
    assert not rx.capture_started("\n".join(lines[:cut]))
    assert rx.capture_started("\n".join(lines[: cut + 1]))


def dump_run(tmp_path, *more):
    """dump_ynao at 0.2 Gb/s for 3 s points; its ring and window in seconds of data."""
    return e2e.main(["--only", "dump_ynao", "--rates", "0.2", "--probe-seconds", "3",
                     "--warmup", "0.5", "--senders", "2", "--idle-timeout", "3",
                     "--buffer-mib", "1", "--capture-args", "--window 4",
                     "--json", str(tmp_path / "e2e.json"), "--workdir", str(tmp_path / "w"),
                     "--dump-tmp", str(tmp_path / "d"), "--search-json",
                     str(tmp_path / "search.json"), *more])  # fmt: skip


def test_a_dump_point_is_lossless_with_its_dump_written_whole(tmp_path):
    """A real capture with its voltage ring at a toy rate: one trigger a point for 1 s
    of the data (0.2 Gb/s / 4.108 Gb/s of YNAO's stream clock), answered 202 while the
    senders ran, the dump written with every sample of the window and nothing lost; the
    figure, with date, command and machine, merged into the search results. The dump is
    written before the senders stopped: the writer read it all out while they sent."""
    old = {"figures": {"headroom_ynao_gpu": {"value": 3.7, "date": "d", "command": "c",
                                            "machine": {}}}, "runs": [{"x": 1}]}  # fmt: skip
    (tmp_path / "search.json").write_text(json.dumps(old))
    doc = dump_run(tmp_path, "--confirm-seconds", "3")
    res = doc["configs"]["dump_ynao"]
    want = round(0.2 / (8216 * 8 / 16_000) * 1e6) * 4  # whole microseconds of 0.25 us
    assert len(res["points"]) == 2
    for p in res["points"]:
        d = p["dump"]
        assert p["error"] is None and p["capture_lossless"] and p["lossless"], p
        assert "--ring-seconds" in p["receiver_argv"][0] and "--window 4" in p["receiver_argv"][0]
        assert d["status"] == 202 and d["ok"] and d["why_not"] == [], d
        assert d["expected_samples"] == want
        assert d["report"]["state"] == "written" and d["report"]["samples"] == want
        assert d["report"]["lost_samples"] == 0 and not d["report"]["partial"]
        assert d["trigger"]["end"] - d["trigger"]["start"] == pytest.approx(want * 0.25e-6)
        assert d["file_bytes"] == 4096 + want * 128  # the header and every sample
        assert 0 < d["posted_s"] < d["answered_s"] < p["seconds"]
        assert 0 < d["posted_s"] + d["post_to_written_ms"] / 1e3 < p["seconds"]  # written in time
        assert d["seconds_of_data_offered"] == pytest.approx(1.0, rel=0.05)
    assert not list((tmp_path / "d").iterdir())  # each point's dumps removed after it
    assert 0.15 < doc["dump_1s_lossless_gbps"] == doc["dump_ynao_lossless_gbps"] < 0.25
    assert doc["dump_vs_capture_ratio"] is None  # no capture_ynao in this run
    s = json.loads((tmp_path / "search.json").read_text())
    fig = s["figures"]["dump_1s_lossless_gbps"]
    assert fig["value"] == doc["dump_1s_lossless_gbps"] and fig["date"] == doc["date"]
    assert fig["command"] == doc["command"] and fig["machine"]["cores"]
    assert s["figures"]["headroom_ynao_gpu"]["value"] == 3.7 and len(s["runs"]) == 2
    assert "dump_vs_capture_ratio" not in s["figures"]  # a null replaces nothing


def test_a_dump_point_whose_trigger_is_refused_is_not_lossless(tmp_path):
    """A ring of 0.4 s of the data cannot hold a 1 s window: the trigger is answered
    410 (gone) although the capture lost nothing, and the point is not lossless."""
    (tmp_path / "search.json").write_text(json.dumps({"figures": {"dump_1s_lossless_gbps": {
        "value": 31.0, "date": "d", "command": "c", "machine": {}}}}))  # fmt: skip
    doc = dump_run(tmp_path, "--confirm-seconds", "0", "--dump-ring-seconds", "0.4")
    (p,) = doc["configs"]["dump_ynao"]["points"]
    d = p["dump"]
    assert p["error"] is None and p["capture_lossless"] and p["lost"] == 0, p
    assert d["status"] == 410 and "before the oldest sample" in d["answer"]["error"], d
    assert not d["ok"] and not p["lossless"] and d["report"] is None
    assert doc["dump_ynao_lossless_gbps"] is None and doc["dump_1s_lossless_gbps"] is None
    assert "no lossless point" in doc["configs"]["dump_ynao"]["notes"]
    s = json.loads((tmp_path / "search.json").read_text())
    assert s["figures"]["dump_1s_lossless_gbps"]["value"] == 31.0  # not replaced by a null


def test_dump_figures_need_a_confirmed_1s_dump_and_divide_by_capture_of_the_run():
    def cfg(g, secs=1.0):
        points = [{"dump": {"seconds_of_data": secs}}]
        return {"lossless_gbps": g, "confirmed_seconds": 10.0, "receiver_cpu": [1.0],
                "notes": [], "errors": [], "points": points}  # fmt: skip

    doc = e2e.finalize({"configs": {"dump_ynao": cfg(30.0), "capture_ynao": cfg(40.0)}})
    assert doc["dump_1s_lossless_gbps"] == 30.0 and doc["dump_vs_capture_ratio"] == 0.75
    doc = e2e.finalize({"configs": {"dump_ynao": cfg(30.0, 0.5), "capture_ynao": cfg(40.0)}})
    assert doc["dump_ynao_lossless_gbps"] == 30.0 and doc["dump_1s_lossless_gbps"] is None
