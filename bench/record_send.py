"""The load of bench/record.py: counter packets at a steady rate, from its own process.

    python bench/record_send.py DEST RATE_GBPS SECONDS

Sends 8192-byte counter packets (u64 index, u16 stream 0, then payload), indices
0, 1, 2, ... with no gap, to DEST (127.0.0.1:PORT) at RATE_GBPS for SECONDS, and
prints one JSON line: sent, seconds, gbps, calls, late_calls, gso. Each
`_core.Sender.send` call carries about 50 ms of packets and paces them 25% above the
rate (it restarts its pacing clock every call); between calls the sender sleeps to
an absolute schedule (call k is due when k calls' worth of bytes have gone at the
rate), so the rate over the run is the one asked for unless the sender cannot keep
it (then `gbps` says what it did, and `late_calls` counts calls that started late).
A separate process, so it shares no GIL with the capture's process.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from voltstream import _core

PACKET = 8192
HEADER = 10  # counter format: u64 index (big-endian), u16 stream
CALL_S = 0.05  # seconds of packets per send call
MAX_ROWS = 8192  # 64 MiB buffer at most


def send(dest: str, rate_gbps: float, seconds: float) -> dict:
    per_s = rate_gbps * 1e9 / 8 / PACKET
    rows = int(min(MAX_ROWS, max(64, per_s * CALL_S)))
    buf = np.zeros((rows, PACKET), np.uint8)
    buf[:, HEADER:] = (np.arange(PACKET - HEADER, dtype=np.uint32) % 251).astype(np.uint8)
    offsets = np.arange(rows, dtype=np.uint64)
    tx = _core.Sender(dest)
    total = int(per_s * seconds)
    sent, calls, late, gso = 0, 0, 0, None
    t0 = time.perf_counter()
    while sent < total:
        due = t0 + sent / per_s
        ahead = due - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        elif ahead < -CALL_S:
            late += 1
        k = min(rows, total - sent)
        idx = (offsets[:k] + np.uint64(sent)).astype(">u8")
        buf[:k, :8] = idx.view(np.uint8).reshape(k, 8)
        r = tx.send(buf[:k], PACKET, rate_gbps * 1.25)
        sent, calls, gso = sent + r["packets"], calls + 1, r["gso"]
    el = time.perf_counter() - t0
    return {
        "sent": sent,
        "seconds": el,
        "gbps": sent * PACKET * 8 / el / 1e9 if el > 0 else 0.0,
        "calls": calls,
        "late_calls": late,
        "gso": gso,
    }


if __name__ == "__main__":
    dest, rate, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(send(dest, rate, secs)))
