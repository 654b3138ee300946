"""`--metrics HOST:PORT`: a real loopback capture scraped over HTTP (Prometheus text,
parsed by prometheus_client's parser) while packets arrive; its counters rise, and
they end equal to the run's report."""

from __future__ import annotations

import json
import re
import socket
import struct
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cli_process import run_cli
from live_capture import PPC, LiveCapture, packets
from loopback import free_bind, sender
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.ops.board import RunStatus
from voltstream.ops.counters import run_samples, samples
from voltstream.ops.server import MetricsServer, RunCollector
from voltstream.streams import parse_stream

RECEIVED = ("voltstream_capture_packets_total", (("kind", "received"),))
DATAGRAMS = ("voltstream_capture_datagrams_total", ())


def _stream_key(kind: str, stream: int) -> tuple[str, tuple]:
    labels = {"kind": kind, "label": f"stream {stream}", "stream": str(stream)}
    return "voltstream_stream_packets_total", tuple(sorted(labels.items()))


def test_cli_capture_metrics_rise_while_packets_come_and_end_at_the_report(tmp_path):
    run = LiveCapture(tmp_path)
    try:
        # 20 chunks, packet 37 of stream 1 never sent, packet 3 of stream 0 again once its
        # chunk has left the reorder window (late).
        first = packets(0, 20 * PPC, skip={(37, 1)})
        run.send(first + packets(3, 4, skip={(3, 1)}))
        a = run.scrape_when_received(len(first))
        run.send(packets(20 * PPC, 40 * PPC))
        b = run.scrape_when_received(len(first) + 40 * PPC)
        report = run.finish()
    finally:
        run.kill()
    for name in ("voltstream_capture_bytes_total", "voltstream_capture_datagrams_total"):
        assert b[(name, ())] > a[(name, ())] > 0
    assert b[_stream_key("received", 0)] > a[_stream_key("received", 0)]
    assert b[_stream_key("missing", 1)] == 1 and b[_stream_key("late", 0)] == 1
    # The last scrape (all packets in) equals what the run reported at its end.
    for i, s in enumerate(report["streams"]):
        for kind in ("received", "missing", "late", "duplicate", "invalid", "dropped"):
            assert b[_stream_key(kind, i)] == s[kind], (kind, i)
    for kind, n in report["totals"].items():
        assert b[("voltstream_capture_packets_total", (("kind", kind),))] == n, kind
    engine = report["engine"]
    assert b[("voltstream_capture_bytes_total", ())] == engine["totals"]["bytes"]
    assert b[("voltstream_capture_datagrams_total", ())] == engine["packets"]
    assert b[("voltstream_capture_kernel_drops_total", ())] == engine["kernel_drops"]
    th = engine["threads"][0]
    thread = (("cpu", ""), ("kind", "received"), ("thread", "0"))
    assert b[("voltstream_thread_packets_total", thread)] == th["totals"]["received"]
    assert (
        0 <= b[("voltstream_capture_free_chunks", ())] <= b[("voltstream_capture_pool_chunks", ())]
    )
    info = [k for k in b if k[0] == "voltstream_run_info"]
    assert info and ("verb", "capture") in info[0][1]


