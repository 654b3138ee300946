"""A recording ends where the stream ended: `voltstream record` over loopback of a
stream whose length is not a whole number of chunks, read back (every layout) and
replayed: no fill after the last packet that arrived, and replay sends exactly the
packets recorded. In the vdif layout it also begins where the stream began: no fill
frame before the first frame that arrived, though the stream began mid-chunk."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

import test_record_cli as rc
from cli_process import run_cli
from loopback import free_bind
from test_record_cli import dada_keys, files, finish, start_record
from voltstream.io.inspect import bound_socket, receive
from voltstream.io.vdif import decode_headers
from voltstream.sim.packetize import packetize_vdif

FPS, SPF, NCHAN = 1000, 32, 8  # frames of 32 samples x 8 channels, 8-bit complex
FRAME_LEN = 32 + SPF * NCHAN * 2
THREADS = [0, 1, 2, 3]
NFRAMES = 75  # per thread: 2 chunks of 32 and 11 frames


def _scan_file(path: Path) -> np.ndarray:
    """NFRAMES frames of each of 4 threads, time-major, as a station sends them."""
    rng = np.random.default_rng(7)
    x = rng.normal(0, 20, (NFRAMES * SPF, NCHAN, 4, 2)).astype(np.float32)
    frames = packetize_vdif(x[..., 0] + 1j * x[..., 1], frames_per_second=FPS,
                            samples_per_frame=SPF, start_seconds=1000, start_frame=990,
                            ref_epoch=48, station=0x4142, threads=THREADS)  # fmt: skip
    frames.tofile(path)
    return frames


def _record_replayed(tmp_path: Path, dirs: list[Path], scan: str, source: Path, *args: str,
                     packet_len: int | None = None) -> dict:  # fmt: skip
    """Records what `replay FILE` sends over loopback; the run's report."""
    bind = free_bind()
    report = tmp_path / f"{scan}.json"
    proc = start_record(bind, dirs, scan, "--duration", "60", "--report", str(report), *args)
    length = ("--packet-len", str(packet_len)) if packet_len else ()
    sent = run_cli("replay", str(source), "--dest", bind, "--rate", "0.05", *length)
    assert sent.returncode == 0, sent.stderr
    finish(proc)
    r = json.loads(report.read_text())
    assert r["capture"]["totals"]["missing"] == 0 and r["record"]["chunks_unwritten"] == 0
    return r


