"""`voltstream record` as a user runs it: `simulate` sends over loopback, `record`
writes each layout across three directories, and what is on disk is checked against
what was sent, byte for byte, and by baseband (PyPI) as a real reader. Also: kill -9
mid-scan, then `--repair`; a directory that fills up mid-scan."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import astropy.units as u
import numpy as np
from baseband import dada as baseband_dada  # requirements-dev.txt: a real peer
from baseband import vdif as baseband_vdif

from cli_process import run_cli
from loopback import free_bind

YNAO_FRAME, YNAO_PAYLOAD = 8216, 8192


def start_record(
    bind: str, dirs: list[Path], scan: str, *args: str, flush_age: str | None = "5"
) -> subprocess.Popen:
    """`voltstream record` once it listens. ``flush_age``: these tests send far below
    their formats' own rates, with pauses while the simulator makes its next block (a
    loaded 2-core machine: over 0.5 s); a chunk open across such a pause goes out at
    the default flush age and its later packets count late (by design: what a crash
    can lose is bounded; tests/test_record_crash.py checks that with None, the
    default). A long age keeps these tests about what they check."""
    age = ["--flush-age", flush_age] if flush_age is not None else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "record", "--listen", bind, "--engine",
         "socket", "--dirs", ",".join(map(str, dirs)), "--scan", scan, *age, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        if any(Path(d, f"{scan}.manifest.json").exists() for d in dirs):
            return proc  # the manifest is written once the capture listens
        time.sleep(0.05)
    out, err = proc.communicate(timeout=5)
    raise AssertionError(f"record did not start: {err}")


def simulate(fmt: str, *args: str) -> None:
    sim = run_cli("simulate", "--format", fmt, "--signal", "noise", *args)
    assert sim.returncode == 0, sim.stderr


def finish(proc: subprocess.Popen) -> str:
    """Stops the recorder as a user does, with Ctrl-C, once the last packets are in
    (an idle timeout could end it early while a loaded machine starves the sender)."""
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return out


def record_sent(tmp_path: Path, dirs: list[Path], fmt: str, scan: str, *args: str) -> dict:
    """Records what `simulate` sends (0.1 s of noise) and returns the run's report;
    the same stream is also written to tmp_path/sent.raw (packets back to back)."""
    bind = free_bind()
    report = tmp_path / "report.json"
    proc = start_record(bind, dirs, scan, "--duration", "60",
                        "--report", str(report), *args)  # fmt: skip
    sim = ("--duration", "0.1", "--rate", "0.3")
    simulate(fmt, *sim, "--dest", bind)
    simulate(fmt, *sim, "--output", str(tmp_path / "sent.raw"))
    finish(proc)
    r = json.loads(report.read_text())
    assert r["record"]["chunks_unwritten"] == 0 and r["record"]["chunks_lost"] == 0, r["record"]
    assert r["capture"]["totals"]["missing"] == 0
    return r


def files(dirs: list[Path], scan: str, suffix: str) -> list[Path]:
    return [p for d in dirs for p in (d / scan).glob(f"*{suffix}")]


def dada_keys(path: Path) -> dict[str, str]:
    head = path.read_bytes()[:4096].rstrip(b"\0").decode()
    return dict(line.split(None, 1) for line in head.splitlines())


def test_dada_layout_over_three_disks_holds_every_sample_and_baseband_reads_it(tmp_path, disks):
    # 64-packet chunks (512 KiB of samples) and 1 MiB files: two chunks a file.
    r = record_sent(tmp_path, disks, "ynao", "d1", "--format", "ynao", "--layout", "dada",
                    "--packets-per-chunk", "64", "--file-size", str(1 << 20))  # fmt: skip
    found = sorted(files(disks, "d1", ".dada"), key=lambda p: int(dada_keys(p)["OBS_OFFSET"]))
    assert len(found) > len(disks) and all(files(disks[k : k + 1], "d1", ".dada") for k in range(3))
    sent = np.fromfile(tmp_path / "sent.raw", np.uint8).reshape(-1, YNAO_FRAME)[:, 24:]
    sent = sent.reshape(-1)
    expect_offset = 0
    for k, path in enumerate(found):
        keys = dada_keys(path)
        data = path.read_bytes()[4096:]
        assert int(keys["FILE_SIZE"]) == len(data) and int(keys["FILE_NUMBER"]) == k
        assert int(keys["OBS_OFFSET"]) == expect_offset
        # What was sent, byte for byte, and no more (the last chunk is cut where the
        # stream ended).
        end = expect_offset + len(data)
        assert np.array_equal(np.frombuffer(data, np.uint8), sent[expect_offset:end])
        expect_offset += len(data)
        with baseband_dada.open(path, "rs") as fh:  # baseband reads it as it is
            got = fh.read()
            shape = (got.shape[0], *fh.sample_shape, 2)
        q = np.frombuffer(data, np.int8).reshape(shape).astype(np.float32)
        assert np.array_equal(got, q[..., 0] + 1j * q[..., 1])
    assert expect_offset == len(sent) <= r["record"]["bytes_written"]
    manifest = json.loads((disks[1] / "d1.manifest.json").read_text())
    assert manifest["complete"] and manifest["layout"] == "dada"
    assert sorted(f["path"] for f in manifest["files"]) == sorted(map(str, found))


def vdif_threads(raw: bytes, frame_len: int, timed: bool = False) -> dict[int, bytes]:
    """Each thread's frames, their seconds field zeroed unless `timed`: two runs of
    `simulate` start at their own wall-clock second."""
    frames = np.frombuffer(raw, np.uint8).reshape(-1, frame_len).copy()
    thread = (frames[:, 14].astype(int) | (frames[:, 15].astype(int) << 8)) & 0x3FF
    if not timed:
        untimed(frames)
    return {int(t): frames[thread == t].tobytes() for t in np.unique(thread)}


def untimed(frames: np.ndarray) -> np.ndarray:
    """Frames (n, frame_len) with word 0's seconds zeroed (flags kept)."""
    frames[:, :3] = 0
    frames[:, 3] &= 0xC0
    return frames