def test_cli_record_metrics_count_the_chunks_written_as_they_are_written(tmp_path):
    disk = tmp_path / "d0"
    disk.mkdir()
    verb = ("record", "--dirs", str(disk), "--scan", "s1", "--layout", "vbs")
    run = LiveCapture(tmp_path, verb=verb)
    try:
        # Every datagram taken in: a chunk no disk had room for is dropped, not received.
        run.send(packets(0, 20 * PPC))
        a = run.scrape_when(DATAGRAMS, 2 * 20 * PPC)
        run.send(packets(20 * PPC, 60 * PPC))
        b = run.scrape_when(DATAGRAMS, 2 * 60 * PPC)
        report = run.finish()
    finally:
        run.kill()
    written = ("voltstream_record_chunks_total", (("state", "written"),))
    assert b[written] > a[written] > 0
    disk_bytes = ("voltstream_record_writer_bytes_total", (("dir", str(disk)),))
    assert b[disk_bytes] > a[disk_bytes]
    # Every chunk left the reorder window (and was written) but the last few, which
    # the end of the run flushes: the report has at least what the last scrape had.
    assert report["record"]["chunks_written"] >= b[written]
    dropped = ("voltstream_capture_packets_total", (("kind", "dropped"),))
    assert b[RECEIVED] + b[dropped] == 2 * 60 * PPC
    totals = report["capture"]["totals"]
    assert totals["received"] + totals["dropped"] == 2 * 60 * PPC
    assert ("verb", "record") in next(k for k in b if k[0] == "voltstream_run_info")[1]


def test_metrics_after_a_run_are_its_report_exactly(tmp_path):
    """In the library: once run_capture returns, a scrape is the final report, every
    sample (chunks, consumer, host counters included), and /status.json is the report."""
    stream = parse_stream({"format": "counter", "streams": 2, "payload_len": 64})
    board = RunStatus("capture", {"listen": "test"})
    server = MetricsServer(board, "127.0.0.1:0")
    bind = free_bind()
    try:
        report = run_capture(
            stream, CaptureSettings.of(bind, packets_per_chunk=PPC, window=4), 30,
            idle_timeout_s=0.5,
            on_start=sender(bind, packets(0, 10 * PPC, skip={(5, 0)})),
            live_report=board.watch,
        )  # fmt: skip
        with urllib.request.urlopen(f"http://{server.address}/metrics") as r:
            text = r.read().decode()
        with urllib.request.urlopen(f"http://{server.address}/status.json") as r:
            status = json.load(r)
    finally:
        server.close()
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    expected = samples(report.as_dict())
    assert len(expected) > 40
    for s in expected:
        labels = tuple(sorted(s.labels.items()))
        if s.kind == "histogram":
            assert scraped[(s.name + "_sum", labels)] == s.value, s
            assert scraped[(s.name + "_count", labels)] == s.count, s
            le_inf = tuple(sorted({**s.labels, "le": "+Inf"}.items()))
            assert scraped[(s.name + "_bucket", le_inf)] == s.count > 0, s
            continue
        assert scraped[(s.name, labels)] == s.value, s
    assert status["report"] == json.loads(json.dumps(report.as_dict()))
    assert status["verb"] == "capture" and status["config"] == {"listen": "test"}
    assert scraped[_stream_key("missing", 0)] == 1 == report.totals["missing"]


def _families(report: dict) -> dict:
    board = RunStatus("x")
    board.watch(lambda: report)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(board))
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


RECORD_REPORT = {
    "scan": "s1", "duration_s": 1.0,
    "capture": {"streams": [{"stream": 0, "received": 5, "missing": 1}], "packets": 6,
                "totals": {"received": 5, "bytes": 40},
                "xdp": {"mode": "skb", "rx_dropped": 2}, "dpdk": {"imissed": 3}},
    "record": {"chunks_written": 3, "chunks_unwritten": 1, "chunks_lost": 0,
               "bytes_written": 4096, "filled_packets": 1,
               "writers": [{"dir": "/d0", "chunks": 3, "bytes": 4096, "lost_chunks": 0,
                            "failed": None}]},
    "free_chunks": 7, "pool_chunks": 8,
}  # fmt: skip


