"""One cluster node without the cluster (issue 16; beside bench/cluster.py): where does
a node's rate go?

A node's task (cluster/node.py `NodeRun`: capture over UDP, dedisperse, fold, hand
each row to the merger) runs in this process with no Dask: its subband of the demo's
band (bench/cluster_traffic.py) comes from the cluster benchmark's paced sender over
loopback, and its rows go to a stand-in merger that notes when each arrived; then
again with the stand-in also handing each row to a real `Merger` (the PSRFITS archive
appended and fsync'd) in the node's thread, as the node waits for the actor's `put`
in the cluster. Per rate and merger: packets lost, each row's latency from its last
packet's due time to its hand-over (before the write), and how fast that latency
grew (s per s of sending: above 0.1 the node fell behind). Last, the merger's cost
per row alone: `Merger.put` of every node's part of 30 rows of the 4-node demo band
(the archive appended and fsync'd in this process's temporary directory).

    python bench/cluster_node_alone.py [--rates 0.1,0.2,0.4] [--json F]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import KEEP_UP_SLOPE, _growth, _lat, _percentiles, git_commit, machine, now  # noqa: E402
from cluster_traffic import Band, BandSender, band_lead_s, last_packet_of_row  # noqa: E402
from voltstream.cli.cluster import demo_plan  # noqa: E402
from voltstream.cluster.merger import Merger  # noqa: E402
from voltstream.cluster.node import NodeRun  # noqa: E402


class StandIn:
    """The merger's methods as the node calls them; ``put`` times each row."""

    def __init__(self, merger: Merger | None) -> None:
        self.merger, self.at = merger, {}

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            if name == "put":
                self.at[int(args[1])] = time.time()
            return getattr(self.merger, name)(*args) if self.merger is not None else 0

        return call


def one_rate(band: Band, rate: float, merger: bool, a: argparse.Namespace, workdir: Path) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        dest = f"127.0.0.1:{s.getsockname()[1]}"
    archive = workdir / f"alone-{rate:g}.fits"
    plan, _ = demo_plan(["node0"], [dest], archive, a.tsub, a.seconds)
    job = replace(plan.jobs[0], idle_timeout_s=1.0)
    rows = StandIn(Merger(plan.merge) if merger else None)
    tx = BandSender([dest], band.packets(plan.jobs), band.fmt.packet_len, rate)
    threading.Timer(0.5, tx.start).start()  # the node's socket is bound by then
    report = NodeRun(job, rows, threading.Event()).run()
    tx.join()
    archive.unlink(missing_ok=True)
    lead = band_lead_s(job)
    due = {k: tx.due(last_packet_of_row(k, a.tsub, lead, band.fmt))
           for k in range(round(a.seconds / a.tsub)) if k in rows.at}  # fmt: skip
    lat = [rows.at[k] - t for k, t in due.items()]
    growth = _growth(list(due.values()), lat)
    return {
        "asked_gbps": rate,
        "merger": merger,
        "sent": tx.sends[0].packets,
        "received": report["capture"]["totals"]["received"],
        "lost": report["capture"]["lost"],
        "latency_s": _percentiles(lat),
        "latency_growth": growth,
        "kept_up": growth is None or growth < KEEP_UP_SLOPE,
    }


def merger_row_cost(n: int, rows: int, workdir: Path) -> dict:
    """Seconds per row of `Merger.put` for every node's part of ``rows`` rows of the
    N-node demo band (random profiles): the first (the archive created) and the rest."""
    import numpy as np

    names = [f"node{i}" for i in range(n)]
    plan, _ = demo_plan(names, ["127.0.0.1:9"] * n, workdir / "merge.fits", 0.25, 4.0)
    m, nbin = Merger(plan.merge), plan.merge.settings.nbin
    rng = np.random.default_rng(1)
    took = []
    for k in range(rows):
        parts = [(j.node, k, rng.random((m.npol, j.obs.nchan, nbin)),
                  np.full((j.obs.nchan, nbin), 10.0), np.full(j.obs.nchan, 1280.0))
                 for j in plan.jobs]  # fmt: skip
        t = time.perf_counter()
        for p in parts:
            m.put(*p)
        took.append(time.perf_counter() - t)
    (workdir / "merge.fits").unlink(missing_ok=True)
    return {"nodes": n, "rows": rows, "first_s": took[0], "median_s": float(np.median(took[1:])),
            "max_s": max(took[1:])}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="0.1,0.2,0.4", help="Gb/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--tsub", type=float, default=0.25)
    ap.add_argument("--json", default=None, metavar="PATH")
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    band = Band(1, a.seconds + max(a.tsub, 0.25))
    workdir = Path(tempfile.mkdtemp(prefix="bench-node-"))
    runs = [one_rate(band, float(r), merger, a, workdir)
            for merger in (False, True) for r in a.rates.split(",")]  # fmt: skip
    cost = merger_row_cost(4, 30, workdir)
    workdir.rmdir()
    print("| asked Gb/s | merger | lost | latency p50 / p99 / max ms | growth s/s | kept up |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        g = "-" if r["latency_growth"] is None else f"{r['latency_growth']:.2f}"
        print(f"| {r['asked_gbps']:g} | {'real' if r['merger'] else 'stand-in'} | {r['lost']} | "
              f"{_lat(r['latency_s'])} | {g} | {'yes' if r['kept_up'] else 'NO'} |")  # fmt: skip
    command = " ".join(["python", "bench/cluster_node_alone.py", *argv])
    ms = {k: f"{cost[k] * 1e3:.1f}" for k in ("first_s", "median_s", "max_s")}
    print(f"merger alone, 4 nodes' parts per row: first row {ms['first_s']} ms, then median "
          f"{ms['median_s']} ms, max {ms['max_s']} ms")  # fmt: skip
    out = {"machine": machine(), "date": now(), "command": command, "git": git_commit(),
           "runs": runs, "merger_row": cost}  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