def test_vdif_layout_is_the_frames_as_sent_per_thread_and_baseband_reads_them(tmp_path, disks):
    record_sent(tmp_path, disks, "vdif", "v1", "--format", "vdif", "--layout", "vdif",
                "--packets-per-chunk", "32", "--file-size", "300000")  # fmt: skip
    raw = (tmp_path / "sent.raw").read_bytes()
    frame_len = (int.from_bytes(raw[8:12], "little") & 0xFFFFFF) * 8
    sent = vdif_threads(raw, frame_len)
    raw_threads = vdif_threads(raw, frame_len, timed=True)
    manifest = json.loads((disks[0] / "v1.manifest.json").read_text())
    for stream, thread in enumerate(sorted(sent)):
        mine = sorted(files(disks, "v1", ".vdif"), key=lambda p: p.name)
        mine = [p for p in mine if f"_s{stream:02}_" in p.name]
        assert len(mine) > 1
        got = np.frombuffer(b"".join(p.read_bytes() for p in mine), np.uint8)
        got = untimed(got.reshape(-1, frame_len).copy()).tobytes()
        # The frames as sent, up to the last one (no fill after the stream's end).
        assert got == sent[thread]
        # baseband reads each file; short files need the sample rate given.
        with open(mine[0], "rb") as f:
            per_frame = baseband_vdif.VDIFHeader.fromfile(f).samples_per_frame
        rate = manifest["packets_per_second"] * per_frame * u.Hz
        with baseband_vdif.open(mine[0], "rs", sample_rate=rate) as fh:
            ours = fh.read()
        assert ours.shape[0] == per_frame * (mine[0].stat().st_size // frame_len)
        (tmp_path / "one.vdif").write_bytes(
            raw_threads[thread][: len(ours) // per_frame * frame_len]
        )
        with baseband_vdif.open(tmp_path / "one.vdif", "rs", sample_rate=rate) as fh:
            assert np.array_equal(ours, fh.read())


def test_mark6_and_vbs_layouts_hold_every_packet_in_numbered_blocks(tmp_path, disks):
    for layout, scan in (("vbs", "b1"), ("mark6", "m1")):
        record_sent(tmp_path, disks, "ynao", scan, "--format", "ynao", "--layout", layout,
                    "--packets-per-chunk", "16")  # fmt: skip
        raw = np.fromfile(tmp_path / "sent.raw", np.uint8)
        from voltstream.record.repair import repair

        done = repair(disks, scan)  # nothing to mend in a clean scan
        assert not done["truncated"] and not done["removed"] and not done["headers"]
        manifest = json.loads((disks[0] / f"{scan}.manifest.json").read_text())
        blocks = sorted(manifest["files"], key=lambda f: f["number"])
        assert [b["number"] for b in blocks] == list(range(len(blocks)))
        data = b"".join(
            Path(b["path"]).read_bytes()[b["offset"] : b["offset"] + b["bytes"]] for b in blocks
        )
        got = np.frombuffer(data, np.uint8).reshape(-1, YNAO_FRAME)
        sent_frames = raw.reshape(-1, YNAO_FRAME)
        # The frames as sent (their headers carry the second each run of `simulate`
        # started in, so only the samples are compared), and no empty slot after.
        assert np.array_equal(got[:, 24:], sent_frames[:, 24:])


def test_kill_9_mid_scan_leaves_readable_files_that_repair_makes_agree(tmp_path, disks):
    bind = free_bind()
    proc = start_record(bind, disks, "k1", "--format", "ynao", "--layout", "dada",
                        "--packets-per-chunk", "16", "--file-size", str(1 << 20))  # fmt: skip
    sender = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "simulate", "--format", "ynao", "--signal",
         "noise", "--duration", "2", "--rate", "0.2", "--dest", bind],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(files(disks, "k1", ".dada")) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    sender.wait(timeout=60)
    found = files(disks, "k1", ".dada")
    assert len(found) >= 4
    out = run_cli("record", "--repair", "k1", "--dirs", ",".join(map(str, disks)))
    assert out.returncode == 0, out.stderr
    assert "manifest rewritten" in out.stdout
    manifest = json.loads((disks[0] / "k1.manifest.json").read_text())
    assert manifest["repaired"] and not manifest["complete"]
    assert sorted(f["path"] for f in manifest["files"]) == sorted(map(str, found))
    for path in found:  # every file reads to its end: whole samples, headers agree
        keys = dada_keys(path)
        size = path.stat().st_size - 4096
        assert int(keys["FILE_SIZE"]) == size and size % YNAO_PAYLOAD == 0
        with baseband_dada.open(path, "rs") as fh:  # 8-bit complex: 2 bytes a sample
            assert fh.read().size * 2 == size


def test_a_directory_that_fills_is_taken_out_and_every_chunk_counted(tmp_path, disks):
    small = disks[2]
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)],
                             capture_output=True, text=True)  # fmt: skip
    assert mounted.returncode == 0, f"the test mounts a 2 MiB tmpfs (as root): {mounted.stderr}"
    try:
        r = record_sent_lossy(tmp_path, disks)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    writers = {Path(w["dir"]).name: w for w in r["record"]["writers"]}
    full = writers["disk2"]
    assert full["failed"] and "No space left" in full["failed"], full
    assert all(
        writers[k]["failed"] is None and writers[k]["chunks"] > 0 for k in ("disk0", "disk1")
    )
    rec = r["record"]
    accounted = rec["chunks_written"] + rec["chunks_unwritten"] + rec["chunks_lost"]
    assert accounted == r["capture"]["chunks_emitted"] and rec["chunks_written"] > 0


