"""The filterbank quantiser's rate (search/quantise.py ``RunningQuantiser.row``), beside
its definition computed in float64 temporaries as it was until session 16, in one run.

Why: a live filterbank quantises every output sample on the capture's consumer thread
(pipeline/filterbank.py ``RowWriter``), the thread that also feeds the GPU. At the
e2e bench's filterbank_ynao (2048 channels of 256 us) and 32 Gb/s that is about 62 M
values a second; the float64 version ran about 145 M/s on one core here.

    .venv/bin/python bench/quantise.py --json /tmp/quantise.json
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from voltstream.search.quantise import PER_SIGMA, ZERO, RunningQuantiser


def float64_row(q: RunningQuantiser, rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The 8-bit row as the quantiser computed it before session 16 (the statistics
    updated the same way, the codes through float64 temporaries)."""
    q.update(rows, valid)
    scale = np.where(np.sqrt(q.var) > 0, np.sqrt(q.var) / PER_SIGMA, 1.0)
    codes = np.rint((rows - q.mean) / scale) + ZERO
    codes[~valid] = ZERO
    q.clipped += int(np.count_nonzero((codes < 0) | (codes > 255)))
    return np.clip(codes, 0, 255).astype(np.uint8)


def rate(fn, rows: np.ndarray, valid: np.ndarray, repeats: int) -> float:
    fn(rows, valid)  # warm: pages, statistics
    t = time.perf_counter()
    for _ in range(repeats):
        fn(rows, valid)
    return rows.size * repeats / (time.perf_counter() - t) / 1e6


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsblk", type=int, default=4096, help="output samples a row")
    ap.add_argument("--channels", type=int, default=2048)
    ap.add_argument("--npol", type=int, default=1, help="products (1: total intensity)")
    ap.add_argument("--lost", type=float, default=0.0, help="share of samples lost")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((args.nsblk, args.npol, args.channels)).astype(np.float32)
    rows = rows * 3 + 10
    valid = rng.random(args.nsblk) >= args.lost
    npol, nchan = args.npol, args.channels
    now_q, old_q = RunningQuantiser(npol, nchan), RunningQuantiser(npol, nchan)
    out = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "command": "python bench/quantise.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if k != "json"),
        "values_per_row": rows.size,
        "float64_mvalues_per_s": rate(lambda r, v: float64_row(old_q, r, v), rows, valid,
                                      args.repeats),
        "quantiser_mvalues_per_s": rate(now_q.row, rows, valid, args.repeats),
    }  # fmt: skip
    out["speedup"] = out["quantiser_mvalues_per_s"] / out["float64_mvalues_per_s"]
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
