"""Replay pacing benchmark (issue 12): does `voltstream replay` hold the asked rate, at
any rate up to the sender's ceiling, over a whole replay made of many send calls?

Setup: a vbs scan of counter packets (8192-byte payloads, 2048 packets per chunk file,
i.e. 16 MiB files dealt over three directories; `--dirs` to use real disks, default a
temporary directory under /dev/shm), replayed over loopback to a `_core.Capture`
(counter format) whose chunks a thread releases as they come.
(a) Ceiling: the replay unpaced (--rate 0): the sender's rate, and what arrived.
(b) For each rate (default 10, 25, 50, 75 and 90 % of the ceiling, or `--rates`):
    the replay paced at that rate. Measured rate at the receiver = packets counted
    between the first and the last poll that saw packets arrive (polled every 0.5 ms)
    x payload bits / the time between those polls; pacing error = |measured - asked| /
    asked (target < 1 %). The sender's own figure (bytes / its clock) and its largest
    lateness (late_s) are reported beside it.

    python bench/replay.py [--mb 1024] [--rates 1,5,10] [--dirs D0,D1,D2] [--json F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capture import HEADER, PACKET, Consumer, counter_packets  # noqa: E402
from voltstream import _core  # noqa: E402
from voltstream.replay.layouts import find_recording  # noqa: E402
from voltstream.replay.run import replay  # noqa: E402
from voltstream.replay.sources import PacketFiles  # noqa: E402

PER_FILE = 2048
SCAN = "benchreplay"
POLL_S = 0.0005


def write_scan(dirs: list[Path], packets: int) -> PacketFiles:
    """A vbs scan of `packets` counter packets over `dirs`; its replay source."""
    for k, first in enumerate(range(0, packets, PER_FILE)):
        path = dirs[k % len(dirs)] / SCAN / f"{SCAN}.{k:08d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        counter_packets(min(PER_FILE, packets - first), first).tofile(path)
    files = sorted(find_recording(dirs, SCAN).files, key=lambda f: f.number)
    return PacketFiles([f.path for f in files], PACKET, kind="vbs")


class ArrivalClock:
    """Polls a capture's packet count; the receive rate between the first and last
    polls that saw it change."""

    def __init__(self, cap: _core.Capture, expected: int) -> None:
        self.cap, self.expected = cap, expected
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        seen = 0
        while not self.stop.is_set():
            n, t = self.cap.stats()["packets"], time.perf_counter()
            if n != seen:
                self.first = self.first or (t, n)
                self.last, seen = (t, n), n
                if n >= self.expected:
                    return
            time.sleep(POLL_S)

    def result(self, timeout: float) -> dict:
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join()
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return {"received": self.last[1] if self.last else 0, "rx_gbps": None}
        (t0, n0), (t1, n1) = self.first, self.last
        return {"received": n1, "rx_gbps": (n1 - n0) * PACKET * 8 / (t1 - t0) / 1e9}


def one_run(source: PacketFiles, packets: int, rate: float) -> dict:
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": PACKET - HEADER},
        "network": {"bind": "127.0.0.1:0", "queue_bytes": 256 << 20},
        "chunks": {"packets_per_chunk": 64, "nchunks": 256, "window": 2},
    })  # fmt: skip
    cap.start()
    consumer = Consumer(cap)
    clock = ArrivalClock(cap, packets)
    try:
        rep = replay(source, cap.address, rate_gbps=rate)
        rx = clock.result(timeout=5.0)
    finally:
        cap.stop()
        consumer.close()
    err = abs(rx["rx_gbps"] - rate) / rate if rate and rx["rx_gbps"] else None
    return {
        "asked_gbps": rate,
        "sender_gbps": rep["rate_gbps"],
        "sender_error": rep["pacing_error"],
        "late_s": rep["late_s"],
        "seconds": rep["seconds"],
        "sent": rep["packets"],
        **rx,
        "lost": rep["packets"] - rx["received"],
        "pacing_error": err,
        "gso": rep["gso"],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=1024, help="recording size in MB (8 KiB packets)")
    ap.add_argument("--rates", default=None, help="Gb/s, comma-separated. Default: % of ceiling")
    ap.add_argument("--dirs", default=None, help="comma-separated (default: 3 under /dev/shm)")
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    packets = max(PER_FILE, int(a.mb * 1e6 // PACKET))
    base = Path(tempfile.mkdtemp(prefix="bench-replay-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))  # noqa: E501  # fmt: skip
    dirs = [Path(d) for d in a.dirs.split(",")] if a.dirs else [base / f"d{k}" for k in range(3)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    try:
        source = write_scan(dirs, packets)
        ceiling = one_run(source, packets, 0.0)
        top = ceiling["sender_gbps"]
        if a.rates:
            rates = [float(r) for r in a.rates.split(",")]
        else:
            rates = [round(top * f, 2) for f in (0.1, 0.25, 0.5, 0.75, 0.9)]
        runs = [one_run(source, packets, r) for r in rates]
    finally:
        for d in dirs:
            shutil.rmtree(d / SCAN, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    out = {"packet_bytes": PACKET, "packets": packets, "ceiling": ceiling, "runs": runs}
    print(f"ceiling (unpaced): sender {top:.2f} Gb/s, received {ceiling['received']}/{packets}")
    print("| asked Gb/s | received Gb/s | pacing error | sender Gb/s | late_s | lost |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        rx = "-" if r["rx_gbps"] is None else f"{r['rx_gbps']:.3f}"
        err = "-" if r["pacing_error"] is None else f"{r['pacing_error']:.2%}"
        print(f"| {r['asked_gbps']:.2f} | {rx} | {err} | {r['sender_gbps']:.3f} | "
              f"{r['late_s'] * 1e3:.2f} ms | {r['lost']} |")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
