"""Burst mode of bench/record.py (`--burst`; the first measurement of issue 12): how fast
the recorder empties a burst of packets queued in the kernel onto the disks, against
what the same directories take from a plain writer, in the same run.

(a) Record: a capture (counter format, 8192-byte packets, 4096 packets per chunk, i.e.
    32 MiB chunk files) starts paused, N packets are queued in the kernel, then the
    clock runs while the capture drains them and the recorder writes every chunk to
    the directories (one writer thread each, O_DIRECT where the file system allows).
    Rate = bytes written / time until the last chunk file is complete.
(b) Disk alone, same directories, same run: one thread per directory writing the same
    number of 32 MiB files from one page-aligned buffer with O_DIRECT (buffered and
    fdatasync'ed where O_DIRECT is refused), and fio's sequential O_DIRECT write when
    an fio is given.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from capture import PACKET, fill  # bench/capture.py's sender
from record_disk import fio_write
from voltstream import _core

PER_CHUNK = 4096
CHUNK_BYTES = PER_CHUNK * PACKET  # whole packets, as the vbs layout records them


def record_drain(dirs: list[Path], n: int) -> dict:
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": PACKET - 10},
        "network": {"bind": "127.0.0.1:0", "queue_bytes": n * PACKET * 2 + (64 << 20)},
        "engine": {"kind": "auto"},
        "chunks": {"packets_per_chunk": PER_CHUNK, "nchunks": 8, "window": 2,
                   "whole_packets": True},
    })  # fmt: skip
    cap.start(paused=True)
    rec = _core.Recorder(cap, [str(d) for d in dirs], f"bench{time.monotonic_ns()}")
    queued = fill(cap.address, n)
    time.sleep(0.05)
    t0 = time.perf_counter()
    cap.resume()
    while cap.stats()["packets"] < queued and time.perf_counter() - t0 < 120:
        time.sleep(0.001)
    cap.stop()
    report = rec.finish()
    seconds = time.perf_counter() - t0
    return {
        "dirs": len(dirs),
        "engine": cap.stats()["engine"],
        "packets": queued,
        "received": cap.stats()["packets"],
        "kernel_drops": cap.stats()["kernel_drops"],
        "chunks_written": report["chunks_written"],
        "chunks_unwritten": report["chunks_unwritten"],
        "direct_chunks": sum(w["direct_chunks"] for w in report["writers"]),
        "seconds": seconds,
        "gbps": report["bytes_written"] * 8 / seconds / 1e9,
    }


def disk_alone(dirs: list[Path], files_per_dir: int) -> dict:
    """One thread per directory writing 32 MiB files from one aligned buffer."""
    buf = mmap.mmap(-1, CHUNK_BYTES)
    buf.write(os.urandom(4096) * (CHUNK_BYTES // 4096))
    direct = [0]

    def writer(d: Path) -> None:
        for k in range(files_per_dir):
            path = d / f"alone.{k:08d}"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
                direct[0] += 1
            except OSError:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(fd, buf)
                os.fdatasync(fd)
            finally:
                os.close(fd)

    threads = [threading.Thread(target=writer, args=(d,)) for d in dirs]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    total = len(dirs) * files_per_dir * CHUNK_BYTES
    return {"dirs": len(dirs), "seconds": seconds, "gbps": total * 8 / seconds / 1e9,
            "direct_files": direct[0]}  # fmt: skip


def run(base: list[Path], n: int, fio: str | None) -> list[dict]:
    """Burst record, disk alone and (with `fio`) fio for the first 1..len(base) dirs."""
    rows = []
    for k in range(1, len(base) + 1):
        dirs = [Path(tempfile.mkdtemp(prefix="vs-bench-", dir=b)) for b in base[:k]]
        try:
            rec = record_drain(dirs, n)
            files = max(1, rec["chunks_written"] // k)
            alone = disk_alone(dirs, files)
            res = None if fio is None else fio_write(fio, dirs, 10, bs="32M", iodepth=1)
            rows.append({"record": rec, "disk_alone": alone, "fio": res})
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    return rows


def table(runs: dict[str, list[dict]]) -> list[str]:
    lines = [
        "| where | dirs | record Gb/s | chunks written/unwritten | O_DIRECT | "
        "disk alone Gb/s | fio Gb/s | record / disk alone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for where, rows in runs.items():
        for r in rows:
            rec, alone, fio = r["record"], r["disk_alone"], r["fio"]
            fio_gbps = "-" if not fio or "gbps" not in fio else f"{fio['gbps']:.1f}"
            lines.append(
                f"| {where} | {rec['dirs']} | {rec['gbps']:.1f} | {rec['chunks_written']}/"
                f"{rec['chunks_unwritten']} | {rec['direct_chunks']} | {alone['gbps']:.1f} | "
                f"{fio_gbps} | {rec['gbps'] / alone['gbps']:.2f} |"
            )
    return lines
