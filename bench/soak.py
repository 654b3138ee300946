"""Soak: the live fold at a steady rate for minutes, lossless and with flat memory
(issue 26: `soak_fold_minutes`, `soak_fold_lost`).

One point of bench/e2e.py (`run_point`: the real CLI as receiver, paced sender
processes on loopback) held for --minutes at --rate Gb/s, while a watcher samples the
receiver's resident memory (VmRSS of every `voltstream ... --listen` child of this
process) and the GPU's used memory every --sample-s seconds. The figure is lossless
(every packet sent received, nothing missing, late, dropped or kernel-dropped) and
the memory growth from the end of the first minute to the end (a leak grows with
time; the pool and the GPU's buffers are made at the start).

    scripts/gpu.sh bench-soak --config fold_ynao --rate 29 --minutes 9 --json $OUT/soak.json

Pick the rate as 0.8 x the configuration's confirmed critical rate
(docs/results/e2e.json); the command keeps the e2e options (--senders, --spread-threads).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import e2e  # noqa: E402


def receiver_rss_mib() -> float:
    """Resident memory of this process's `--listen` children, MiB (0 when none)."""
    me, total = os.getpid(), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0")) != me or b"--listen" not in cmd:
            continue
        total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total / 1024


def gpu_used_mib() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        return float(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class Watcher(threading.Thread):
    def __init__(self, every_s: float) -> None:
        super().__init__(daemon=True)
        self.every_s, self.samples, self.done = every_s, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            rss = receiver_rss_mib()
            if rss:
                self.samples.append((time.monotonic() - self.t0, rss, gpu_used_mib()))


def growth(samples: list, column: int, after_s: float) -> float | None:
    """Growth of a column from the first sample after ``after_s`` to the last one
    (``samples``: those taken while the stream was sent)."""
    kept = [s[column] for s in samples if s[0] >= after_s and s[column] is not None]
    return kept[-1] - kept[0] if len(kept) >= 2 else None


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["bench/soak.py", *argv])

    def take(flag: str, default: str) -> str:
        if flag in argv:
            i = argv.index(flag)
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        return default

    config = take("--config", "fold_ynao")
    rate = float(take("--rate", "29"))
    minutes = float(take("--minutes", "9"))
    every = float(take("--sample-s", "10"))
    out = take("--json", "docs/results/soak.json")
    a = e2e.parse_args(argv)
    cpus = e2e.cpu_plan(a)
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="voltstream-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    watcher = Watcher(every)
    watcher.start()
    p = e2e.run_point(config, rate, minutes * 60, a, cpus, mp.get_context("spawn"), workdir)
    watcher.done.set()
    print(e2e.point_line(p), flush=True)
    until = p.get("send_end", float("inf")) - watcher.t0
    # Only samples taken while the stream was sent: one taken while the receiver exits
    # shows its memory already freed, read as a fall of 5 GB in session 15's first soak.
    s = [x for x in watcher.samples if x[0] <= until]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": e2e.machine(),
        "command": command,
        "config": config,
        "asked_gbps": rate,
        "minutes": minutes,
        "lossless": bool(p.get("lossless")),
        "error": p.get("error"),
        "received_gbps": p.get("received_gbps"),
        "sent": p.get("sent"),
        "lost": p.get("lost"),
        "counters": {k: p.get(k) for k in e2e.ALL_COUNTERS},
        "rss_mib_first_last_max": [s[0][1], s[-1][1], max(x[1] for x in s)] if s else None,
        "rss_growth_after_1min_mib": growth(s, 1, 60.0),
        "gpu_growth_after_1min_mib": growth(s, 2, 60.0),
        "samples": watcher.samples,
        "point": {k: v for k, v in p.items() if k != "receiver_output"},
    }
    if doc["lossless"] and not doc["error"]:
        doc["soak_fold_minutes"] = p["seconds"] / 60
        doc["soak_fold_lost"] = p["lost"]
    print(json.dumps({k: v for k, v in doc.items() if k not in ("samples", "point")}, indent=1))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":
    main()