def record_sent_lossy(tmp_path: Path, dirs: list[Path]) -> dict:
    bind = free_bind()
    report = tmp_path / "report.json"
    proc = start_record(bind, dirs, "f1", "--format", "ynao", "--layout", "vbs",
                        "--packets-per-chunk", "16", "--queue-chunks", "4", "--duration", "60",
                        "--report", str(report))  # fmt: skip
    simulate("ynao", "--duration", "0.2", "--rate", "0.3", "--dest", bind)
    finish(proc)
    return json.loads(report.read_text())


def replay(scan: str, dirs: list[Path], dest: str, *args: str) -> dict:
    out = run_cli("replay", scan, "--dirs", ",".join(map(str, dirs)), "--dest", dest,
                  "--rate", "0.3", *args)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return {"out": out.stdout}


def test_a_recording_over_three_disks_replays_and_recaptures_sample_for_sample(tmp_path, disks):
    """vbs across three disks (a chunk a file) -> `replay` -> `record --layout vdif`:
    the frames recaptured are the frames first sent, per thread; and a DADA scan
    replayed as YNAO packets and recorded again holds the same samples."""
    record_sent(tmp_path, disks, "vdif", "first", "--format", "vdif", "--layout", "vbs",
                "--packets-per-chunk", "32")  # fmt: skip
    assert all(len(list((d / "first").iterdir())) > 1 for d in disks)  # files on every disk
    raw = (tmp_path / "sent.raw").read_bytes()
    frame_len = (int.from_bytes(raw[8:12], "little") & 0xFFFFFF) * 8
    sent = vdif_threads(raw, frame_len)

    again = disks[0].parent / "again"  # on the RAM file system too
    again.mkdir()
    bind = free_bind()
    proc = start_record(bind, [again], "second", "--format", "vdif", "--layout", "vdif",
                        "--packets-per-chunk", "32", "--duration", "60")  # fmt: skip
    replay("first", disks, bind)
    finish(proc)
    for stream, thread in enumerate(sorted(sent)):
        mine = sorted((again / "second").glob(f"second_s{stream:02}_*.vdif"))
        got = np.frombuffer(b"".join(p.read_bytes() for p in mine), np.uint8)
        got = untimed(got.reshape(-1, frame_len).copy()).tobytes()
        assert got == sent[thread]  # and not a fill frame after the last

    record_sent(tmp_path, disks, "ynao", "d2", "--format", "ynao", "--layout", "dada",
                "--packets-per-chunk", "64", "--file-size", str(1 << 20))  # fmt: skip
    sent_samples = np.fromfile(tmp_path / "sent.raw", np.uint8).reshape(-1, YNAO_FRAME)[:, 24:]
    bind = free_bind()
    proc = start_record(bind, [again], "d3", "--format", "ynao", "--layout", "dada",
                        "--packets-per-chunk", "64", "--duration", "60")  # fmt: skip
    replay("d2", disks, bind, "--format", "ynao")
    finish(proc)
    found = sorted((again / "d3").glob("*.dada"), key=lambda p: int(dada_keys(p)["OBS_OFFSET"]))
    data = np.frombuffer(b"".join(p.read_bytes()[4096:] for p in found), np.uint8)
    assert np.array_equal(data, sent_samples.reshape(-1))