def test_record_fengine_and_replay_reports_become_metrics_named_by_the_conventions():
    fams = _families(RECORD_REPORT)
    chunks = {s.labels["state"]: s.value for s in fams["voltstream_record_chunks"].samples}
    assert chunks == {"written": 3, "unwritten": 1, "lost": 0}
    assert fams["voltstream_capture_ring_fill_ratio"].samples[0].value == 1 - 7 / 8
    assert [(s.labels, s.value) for s in fams["voltstream_capture_xdp"].samples] == [
        ({"kind": "rx_dropped"}, 2)
    ]
    assert fams["voltstream_capture_dpdk"].samples[0].value == 3
    fengine = {"heaps_paired": 9, "heaps_unpaired": [1, 2], "capture": {"streams": []},
               "engine": {"gpu_busy_s": 0.5, "saturated": [3, 4]},
               "output": {"bytes_sent": 100, "heaps_per_destination": [5, 6]}}  # fmt: skip
    fams = _families(fengine)
    busy = fams["voltstream_fengine_engine_gpu_busy_seconds"]
    assert busy.type == "counter" and busy.samples[0].value == 0.5
    per_dest = fams["voltstream_fengine_output_heaps_per_destination"].samples
    assert [(s.labels["dest"], s.value) for s in per_dest] == [("0", 5), ("1", 6)]
    replay = {"dest": "x:1", "packets": 10, "bytes": 80, "late_s": 0.001, "fill_frames": 2}
    fams = _families(replay)
    assert fams["voltstream_replay_packets"].samples[0].value == 10
    assert fams["voltstream_replay_source_fill_frames"].samples[0].value == 2
    for report in (RECORD_REPORT, fengine, replay):
        for name, fam in _families(report).items():
            assert name.startswith("voltstream_"), name
            assert fam.type in ("counter", "gauge", "info"), name
            if fam.type == "counter":
                assert all(s.name.endswith("_total") for s in fam.samples), name


def test_a_bad_metrics_address_is_a_clear_error():
    r = run_cli("capture", "--listen", free_bind(), "--duration", "1", "--metrics", "nowhere")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = run_cli("capture", "--listen", free_bind(), "--duration", "1",
                    "--metrics", f"127.0.0.1:{port}")  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "cannot serve there" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("path", ["/", "/nothing"])
def test_other_paths_say_where_the_metrics_are(path):
    server = MetricsServer(RunStatus("capture"), "127.0.0.1:0")
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://{server.address}{path}")
        assert e.value.code == 404 and b"/metrics" in e.value.read()
    finally:
        server.close()


def test_counter_packets_are_the_format_the_capture_parses():
    # The helper's packets: the counter header (index, stream) as test_capture.py sends.
    assert packets(7, 8)[1][:10] == struct.pack(">QH", 7, 1)


ROOT = Path(__file__).resolve().parents[1]

GPU_FOLD = {"blocks": 1, "gaps": 0, "samples_fed": 1, "bytes_fed": 1, "lost_samples": 0,
            "copies_in_flight": 1, "max_copies_in_flight": 2, "registered_bytes": 1,
            "gpu_busy_ms": 1.0, "gpu_busy_pct": 50.0, "host_wait_s": 0.1}  # fmt: skip


#: A cluster merger's status (cluster/merger.py `Merger.status`), its numbers only.
CLUSTER_STATUS = {"rows_written": 3, "rows_complete": 2, "late": 1, "duplicate": 0,
                  "malformed": 0, "merge_latency_s": {"p50": 0.1, "max": 0.2}}  # fmt: skip
CLUSTER_NODE = {"rows_received": 2, "rows_missing": 1, "restarts": 1, "last_row": 2}


def test_cluster_metrics_carry_each_node_and_the_merger():
    report = {"engine": {"streams": [{"stream": 0, "received": 7, "missing": 1}],
                         "totals": {"received": 7, "missing": 1}}, "streams": []}  # fmt: skip
    status = CLUSTER_STATUS | {"nodes": {
        "node0": CLUSTER_NODE | {"counters": {"capture": report}},
        "node1": CLUSTER_NODE | {"rows_missing": 0, "counters": {}},
    }}  # fmt: skip
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for s in samples({"cluster": status})}  # fmt: skip
    assert got[("voltstream_cluster_rows_written_total", ())] == 3
    assert got[("voltstream_cluster_merge_latency_seconds", ())] == 0.1
    assert got[("voltstream_cluster_node_rows_missing_total", (("node", "node0"),))] == 1
    assert got[("voltstream_cluster_node_rows_missing_total", (("node", "node1"),))] == 0
    key = ("voltstream_capture_packets_total", (("kind", "missing"), ("node", "node0")))
    assert got[key] == 1  # the node's own capture counters, labelled by node
    assert not any(dict(k[1]).get("node") == "node1" and k[0].startswith("voltstream_capture")
                   for k in got)  # fmt: skip


