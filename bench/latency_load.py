"""Background load for bench/latency.py's busy column, one kind per process, until
SIGTERM; then one JSON line of what it achieved.

  net:  a `_core.Capture` (socket engine, counter packets of 8 KiB, capture thread
        pinned on the first of --cpus, chunks released at once) fed by a `_core.Sender`
        over loopback at --gbps (pinned on the second CPU);
  pcie: CuPy copies of a 64 MiB pinned host buffer to the GPU, back to back, on a
        non-blocking stream (the PCIe contention of acquisition overlapping compute).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import struct
import sys
import threading
import time

STOP = threading.Event()


def net(cpus: list[int], gbps: float) -> dict:
    from voltstream import _core

    payload = 8192
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": payload},
        "network": {"bind": "127.0.0.1:0"},
        "engine": {"kind": "socket"},
        "chunks": {"packets_per_chunk": 256, "nchunks": 16},
        "threads": {"cpus": cpus[:1]},
    })  # fmt: skip
    cap.start()

    def drain() -> None:
        while not STOP.is_set():
            c = cap.next_chunk(0.1)
            if c is not None:
                c.release()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    os.sched_setaffinity(0, set(cpus[1:2] or cpus[:1]))
    sender = _core.Sender(str(cap.address))
    n = 4096
    pkt = payload + 10
    buf = bytearray(n * pkt)
    sent_bytes, index, t0 = 0, 0, time.monotonic()
    while not STOP.is_set():
        for i in range(n):
            struct.pack_into(">QH", buf, i * pkt, index + i, 0)
        index += n
        r = sender.send(buf, pkt, gbps)
        sent_bytes += r["bytes"]
    secs = time.monotonic() - t0
    cap.stop()
    st = cap.stats()
    return {
        "net_gbps": round(sent_bytes * 8 / secs / 1e9, 2),
        "net_received": st["totals"].get("received"),
        "net_missing": st["totals"].get("missing"),
    }


def pcie() -> dict:
    import cupy as cp

    nbytes = 64 << 20
    host = cp.cuda.alloc_pinned_memory(nbytes)
    dev = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    copies, t0 = 0, time.monotonic()
    while not STOP.is_set():
        dev.data.copy_from_host_async(ctypes.c_void_p(host.ptr), nbytes, stream=stream)
        stream.synchronize()
        copies += 1
        if copies % 64 == 0:
            report({"pcie_gbytes_per_s": round(copies * nbytes / (time.monotonic() - t0) / 1e9, 2)})
    secs = time.monotonic() - t0
    return {"pcie_gbytes_per_s": round(copies * nbytes / secs / 1e9, 2)}


OUT_FILE: list[str] = []


def report(doc: dict) -> None:
    """The figures so far, to --out (read by bench/latency.py even if this process
    has to be killed)."""
    if OUT_FILE:
        with open(OUT_FILE[0], "w") as f:
            json.dump(doc, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("kind", choices=("net", "pcie"))
    ap.add_argument("--cpus", default="8,9")
    ap.add_argument("--gbps", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--out", default=None, help="write the figures so far here")
    a = ap.parse_args()
    if a.out:
        OUT_FILE.append(a.out)
    cpus = [int(c) for c in a.cpus.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    timer = threading.Timer(a.seconds, STOP.set)
    timer.daemon = True  # a crash must not leave the process waiting on it
    timer.start()
    if a.kind == "pcie":
        os.sched_setaffinity(0, set(cpus))
        out = pcie()
    else:
        out = net(cpus, a.gbps)
    report(out)
    print(json.dumps(out), flush=True)
    os._exit(0)  # the timer thread must not keep the process alive


if __name__ == "__main__":
    sys.exit(main())