def test_a_recorded_vdif_scan_replays_realtime_at_its_manifests_frame_rate(tmp_path, disks):
    """`record` then `replay --realtime` with no rate option, as the README tour runs
    them: the manifest's frame rate paces the replay, and every frame arrives."""
    record_sent(tmp_path, disks, "vdif", "rt1", "--format", "vdif", "--layout", "vdif",
                "--packets-per-chunk", "32")  # fmt: skip
    sent = (tmp_path / "sent.raw").stat().st_size // 8032
    bind = free_bind()
    # A plain socket with room for the whole scan receives it: the kernel holds every
    # datagram until it is read, so the count is the replay's, whatever the load.
    host, port = bind.rsplit(":", 1)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 128 << 20)
    rx.bind((host, int(port)))
    out = run_cli("replay", "rt1", "--dirs", ",".join(map(str, disks)), "--dest", bind,
                  "--realtime", "--report", str(tmp_path / "replay.json"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    rx.setblocking(False)
    frames = []
    while True:
        try:
            frames.append(rx.recv(65536))
        except BlockingIOError:
            break
    rx.close()
    rep = json.loads((tmp_path / "replay.json").read_text())
    # Paced by 32000 frames a second of each thread: the 0.1 s recorded takes ~0.1 s.
    assert rep["realtime"] and rep["packets"] == sent and rep["seconds"] > 0.08
    assert len(frames) == sent and {len(f) for f in frames} == {8032}
