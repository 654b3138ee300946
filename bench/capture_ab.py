"""Capture throughput before and after a change, in the same run: bench/capture.py
under two builds of the extension, taking turns, so drift of the machine falls on both.

Each build is a wheel (`maturin build --release`), installed into its own folder and
put first on PYTHONPATH for its turns; the benchmark script itself is this checkout's.
A round runs bench/capture.py once per build (drain: `--packets` pre-queued 8192-byte
packets emptied by each engine; sweep: the sender's limit for `--seconds`); the table
gives each build's median drain rate per engine and the ratio after/before.

    python bench/capture_ab.py --before .whl/before/*.whl --after .whl/voltstream-*.whl \
        [--rounds 3] [--engines socket,packet_ring] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).with_name("capture.py")


def install(wheel: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--no-compile", "--target", str(into), wheel],
        check=True,
    )  # fmt: skip
    return into


def one_round(site: Path, engines: str, packets: int, seconds: float) -> dict:
    """One bench/capture.py run importing voltstream from `site` only."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, PYTHONPATH=str(site))
        cmd = [
            sys.executable, str(BENCH), "--no-baselines", "--repeat", "1", "--rates", "0",
            "--engines", engines, "--packets", str(packets), "--seconds", str(seconds),
            "--json", out.name,
        ]  # fmt: skip
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def summarise(runs: dict[str, list[dict]]) -> list[dict]:
    rows = []
    engines = sorted({d["receiver"] for r in runs["before"] for d in r["drain"]})
    for e in engines:
        row: dict = {"engine": e}
        for label, rs in runs.items():
            drain = [d["gbps"] for r in rs for d in r["drain"] if d["receiver"] == e]
            # The drain names receivers "voltstream <engine>"; the sweep, engines.
            sweep = [s for r in rs for s in r["sweep"] if e.endswith(s["engine"])]
            row[label] = {
                "drain_gbps": drain,
                "drain_gbps_median": statistics.median(drain),
                "sweep_sent_gbps": [s["sent_gbps"] for s in sweep],
                "sweep_lost": [s["lost"] for s in sweep],
            }
        row["ratio"] = row["after"]["drain_gbps_median"] / row["before"]["drain_gbps_median"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", required=True, help="wheel of the build before the change")
    ap.add_argument("--after", required=True, help="wheel of the build after the change")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default="socket,packet_ring")
    ap.add_argument("--packets", type=int, default=40000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = {"before": a.before, "after": a.after}
        sites = {k: install(w, Path(tmp) / k) for k, w in wheels.items()}
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(max(1, a.rounds)):
            for label, site in sites.items():
                runs[label].append(one_round(site, a.engines, a.packets, a.seconds))
    rows = summarise(runs)
    print(f"## Capture drain rate, before and after, median of {a.rounds} alternating rounds\n")
    print("| engine | before Gb/s | after Gb/s | after/before | sweep lost before/after |")
    print("|---|---|---|---|---|")
    for r in rows:
        b, f = r["before"], r["after"]
        print(
            f"| {r['engine']} | {b['drain_gbps_median']:.1f} | {f['drain_gbps_median']:.1f} | "
            f"{r['ratio']:.2f} | {sum(b['sweep_lost'])}/{sum(f['sweep_lost'])} |"
        )
    out = {"before": a.before, "after": a.after, "rounds": a.rounds, "engines": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