#: capture --ring-seconds: the report's dumps section (record/dumps.py Dumps.as_dict).
DUMPS = {"triggers": 6, "dumps": 2, "partial": 1, "refused_gone": 1, "refused_not_yet": 1,
         "malformed": 1, "busy": 1, "written": 2, "failed": 0, "samples": 10,
         "lost_samples": 0, "ring": {"bytes": 1 << 20}, "list": [],
         "candidates": {"threshold": 10.0, "candidates": 5, "below_threshold": 2,
                        "triggers": 3, "waited": 1, "expired": 0, "at_end": 1, "dumped": 2,
                        "refused_gone": 1, "refused_not_yet": 0, "malformed": 0, "busy": 0,
                        "failed": 0, "waiting": 0, "list": []}}  # fmt: skip


#: search --listen's report section (pipeline/stream_search.py counters()).
SEARCH = {"samples": 10, "lost_samples": 0, "searched_samples": 8, "gulps": 1, "giants": 3,
          "n_candidates": 1, "search_seconds": 0.1, "seconds_behind_max": 0.2,
          "latency_p50_s": 0.5, "latency_p99_s": 0.9, "latency_max_s": 0.9}  # fmt: skip


def _names_of_every_section() -> set[str]:
    """Exposed metric names of a real capture run's report (every capture section, a GPU stage
    added) and of the record, F-engine and replay report shapes."""
    stream = parse_stream({"format": "counter", "streams": 1, "payload_len": 16})
    bind = free_bind()
    report = run_capture(
        stream, CaptureSettings.of(bind, packets_per_chunk=4), 30, idle_timeout_s=0.3,
        on_start=sender(bind, [struct.pack(">QH", i, 0) + bytes(16) for i in range(8)]),
    ).as_dict()  # fmt: skip
    report |= {"pipeline": GPU_FOLD, "free_chunks": 1, "pool_chunks": 2, "dumps": DUMPS,
               "search": SEARCH}  # fmt: skip
    fengine = {"heaps_paired": 1, "heaps_unpaired": [0, 0], "copies_in_flight": 0,
               "engine": {"gpu_busy_s": 1.0}, "output": {"bytes_sent": 1}}  # fmt: skip
    replay = {"dest": "x:1", "packets": 1, "bytes": 1, "loops_done": 1, "late_s": 0.0}
    cluster = {"cluster": CLUSTER_STATUS | {"nodes": {"node0": CLUSTER_NODE | {
        "counters": {"capture": report}}}}}  # fmt: skip
    board = RunStatus("capture", {"listen": bind})
    every = [*run_samples(board.status())]
    for r in (report, RECORD_REPORT, fengine, replay, cluster):
        every += samples(r)
    return {s.name + ("_info" if s.kind == "info" else "") for s in every}  # as exposed


def test_the_docs_list_every_metric_and_the_dashboard_uses_only_real_ones():
    names = _names_of_every_section()
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc[doc.index("## Metrics and status") :]
    generic = re.findall(r"`(voltstream_\w+_)<counter>_total`", section)
    undocumented = [
        n for n in names
        if f"`{n}`" not in section and not any(n.startswith(g) for g in generic)
    ]  # fmt: skip
    assert not undocumented, undocumented
    dashboard = json.loads((ROOT / "docs" / "grafana" / "voltstream.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"voltstream_\w+", target["expr"])
    }
    assert used and not used - names, used - names
    assert len(dashboard["panels"]) >= 10