@pytest.mark.parametrize("layout", ["vdif", "vbs", "mark6"])
def test_a_four_thread_vdif_scan_ends_with_its_last_frame_in_every_layout(tmp_path, disks, layout):
    sent = _scan_file(tmp_path / "sent.vdif")
    toml = tmp_path / "four.toml"
    toml.write_text(f'format = "vdif"\nthreads = {THREADS}\nframe_len = {FRAME_LEN}\n'
                    f"frames_per_second = {FPS}\n")  # fmt: skip
    r = _record_replayed(tmp_path, disks, "v4", tmp_path / "sent.vdif", "--stream", str(toml),
                         "--layout", layout, "--packets-per-chunk", "32")  # fmt: skip
    assert r["capture"]["totals"]["received"] == len(sent)
    # Chunks are whole 32-frame steps of the frame index: the last one had slots after
    # the last frame, filled and then cut off.
    lead, tail = (1000 * FPS + 990) % 32, -(1000 * FPS + 990 + NFRAMES) % 32
    assert tail > 0 and r["record"]["end_slots_cut"] == 4 * tail
    assert lead > 0 and r["record"]["start_slots_cut"] == (4 * lead if layout == "vdif" else 0)
    lead = 0 if layout == "vdif" else lead  # the slots a recording keeps before its stream
    manifest = json.loads((disks[0] / "v4.manifest.json").read_text())
    if layout == "vdif":
        per_thread = {}
        for s, thread in enumerate(THREADS):
            mine = sorted((p for p in files(disks, "v4", ".vdif") if f"_s{s:02}_" in p.name),
                          key=lambda p: p.name)  # fmt: skip
            per_thread[thread] = np.concatenate(
                [np.fromfile(p, np.uint8).reshape(-1, FRAME_LEN) for p in mine]
            )
    else:
        blocks = sorted(manifest["files"], key=lambda f: f["number"])
        data = b"".join(Path(b["path"]).read_bytes()[b["offset"] : b["offset"] + b["bytes"]]
                        for b in blocks)  # fmt: skip
        got = np.frombuffer(data, np.uint8).reshape(-1, FRAME_LEN)
        assert len(got) == 4 * lead + len(sent)  # not a slot more
        empty = ~got.any(axis=1)  # slots of a thread before its first frame: zeros
        assert empty.sum() in (0, 4 * lead)
        got = got[~empty]
        thread = decode_headers(got)["thread"]
        per_thread = {t: got[thread == t] for t in THREADS}
    h = decode_headers(sent)
    for t in THREADS:
        want = sent[h["thread"] == t]
        # The first chunk began before the stream: fill frames (invalid) or empty
        # slots precede it.
        mine = per_thread[t]
        fill = decode_headers(mine)["invalid"]
        nfill = int(fill.sum())
        assert nfill in (0, lead) and fill[:nfill].all()
        mine = mine[~fill]
        assert len(mine) == NFRAMES  # the frame count sent
        assert np.array_equal(mine[0], want[0])  # the first frame sent, first
        assert np.array_equal(mine[-1], want[-1])  # the last frame sent, last
        assert np.array_equal(mine, want)
    recorded = sum(f["packets"] * len(f["streams"]) for f in manifest["files"])
    assert recorded == 4 * lead + len(sent)
    # Replayed, the scan is the frames sent, none more (fill frames are not sent).
    with bound_socket(free_bind()) as rx:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
        host, port = rx.getsockname()
        out = run_cli("replay", "v4", "--dirs", ",".join(map(str, disks)), "--dest",
                      f"{host}:{port}", "--rate", "0.05")  # fmt: skip
        assert out.returncode == 0, out.stderr
        got_back = receive(rx, 10 * len(sent), 1.0)
    assert sorted(got_back) == sorted(f.tobytes() for f in sent)


def test_a_ynao_dada_recording_of_n_packets_replays_as_n(tmp_path, disks):
    raw = tmp_path / "sent.raw"
    rc.simulate("ynao", "--duration", "0.002", "--output", str(raw))  # 16 us a packet
    n, rest = divmod(raw.stat().st_size, rc.YNAO_FRAME)
    assert rest == 0 and n % 64  # 64-packet chunks: the last one part full
    _record_replayed(tmp_path, disks, "d1", raw, "--format", "ynao", "--layout", "dada",
                     "--packets-per-chunk", "64", packet_len=rc.YNAO_FRAME)  # fmt: skip
    found = sorted(files(disks, "d1", ".dada"), key=lambda p: int(dada_keys(p)["OBS_OFFSET"]))
    data = b"".join(p.read_bytes()[4096:] for p in found)
    assert all(int(dada_keys(p)["FILE_SIZE"]) == p.stat().st_size - 4096 for p in found)
    sent = np.fromfile(raw, np.uint8).reshape(n, rc.YNAO_FRAME)[:, 24:]
    assert np.array_equal(np.frombuffer(data, np.uint8), sent.reshape(-1))
    # Replayed as YNAO packets and recorded again: N packets, the samples sent.
    again = disks[0].parent / "again"
    again.mkdir()
    bind = free_bind()
    report = tmp_path / "again.json"
    proc = start_record(bind, [again], "d2", "--format", "ynao", "--layout", "dada",
                        "--packets-per-chunk", "64", "--duration", "60",
                        "--report", str(report))  # fmt: skip
    out = run_cli("replay", "d1", "--dirs", ",".join(map(str, disks)), "--dest", bind,
                  "--format", "ynao", "--rate", "0.05",
                  "--report", str(tmp_path / "replay.json"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    finish(proc)
    assert json.loads((tmp_path / "replay.json").read_text())["packets"] == n
    assert json.loads(report.read_text())["capture"]["totals"]["received"] == n
    redone = b"".join(p.read_bytes()[4096:] for p in (again / "d2").glob("*.dada"))
    assert redone == data
