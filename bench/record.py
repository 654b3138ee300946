"""Recording benchmark (issue 12): how fast the recorder empties a capture onto disks,
against what the same directories take from a plain writer, in the same run.

(a) Record: a capture (counter format, 8192-byte packets, 4096 packets per chunk, i.e.
    32 MiB chunk files) starts paused, N packets are queued in the kernel, then the
    clock runs while the capture drains them and the recorder writes every chunk to
    `--dirs` (one writer thread each, O_DIRECT where the file system allows). Rate =
    bytes written / time until the last chunk file is complete.
(b) Disk alone, same directories, same run: one thread per directory writing the same
    number of 32 MiB files from one page-aligned buffer with O_DIRECT (buffered and
    fdatasync'ed where O_DIRECT is refused), and fio's sequential O_DIRECT write when
    fio is installed (`apt install fio`).
Run for 1..len(--dirs) directories, and on a tmpfs (`--tmpfs`: CPU-bound, no disk).

    python bench/record.py --dirs /mnt/d0,/mnt/d1 [--packets 60000] [--tmpfs] [--json F]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture import PACKET, fill  # noqa: E402 - bench/capture.py's sender
from voltstream import _core  # noqa: E402

PER_CHUNK = 4096
CHUNK_BYTES = PER_CHUNK * (PACKET - 10)


def record_drain(dirs: list[Path], n: int) -> dict:
    cap = _core.Capture(
        "counter", "127.0.0.1:0", PER_CHUNK, nchunks=8, window=2, payload_len=PACKET - 10,
        queue_bytes=n * PACKET * 2 + (64 << 20), engine="auto", whole_packets=True,
    )  # fmt: skip
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


def fio_alone(dirs: list[Path], mib_per_dir: int) -> dict | None:
    if shutil.which("fio") is None:
        return None
    jobs = []
    for k, d in enumerate(dirs):
        jobs += [f"--name=d{k}", f"--directory={d}", f"--size={mib_per_dir}M"]
    cmd = ["fio", "--rw=write", "--bs=32M", "--direct=1", "--ioengine=psync",
           "--end_fsync=1", "--output-format=json", *jobs]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:]}
    out = json.loads(r.stdout)
    bw = sum(j["write"]["bw_bytes"] for j in out["jobs"])
    return {"dirs": len(dirs), "gbps": bw * 8 / 1e9}


def run(base: list[Path], n: int) -> list[dict]:
    rows = []
    for k in range(1, len(base) + 1):
        dirs = [Path(tempfile.mkdtemp(prefix="vs-bench-", dir=b)) for b in base[:k]]
        try:
            rec = record_drain(dirs, n)
            files = max(1, rec["chunks_written"] // k)
            alone = disk_alone(dirs, files)
            fio = fio_alone(dirs, files * CHUNK_BYTES >> 20)
            rows.append({"record": rec, "disk_alone": alone, "fio": fio})
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", required=True, help="comma-separated, one per disk")
    ap.add_argument("--packets", type=int, default=60000, help="queued per run (8 KiB each)")
    ap.add_argument("--tmpfs", action="store_true", help="also on /dev/shm (CPU-bound)")
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    out = {"packet_bytes": PACKET, "chunk_bytes": CHUNK_BYTES, "runs": {}}
    out["runs"]["dirs"] = run([Path(d) for d in a.dirs.split(",") if d], a.packets)
    if a.tmpfs:
        out["runs"]["tmpfs"] = run([Path("/dev/shm")], a.packets)
    print("| where | dirs | record Gb/s | chunks written/unwritten | O_DIRECT | "
          "disk alone Gb/s | fio Gb/s | record / disk alone |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for where, rows in out["runs"].items():
        for r in rows:
            rec, alone, fio = r["record"], r["disk_alone"], r["fio"]
            fio_gbps = "-" if not fio or "gbps" not in fio else f"{fio['gbps']:.1f}"
            print(
                f"| {where} | {rec['dirs']} | {rec['gbps']:.1f} | {rec['chunks_written']}/"
                f"{rec['chunks_unwritten']} | {rec['direct_chunks']} | {alone['gbps']:.1f} | "
                f"{fio_gbps} | {rec['gbps'] / alone['gbps']:.2f} |"
            )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
