"""Capture threads benchmark: drain rate of the packet-ring engine with 1, 2, ... capture
threads (a PACKET_FANOUT_CBPF group steered by stream id), same run.

The capture starts paused, N counter packets of 8192 bytes over S streams are queued in the
rings over loopback, then the clock runs while the threads empty them into chunks (one
consumer thread per capture thread releases them). The sender sends each stream in batches
of 64 packets, so every UDP-GSO super-frame holds one stream: the kernel steers a GSO frame
whole, by its first datagram (docs/architecture.md, "Capture threads"). Thread counts are
measured in turns (1, 2, 1, 2, ...) and the best of the repeats is reported with all repeats.

Only 127.0.0.1 is used; every phase is bounded in packets and time.

    python bench/capture_threads.py [--threads 1,2] [--packets 30000] [--streams 4]
                                    [--repeats 3] [--cpus 0,1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time

import numpy as np

from voltstream import _core

PACKET = 8192  # bytes per UDP payload
HEADER = 10  # counter format: u64 index, u16 stream
GSO_SEGS = 64  # the kernel's limit of datagrams per GSO send


def stream_block(stream: int, first: int, n: int) -> np.ndarray:
    buf = np.zeros((n, PACKET), np.uint8)
    buf[:, :8] = np.arange(first, first + n, dtype=">u8").view(np.uint8).reshape(n, 8)
    buf[:, 8:10] = np.array([stream], ">u2").view(np.uint8)
    buf[:, HEADER:] = (np.arange(PACKET - HEADER, dtype=np.uint32) % 251).astype(np.uint8)
    return buf


def fill(dest: str, n: int, streams: int) -> int:
    """Queues n packets, 64 of one stream at a time (each send: one stream)."""
    tx, sent, index = _core.Sender(dest), 0, 0
    blocks = [stream_block(s, 0, GSO_SEGS) for s in range(streams)]
    while sent < n:
        for s in range(streams):
            k = min(GSO_SEGS, n - sent)
            if k <= 0:
                break
            blk = blocks[s][:k]
            blk[:, :8] = np.arange(index, index + k, dtype=">u8").view(np.uint8).reshape(k, 8)
            sent += tx.send(blk, PACKET, 0)["packets"]
        index += GSO_SEGS
    return sent


def drain(nthreads: int, n: int, streams: int, cpus: list[int]) -> dict:
    per_ring = n * PACKET * 2 // nthreads + (64 << 20)
    cap = _core.Capture(
        {
            "format": {"name": "counter", "streams": streams, "payload_len": PACKET - HEADER},
            "network": {"bind": "127.0.0.1:0", "queue_bytes": per_ring},
            "engine": {"kind": "packet_ring"},
            "chunks": {"packets_per_chunk": 64, "nchunks": 64, "window": 2},
            "threads": {"count": nthreads, "cpus": cpus[:nthreads] if cpus else None},
        }
    )
    cap.start(paused=True)
    done = threading.Event()
    released = [0] * nthreads

    def consume(t):
        while True:
            ch = cap.next_chunk(0.05, thread=t)
            if ch is None:
                if done.is_set():
                    return
                continue
            ch.release()
            released[t] += 1

    workers = [threading.Thread(target=consume, args=(t,), daemon=True) for t in range(nthreads)]
    for w in workers:
        w.start()
    try:
        queued = fill(cap.address, n, streams)
        time.sleep(0.05)
        drops = cap.stats()["kernel_drops"]
        t0 = time.perf_counter()
        cap.resume()
        while cap.stats()["packets"] < queued - drops and time.perf_counter() - t0 < 30:
            time.sleep(0.0005)
        secs = time.perf_counter() - t0
    finally:
        cap.stop()
        done.set()
        for w in workers:
            w.join(timeout=10)
    st = cap.stats()
    got = st["totals"]["received"]
    return {
        "threads": nthreads,
        "packets": queued,
        "received": got,
        "seconds": secs,
        "gbps": got * PACKET * 8 / secs / 1e9,
        "mpps": got / secs / 1e6,
        "kernel_drops": st["kernel_drops"],
        "foreign": st["foreign"],
        "dropped": st["totals"]["dropped"],
        "per_thread_received": [th["totals"]["received"] for th in st["threads"]],
        "cpus": [th["cpu"] for th in st["threads"]],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--packets", type=int, default=30000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", default="", help="CPU of each capture thread, e.g. 0,1")
    ap.add_argument("--json", help="write all results here")
    a = ap.parse_args(argv)
    counts = [int(t) for t in a.threads.split(",")]
    cpus = [int(c) for c in a.cpus.split(",")] if a.cpus else []
    runs = []
    for r in range(a.repeats):
        for t in counts:
            res = drain(t, a.packets, a.streams, cpus)
            res["repeat"] = r
            runs.append(res)
            print(
                f"threads={t} repeat={r}: {res['gbps']:.2f} Gb/s {res['mpps']:.3f} Mpps "
                f"({res['received']}/{res['packets']} packets, per thread "
                f"{res['per_thread_received']}, kernel_drops={res['kernel_drops']}, "
                f"foreign={res['foreign']}, dropped={res['dropped']})",
                flush=True,
            )
    print("best drain rate:")
    for t in counts:
        best = max((r for r in runs if r["threads"] == t), key=lambda r: r["gbps"])
        print(f"  {t} thread(s): {best['gbps']:.2f} Gb/s, {best['mpps']:.3f} Mpps")
    if a.json:
        meta = {
            "machine": platform.node(),
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "args": vars(a),
        }
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "runs": runs}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
