"""Scrape a live loopback capture's /metrics and plot what Grafana would: the figure in
docs/operations.md (docs/metrics-loopback.png).

It runs `voltstream capture --metrics 127.0.0.1:0` on two counter streams (8192-byte
payloads), sends it paced packets in phases (a low rate, a higher one, one with one
packet in 200 of stream 1 left out, one with packets sent again after their chunk
left: late), scrapes /metrics every 0.25 s with prometheus_client's parser and plots
the rates (differences of the counters between scrapes) and the pool's free chunks.
Usage: .venv/bin/python scripts/plot_live_metrics.py [OUT.png]
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from voltstream import _core
from voltstream.ops.status_view import scrape_metrics

PAYLOAD = 8192
#: (seconds, Gb/s, skip 1 packet in N of stream 1 or 0, resend late packets)
PHASES = ((3.0, 0.3, 0, False), (3.0, 1.0, 0, False), (3.0, 0.6, 200, False),
          (3.0, 0.6, 0, True))  # fmt: skip


def packets(first: int, n: int, skip_every: int) -> np.ndarray:
    idx = np.repeat(np.arange(first, first + n, dtype=">u8"), 2)
    stream = np.tile(np.array([0, 1], dtype=">u2"), n)
    rows = np.zeros((2 * n, 10 + PAYLOAD), np.uint8)
    rows[:, :8] = idx.view(np.uint8).reshape(-1, 8)
    rows[:, 8:10] = stream.view(np.uint8).reshape(-1, 2)
    if skip_every:
        keep = ~((np.arange(2 * n) % 2 == 1) & ((idx.astype(np.int64) % skip_every) == 7))
        rows = rows[keep]
    return np.ascontiguousarray(rows)


def send_phases(dest: str) -> None:
    tx = _core.Sender(dest)
    first = 0
    for seconds, gbps, skip, late in PHASES:
        n = int(seconds * gbps * 1e9 / 8 / PAYLOAD / 2)
        batch = 512
        for k in range(0, n, batch):
            m = min(batch, n - k)
            tx.send(packets(first + k, m, skip), 10 + PAYLOAD, gbps)
            if late and k % (2 * batch) == 0 and first + k > 512:
                # 8 chunks back: past the reorder window (4), within the resync bound.
                tx.send(packets(first + k - 512, 4, 0), 10 + PAYLOAD, gbps)
        first += n


def scrape(address: str) -> dict[tuple[str, tuple], float]:
    return scrape_metrics(address)


def main(out: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        bind = f"127.0.0.1:{s.getsockname()[1]}"
    tmp = Path(tempfile.mkdtemp())
    (tmp / "counter.toml").write_text(f'format = "counter"\nstreams = 2\npayload_len = {PAYLOAD}\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "voltstream.cli", "capture", "--stream", str(tmp / "counter.toml"),
         "--listen", bind, "--duration", "30", "--idle-timeout", "2", "--packets-per-chunk",
         "64", "--metrics", "127.0.0.1:0", "--report", str(tmp / "report.json")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    address = ""
    while not address:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit(f"the capture ended: {proc.communicate()}")
        if "http://" in line:
            address = line.split("http://")[1].split("/")[0]
    proc.stderr.readline()  # "listening on"
    sender = threading.Thread(target=send_phases, args=(bind,))
    t0 = time.monotonic()
    sender.start()
    times, scrapes = [], []
    while sender.is_alive() or time.monotonic() - t0 < sum(p[0] for p in PHASES) + 1:
        times.append(time.monotonic() - t0)
        scrapes.append(scrape(address))
        time.sleep(0.25)
    proc.wait()
    plot(np.array(times), scrapes, out)
    print(f"wrote {out} from {len(scrapes)} scrapes of {address}")


def plot(t: np.ndarray, scrapes: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(name: str, **labels: str) -> np.ndarray:
        key = (name, tuple(sorted(labels.items())))
        return np.array([s.get(key, np.nan) for s in scrapes])

    def rate(v: np.ndarray) -> np.ndarray:
        return np.diff(v) / np.diff(t)

    mid = (t[1:] + t[:-1]) / 2
    fig, ax = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    ax[0].plot(mid, 8 * rate(series("voltstream_capture_bytes_total")) / 1e9)
    ax[0].set_ylabel("in, Gb/s\n(rate of capture_bytes)")
    ax[1].plot(mid, rate(series("voltstream_capture_packets_total", kind="received")))
    ax[1].set_ylabel("received packets/s")
    for kind in ("missing", "late", "duplicate", "dropped"):
        ax[2].plot(t, series("voltstream_capture_packets_total", kind=kind), label=kind)
    ax[2].plot(t, series("voltstream_capture_kernel_drops_total"), label="kernel_drops")
    ax[2].set_ylabel("loss counters\n(cumulative)")
    ax[2].legend(loc="upper left")
    ax[3].plot(t, series("voltstream_capture_free_chunks"), label="free")
    ax[3].plot(t, series("voltstream_capture_pool_chunks"), "--", label="pool")
    ax[3].set_ylabel("chunks")
    ax[3].legend(loc="lower left")
    ax[3].set_xlabel("seconds since the sender started (scrapes every 0.25 s)")
    fig.suptitle("voltstream capture --metrics, scraped live on loopback (2 counter streams)")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/metrics-loopback.png"))
