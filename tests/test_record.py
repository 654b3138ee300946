"""Recording a real loopback capture to several directories: every chunk lands
whole in its numbered file, and the report accounts for every chunk."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from voltstream import _core
from voltstream.capture.config import CaptureSettings
from voltstream.errors import CaptureError, ConfigError
from voltstream.streams import parse_stream

LEN = 1024
PER_CHUNK = 16
STREAMS = 2


def packet(i: int, s: int) -> bytes:
    payload = ((np.arange(LEN) * 7 + i * 131 + s) % 256).astype(np.uint8).tobytes()
    return i.to_bytes(8, "big") + s.to_bytes(2, "big") + payload


def open_capture(whole_packets: bool = True) -> _core.Capture:
    stream = parse_stream({"format": "counter", "streams": STREAMS, "payload_len": LEN})
    settings = CaptureSettings.of(
        "127.0.0.1:0",
        engine="socket",
        packets_per_chunk=PER_CHUNK,
        nchunks=64,
        whole_packets=whole_packets,
    )
    return settings.open(stream)


def test_a_recorded_capture_is_every_chunk_in_numbered_files(tmp_path):
    disks = [tmp_path / "d0", tmp_path / "d1"]
    for d in disks:
        d.mkdir()
    cap = open_capture()
    cap.start()
    rec = _core.Recorder(cap, [str(d) for d in disks], "scan_a", queue_chunks=64)
    host, port = cap.address.rsplit(":", 1)
    nchunks = 12
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for i in range(nchunks * PER_CHUNK):
            for s in range(STREAMS):
                tx.sendto(packet(i, s), (host, int(port)))
    deadline = time.monotonic() + 10
    while cap.stats()["totals"]["received"] < nchunks * PER_CHUNK * STREAMS:
        assert time.monotonic() < deadline, cap.stats()["totals"]
        time.sleep(0.01)
    cap.stop()
    report = rec.finish()
    assert report["chunks_written"] == nchunks and report["chunks_unwritten"] == 0
    assert report["chunks_lost"] == 0
    assert report["bytes_written"] == nchunks * PER_CHUNK * STREAMS * (LEN + 10)
    files = sorted((int(p.name.split(".")[-1]), p) for d in disks for p in (d / "scan_a").iterdir())
    assert [n for n, _ in files] == list(range(nchunks))
    for n, path in files:  # whole packets, as received
        data = np.frombuffer(path.read_bytes(), np.uint8).reshape(STREAMS, PER_CHUNK, LEN + 10)
        for s in range(STREAMS):
            for k in range(PER_CHUNK):
                assert data[s, k].tobytes() == packet(n * PER_CHUNK + k, s)
    assert all(w["chunks"] > 0 and w["failed"] is None for w in report["writers"])
    assert rec.finish() == report  # idempotent


def test_the_recorder_refuses_what_it_cannot_do(tmp_path):
    cap = open_capture()
    with pytest.raises(CaptureError, match="not started"):
        _core.Recorder(cap, [str(tmp_path)], "s")
    cap.start()
    try:
        with pytest.raises(ConfigError, match="scan name"):
            _core.Recorder(cap, [str(tmp_path)], "a/b")
        (tmp_path / "taken").mkdir()
        with pytest.raises(OSError, match="cannot create the scan folder"):
            _core.Recorder(cap, [str(tmp_path)], "taken")
        with pytest.raises(ConfigError, match="at least one directory"):
            _core.Recorder(cap, [], "s")
        with pytest.raises(ConfigError, match="dada layout needs a capture with whole_packets"):
            _core.Recorder(cap, [str(tmp_path)], "s", layout="dada")
        with pytest.raises(ConfigError, match='layout "tar"'):
            _core.Recorder(cap, [str(tmp_path)], "s", layout="tar")
    finally:
        cap.stop()
    with pytest.raises(ConfigError, match="whole packets in chunks need packets of one length"):
        CaptureSettings.of("127.0.0.1:0", whole_packets=True).open(
            parse_stream({"format": "spead-dig", "digitiser_ids": [0, 1]})
        )
    assert not (Path(tmp_path) / "s").exists()


def test_repair_cuts_files_to_whole_packets_and_rewrites_headers_and_manifest(tmp_path):
    """What a crash leaves, made by hand: each file ends inside a packet or block."""
    import json
    import struct

    from voltstream.record import Manifest, repair

    d = tmp_path / "d0"
    (d / "s").mkdir(parents=True)
    slot = 100
    head = b"HDR_SIZE 4096\nFILE_SIZE 1000\nFILE_NUMBER 0\nOBS_OFFSET 0\n".ljust(4096, b"\0")
    (d / "s" / "s_s00_0000000000000000.dada").write_bytes(head + bytes(range(250)))
    (d / "s" / "s_s00_0000000000000250.dada").write_bytes(head + bytes(300))
    Manifest([d], "s", {"layout": "dada", "packet_len": slot}).write({"record": {}})
    done = repair([d], "s")
    assert done["files"] == 2 and len(done["truncated"]) == 1 and len(done["headers"]) == 2
    first = (d / "s" / "s_s00_0000000000000000.dada").read_bytes()
    assert len(first) == 4096 + 200 and first[4096:] == bytes(range(200))
    assert b"FILE_SIZE 200\n" in first[:4096] and len(first[:4096].rstrip(b"\0")) < 4096
    manifest = json.loads((d / "s.manifest.json").read_text())
    assert manifest["repaired"] and [f["bytes"] for f in manifest["files"]] == [200, 300]

    # Mark6: a whole block, then a block cut short by the crash.
    m = tmp_path / "m0"
    m.mkdir()
    block = struct.pack("<ii", 0, 8 + 64) + bytes(64)
    cut = struct.pack("<ii", 1, 8 + 64) + bytes(10)
    (m / "k").write_bytes(struct.pack("<Iiiii", 0xFEED6666, 2, 72, 2, 16) + block + cut)
    done = repair([m], "k")
    assert done["layout"] == "mark6" and done["files"] == 1 and done["truncated"]
    assert (m / "k").stat().st_size == 20 + len(block)

    # vbs: a chunk being written is a .partial file; it goes, the whole ones stay.
    v = tmp_path / "v0"
    (v / "c").mkdir(parents=True)
    (v / "c" / "c.00000000").write_bytes(bytes(64))
    (v / "c" / "c.partial").write_bytes(bytes(10))
    done = repair([v], "c")
    assert done["layout"] == "vbs" and done["files"] == 1 and len(done["removed"]) == 1
    assert sorted(p.name for p in (v / "c").iterdir()) == ["c.00000000"]
    with pytest.raises(ConfigError, match="no scan 'nothing'"):
        repair([v], "nothing")


def test_record_settings_come_from_the_command_line_or_a_pipeline_file_with_one_default_each(
    tmp_path,
):
    from voltstream.cli import build_parser
    from voltstream.cli.common import record_settings
    from voltstream.cli.run_file import verb_args
    from voltstream.pipeline_file import parse_pipeline
    from voltstream.record import RecordSettings

    disk = str(tmp_path)
    line = ["record", "--format", "vdif", "--listen", "127.0.0.1:7148", "--dirs", disk]
    bare = build_parser().parse_args([*line, "--scan", "s1"])
    assert record_settings(vars(bare)) == RecordSettings((disk,), "s1")
    text = f'[network]\nbind = "127.0.0.1:7148"\n\n[record]\ndirs = ["{disk}"]\nscan = "s1"\n'
    assert record_settings(vars(verb_args(parse_pipeline(text)))) == RecordSettings([disk], "s1")
    given = ["--scan", "s2", "--layout", "dada", "--file-size", "4096", "--source", "B1933+16",
             "--queue-chunks", "5"]  # fmt: skip
    s = record_settings(vars(build_parser().parse_args([*line, *given])))
    assert s == RecordSettings((disk,), "s2", "dada", 4096, "B1933+16", 5)
    for bad, message in (
        (dict(dirs=()), "give --dirs"),
        (dict(layout="tar"), "--layout 'tar'"),
        (dict(file_size=0), "--file-size must be positive"),
        (dict(queue_chunks=0), "--queue-chunks must be at least 1"),
    ):
        with pytest.raises(ConfigError, match=message):
            RecordSettings(**{"dirs": (disk,), "scan": "s", **bad})
