"""Many nodes, one observation (issue 16): the aggregate lossless rate of 1, 2 and 4
nodes on one machine, and the merge latency, from a sub-integration's last packet to
its row on disk.

Setup, per node count N (`--nodes`, default 1,2,4): a Dask scheduler, N node
workers (each in its own network namespace with a veth on a bridge when root, else
on loopback ports) and a merger worker (cluster/local.py `local_nodes`), started once
per N. The band is the demo's (`voltstream demo --nodes N`): N x 32 channels of
62.5 kHz around 1420 MHz, 2 pols, 8-bit YNAO packets of 64 samples (8216 bytes), the
demo's pulsar at DM 26.833; it is synthesised once per N in memory and split into
subbands as the simulator does (bench/cluster_traffic.py), not by the simulator
subprocess, because the benchmark must know when each packet was due. One node's
stream at the telescope's own rate is 0.0642 Gb/s ("x real time" below).

Each cluster's first observation (0.5 s of rows at real time) is its warm-up: fresh
worker processes import and plan on their first rows, which costs seconds here; it
is reported as the cold start and not rated. Then, for each total rate R in
`--rates` (Gb/s of UDP payload over all nodes, rising), one observation planned as
the demo plans it (`demo_plan`: nbin 128, sub-integrations of `--tsub` S, capture
chunks of 32 packets): one paced `_core.Sender` per node at R / N, every node's
packet p due at the same Unix time T0 + p dt; the observation ends 2 s after the
last sender. `--seconds` D of rows are measured; one more sub-integration of data
(at least 0.25 s) follows them, so that every measured row leaves its node in the
stream (a node holds a row until its capture chunk leaves the reorder window, 4
chunks on), not in the flush at the stream's end.

A rate is lossless when every node received every packet sent (capture `lost` 0
and received == sent), no node or sender failed and every row was written with every
node's part (rows written == rows complete). A run of a few seconds can be lossless
above what the nodes sustain: their socket buffers (64 MiB) and queues hold the
backlog, and they fold it after the senders stop. So a run also has to keep up to
count as sustained: its rows' merge latency must not grow with time (the median
slope between rows below 0.1 s per s of sending). The rates stop at N's first rate
with any loss; the summary gives the highest lossless and the highest sustained.

Merge latency of row k = the Unix time the merger had it on disk (fsync'd; merger
status `rows_at`) - the Unix time its last packet was due: the packet holding sample
ceil(((k + 1) S + d) / tsamp) - 1, d the largest dispersion delay of the band's
channels behind its centre (the folder's reference; at most 0.3 ms here, counted). It covers
the capture's reorder window (at most `window_wait_s`, 128 packets' time at the
node's rate), the node's dedispersion and fold, the call to the merger, the merge
and the append. A sender that fell behind its schedule (its `late_s`, the most a
burst started after its due time, above 1 ms) is flagged: the latency then counts
from when the packet was due, not sent. The merger's own figure (`merger_latency_s`:
the arrival of the part that completed a row to its fsync) is kept beside it.

Same-run baseline: one node's CPU fold alone (`NodeFold`, the code of every node's
fold) of node 0's subband from memory in the capture's chunks, in samples per second
and as Gb/s of packets; the aggregate rate is compared with N x that. The nodes, the
merger, the scheduler and the senders all share this machine's cores: with fewer
cores than N + 1 busy processes the aggregate cannot scale with N, and the output
says so. bench/cluster_node_alone.py runs one node's task without Dask, with and
without the merger's writes, to tell the parts apart.

`--device gpu`: every node folds on the GPU (cluster/engines.py `GpuRows`): on one
GPU, one worker per node sharing it, as the issue asks; the same-run baseline is then
one node's GPU fold alone.

`--geometry ynao` (issue 29): each node a real YNAO subband, 32 x 4 MHz channels, 2
pols, 8-bit complex: 62 500 packets of 8216 bytes a second, 4.1 Gb/s a node (its
"real time"); 4 nodes by default. The nodes' capture chunks are their own (a GPU node's
about 32 MiB, as `voltstream fold --listen` sizes them; a CPU node's the capture's
default); 0.05 s of the band is synthesised and repeated. Beside the cluster, in the
same run: the one-process live fold (`voltstream fold --listen --device D`, the
single-machine path a node now is plus its row sink) of node 0's subband at each
per-node rate of the largest N (bench/cluster_single.py: sustained = lossless and
kept up). The JSON's `cluster_ynao_4nodes_sustained_gbps` is 4 nodes' highest
sustained total rate, `cluster_node_vs_single_ratio` a node's share of it over the
one process's highest sustained rate (`--single yes` runs that baseline for the
demo geometry too).

    python bench/cluster.py [--geometry demo|ynao] [--nodes 1,2,4] [--rates 0.05,...]
                            [--seconds 4] [--tsub 0.25] [--device cpu|gpu]
                            [--single auto|yes|no] [--json docs/results/cluster.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_single import headline, single_fold, single_table  # noqa: E402
from cluster_traffic import (  # noqa: E402
    GEOMETRIES,
    Band,
    BandSender,
    Geometry,
    band_lead_s,
    fold_ceiling,
    last_packet_of_row,
    realtime_gbps,
)
from e2e_receivers import cpu_model  # noqa: E402
from voltstream.capture.config import CaptureSettings  # noqa: E402
from voltstream.capture.defaults import PACKETS_PER_CHUNK  # noqa: E402
from voltstream.cli.cluster import demo_plan, held_for  # noqa: E402
from voltstream.cluster.driver import run_observation  # noqa: E402
from voltstream.cluster.local import local_nodes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: Seconds the observation runs on after the last sender: the last packets arrive
#: and the tail row leaves its nodes (the driver's stop ends every node).
GRACE_S = 2.0
#: A sender whose bursts started this far behind their due time fell behind: ten
#: of its 100 us pacing quanta.
BEHIND_S = 1e-3
#: Packets per capture chunk, as `demo_plan` asks of every node.
CHUNK_PACKETS = 32
#: A run kept up when its rows' merge latency grew by less than this many seconds
#: per second of sending (the nodes or the merger fell less than 10 % behind the
#: senders), or by less than `RISE_NOISE_S` over the whole run (the append's jitter).
KEEP_UP_SLOPE = 0.1
RISE_NOISE_S = 0.1
#: Seconds of rows in each cluster's first, unrated observation (the cold start).
WARMUP_S = 0.5
#: Samples of node 0's subband its fold alone is timed on, in the YNAO geometry (the
#: demo's: all of them).
CEILING_SAMPLES = 1 << 20
#: Default node counts and total rates (Gb/s, rising) per geometry.
DEFAULT_NODES = {"demo": "1,2,4", "ynao": "4"}
DEFAULT_RATES = {"demo": "0.05,0.07,0.1,0.14,0.2,0.28,0.4,0.56,0.8",
                 "ynao": "2,4,8,16.4,24,32"}  # fmt: skip


def machine() -> dict:
    return {
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def git_commit() -> dict:
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True)
        return r.stdout.strip()

    # Dirty: tracked files changed (a results file not yet committed does not count).
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": dirty}


def cpu_seconds(procs: dict[str, Any]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each cluster process with its children
    (a nanny's worker), and of this process alone (the senders, the driver, the
    client; the cluster's processes are its children)."""
    import psutil

    def of(p: Any) -> float:
        try:
            t = p.cpu_times()
            return float(t.user + t.system)
        except psutil.NoSuchProcess:
            return 0.0

    def tree(pid: int) -> float:
        try:
            p = psutil.Process(pid)
            return of(p) + sum(of(c) for c in p.children(recursive=True))
        except psutil.NoSuchProcess:
            return 0.0

    out = {name: tree(p.pid) for name, p in procs.items()}
    out["bench"] = of(psutil.Process())
    return out


def one_run(nodes: Any, band: Band, rate: float, a: argparse.Namespace, workdir: Path) -> dict:
    """One observation at ``rate`` Gb/s in all; its record (see `measure`), with the
    share of a core each process used while the senders sent (where the cores went)."""
    n = band.n
    names = [f"node{i}" for i in range(n)]
    archive = workdir / f"n{n}-{rate:g}.fits"
    plan, _ = demo_plan(names, nodes.dests, archive, a.tsub, a.seconds, seed=a.seed,
                        device=a.device, **plan_geometry(a))  # fmt: skip
    tx = BandSender(nodes.dests, band.packets(plan.jobs), band.fmt.packet_len, rate)
    cpu: list[tuple[float, dict]] = []

    def start() -> None:
        cpu.append((time.monotonic(), cpu_seconds(nodes.cluster.procs)))
        tx.start()

    def sent() -> bool:
        if not tx.done():
            return False
        if len(cpu) == 1:
            cpu.append((time.monotonic(), cpu_seconds(nodes.cluster.procs)))
        return True

    try:
        report = run_observation(nodes.cluster.client, plan, on_ready=start,
                                 stop_when=held_for(sent, GRACE_S))  # fmt: skip
    finally:
        tx.join()
        archive.unlink(missing_ok=True)
    r = measure(report, plan, band, tx, rate, a)
    if len(cpu) == 2:
        (t0, c0), (t1, c1) = cpu
        r["cpu_share"] = {k: (c1[k] - c0.get(k, 0.0)) / (t1 - t0) for k in c1}
    return r


def measure(report: dict, plan: Any, band: Band, tx: BandSender, rate: float,
            a: argparse.Namespace) -> dict:  # fmt: skip
    fmt, n = band.fmt, band.n
    nodes = []
    for i, job in enumerate(plan.jobs):
        r = report["nodes"][job.node]
        cap = (r["task"] or {}).get("capture") or {}
        tot = cap.get("totals") or {}
        s = tx.sends[i]
        received, missing = int(tot.get("received", 0)), int(tot.get("missing", 0))
        capture_lost = int(cap.get("lost", 0))
        # Missing packets are in the capture's `lost` already; what never arrived
        # after the node's last packet is only in sent - received.
        lost = capture_lost + max(0, s.packets - received - missing)
        due_end = tx.due(band.packets_per_node - 1)
        nodes.append({
            "node": job.node, "dest": s.dest, "sent": s.packets, "received": received,
            "capture_lost": capture_lost, "not_received": s.packets - received, "lost": lost,
            "totals": tot, "sender_late_s": s.late_s,
            "sender_end_behind_s": None if s.ended_at is None else s.ended_at - due_end,
            "sender_error": s.error, "node_error": r["error"],
            "rows_sent": (r["task"] or {}).get("rows_sent"),
            "rows_missing": r["merger"].get("rows_missing", 0),
        })  # fmt: skip
    m = report["merge"]
    rows_at = {int(k): float(v) for k, v in m["rows_at"].items()}
    lead = band_lead_s(plan.jobs[0])
    measured = range(int(round(a.seconds / a.tsub)))
    lat, due = {}, {}
    for k in measured:
        p = last_packet_of_row(k, a.tsub, lead, fmt)
        if k in rows_at and p < band.packets_per_node:
            due[k] = tx.due(p)
            lat[k] = rows_at[k] - due[k]
    growth = _growth([due[k] for k in lat], list(lat.values()))
    rise = None if growth is None else growth * (max(due.values()) - min(due.values()))
    kept_up = growth is None or growth < KEEP_UP_SLOPE or rise is None or rise < RISE_NOISE_S
    window = CaptureSettings.of(tx.sends[0].dest, **plan.jobs[0].capture).chunks
    ends = [s.ended_at for s in tx.sends if s.ended_at is not None]
    assert tx.t0 is not None
    span = max(ends) - tx.t0 if ends else float("nan")
    sent_bytes = sum(s.bytes for s in tx.sends)
    late = max(s.late_s for s in tx.sends)
    lossless = (
        all(x["lost"] == 0 and x["sent"] == band.packets_per_node and not x["sender_error"]
            and not x["node_error"] and x["rows_missing"] == 0 for x in nodes)
        and m["rows_written"] == m["rows_complete"] > 0 and len(lat) == len(measured)
    )  # fmt: skip
    return {
        "nodes": n,
        "asked_gbps": rate,
        "asked_x_realtime": rate / (n * realtime_gbps(fmt)),
        "sent_gbps": sent_bytes * 8 / span / 1e9 if span > 0 else None,
        "packets_per_node": band.packets_per_node,
        "per_node": nodes,
        "rows_written": m["rows_written"],
        "rows_complete": m["rows_complete"],
        "rows_by_rule": m["rows_by_rule"],
        "rows_measured": len(lat),
        "latency_by_row_s": {str(k): v for k, v in lat.items()},
        "merge_latency_s": _percentiles(list(lat.values())),
        "merger_latency_s": {k: _finite(v) for k, v in m["merge_latency_s"].items()},
        # A chunk leaves the capture when a packet `window` chunks ahead arrives: at
        # this rate that alone holds a row's last packet up to this long.
        "window_wait_s": window.window_for(a.node_ppc, 1 / tx.dt) * a.node_ppc * tx.dt,
        "latency_growth": growth,
        "latency_rise_s": rise,
        "kept_up": bool(kept_up),
        "sender_late_s": late,
        "sender_behind": late > BEHIND_S,
        "lossless": bool(lossless),
    }


def _growth(t: list[float], lat: list[float]) -> float | None:
    """How fast the latency grew with the rows' due time (s per s): the median of the
    slopes between every two rows (Theil-Sen), which the first row's archive creation
    and one slow fsync do not sway as a least-squares line would."""
    if len(t) < 3:
        return None
    slopes = [(lat[j] - lat[i]) / (t[j] - t[i]) for i in range(len(t))
              for j in range(i + 1, len(t)) if t[j] > t[i]]  # fmt: skip
    return float(np.median(slopes)) if slopes else None


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    v = np.asarray(values)
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max())}  # fmt: skip


def _finite(x: float) -> float | None:
    """NaN (the merger's figure with no row timed) as JSON's null."""
    return None if x != x else float(x)


def summarise(n: int, runs: list[dict], ceiling: dict, cores: int) -> dict:
    """N's highest lossless rate, and its highest sustained one (lossless and kept
    up), beside N x one node's fold ceiling."""
    per_node = ceiling["gbps_per_node"]

    def best(rs: list[dict]) -> dict | None:
        if not rs:
            return None
        r = rs[-1]  # the rates rise
        return {
            "gbps": r["asked_gbps"],
            "sent_gbps": r["sent_gbps"],
            "x_realtime": r["asked_x_realtime"],
            "merge_latency_s": r["merge_latency_s"],
            "window_wait_s": r["window_wait_s"],
            "kept_up": r["kept_up"],
            "ratio_to_n_x_ceiling": r["asked_gbps"] / (n * per_node),
        }

    lossy = [r["asked_gbps"] for r in runs if not r["lossless"]]
    return {
        "nodes": n,
        "lossless": best([r for r in runs if r["lossless"]]),
        "sustained": best([r for r in runs if r["lossless"] and r["kept_up"]]),
        "first_lossy_gbps": lossy[0] if lossy else None,
        "ceiling": ceiling,
        "n_x_ceiling_gbps": n * per_node,
        "cores_short": n + 1 > cores,
    }


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}"


def _lat(d: dict | None) -> str:
    d = d or {}
    return f"{_ms(d.get('p50'))} / {_ms(d.get('p99'))} / {_ms(d.get('max'))}"


def _rate(best: dict | None) -> str:
    return "none" if best is None else f"{best['gbps']:g} ({best['x_realtime']:.2f})"


def table(out: dict) -> list[str]:
    lines = [
        "| nodes | asked Gb/s | x real time | sent Gb/s | packets/node | received (per node) "
        "| lost | rows written / complete | merge latency p50 / p99 / max ms | window wait ms "
        "| growth s/s | merger alone p50 ms | sender late ms | lossless | kept up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["runs"]:
        recv = ",".join(str(x["received"]) for x in r["per_node"])
        lost = sum(x["lost"] for x in r["per_node"])
        sent = f"{r['sent_gbps']:.3f}" if r["sent_gbps"] else "-"
        late = f"{r['sender_late_s'] * 1e3:.2f}" + (" (behind)" if r["sender_behind"] else "")
        growth = "-" if r["latency_growth"] is None else f"{r['latency_growth']:.2f}"
        lines.append(
            f"| {r['nodes']} | {r['asked_gbps']:g} | {r['asked_x_realtime']:.2f} | {sent} | "
            f"{r['packets_per_node']} | {recv} | {lost} | {r['rows_written']} / "
            f"{r['rows_complete']} | {_lat(r['merge_latency_s'])} | "
            f"{_ms(r['window_wait_s'])} | {growth} | {_ms(r['merger_latency_s']['p50'])} | "
            f"{late} | {'yes' if r['lossless'] else 'NO'} | {'yes' if r['kept_up'] else 'NO'} |"
        )
    lines += [
        "",
        "| nodes | highest lossless Gb/s (x real time) | its merge latency p50 / p99 / max ms "
        "| highest sustained Gb/s (x real time) | its merge latency p50 / p99 / max ms | "
        "first lossy Gb/s | one node's fold alone Gb/s (x real time) | N x that | "
        "sustained / (N x that) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in out["summary"]:
        c, lo, su = s["ceiling"], s["lossless"], s["sustained"]
        ratio = "-" if su is None else f"{su['ratio_to_n_x_ceiling']:.2f}"
        lines.append(
            f"| {s['nodes']} | {_rate(lo)} | {_lat(lo and lo['merge_latency_s'])} | {_rate(su)} | "
            f"{_lat(su and su['merge_latency_s'])} | {s['first_lossy_gbps'] or 'none'} | "
            f"{c['gbps_per_node']:.3f} ({c['x_realtime']:.1f}) | {s['n_x_ceiling_gbps']:.3f} | "
            f"{ratio} |"
        )
    lines += single_table(out)
    for w in out["warmups"]:
        lines.append(f"cold start, {w['nodes']} node(s) (each cluster's first observation, "
                     f"{w['asked_gbps']:.3f} Gb/s, not rated): merge latency p50 / p99 / max "
                     f"{_lat(w['merge_latency_s'])} ms, lost "
                     f"{sum(x['lost'] for x in w['per_node'])}")  # fmt: skip
    cores = out["machine"]["cpus_allowed"]
    if any(s["cores_short"] for s in out["summary"]):
        lines.append(
            f"\nnote: {cores} cores for N node processes + the merger + the scheduler + "
            f"the senders: past N = {max(1, cores - 1)} the nodes share cores, so the "
            "aggregate cannot scale with N here; N x one node's ceiling is what N cores "
            "each would give."
        )
    lines.append(
        "note: sustained = lossless and kept up (merge latency growing < "
        f"{KEEP_UP_SLOPE:g} s per s of sending): a run of a few seconds is lossless above "
        "what the nodes sustain while their socket buffers and queues hold the backlog."
    )
    if any(r["sender_behind"] for r in out["runs"]):
        lines.append("note: (behind): a sender started a burst over 1 ms late; that run's "
                     "latency counts from when its packets were due, not sent.")  # fmt: skip
    return lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = ap.add_argument
    add("--geometry", choices=sorted(GEOMETRIES), default="demo",
        help="each node's subband: the demo's 32 x 62.5 kHz, or YNAO's 32 x 4 MHz")  # fmt: skip
    add("--nodes", default=None, help="node counts, comma-separated (demo: 1,2,4; ynao: 4)")
    add("--rates", default=None,
        help="total rates, Gb/s of UDP payload over all nodes, rising (demo: 0.05 .. 0.8; "
             "ynao: 2 .. 32)")  # fmt: skip
    add("--seconds", type=float, default=4.0, help="seconds of data whose rows are measured")
    add("--tsub", type=float, default=0.25, help="sub-integration length, s")
    add("--device", choices=["cpu", "gpu"], default="cpu",
        help="where nodes fold (gpu: every node on GPU 0, sharing it)")  # fmt: skip
    add("--single", choices=["auto", "yes", "no"], default="auto",
        help="also one process's live fold of node 0's subband (auto: ynao)")  # fmt: skip
    add("--netns", choices=["auto", "yes", "no"], default="auto",
        help="nodes in network namespaces (auto: when root)")  # fmt: skip
    add("--seed", type=int, default=1)
    add("--json", default=None, metavar="PATH")
    a = ap.parse_args(argv)
    a.nodes = a.nodes or DEFAULT_NODES[a.geometry]
    a.rates = a.rates or DEFAULT_RATES[a.geometry]
    return a


def plan_geometry(a: argparse.Namespace) -> dict:
    """`demo_plan`'s keywords for the geometry: the channels' width, the nodes' chunks."""
    g: Geometry = GEOMETRIES[a.geometry]
    return {"chan_bw_mhz": g.chan_bw_mhz, "packets_per_chunk": g.packets_per_chunk}


def node_packets_per_chunk(a: argparse.Namespace) -> int:
    """Packets per capture chunk of each node: the geometry's, else the node's own (a
    GPU node's as the one-host live fold sizes them, a CPU node's the default)."""
    from voltstream.capture.config import CaptureSettings
    from voltstream.pipeline.live import GPU_CHUNKING

    g: Geometry = GEOMETRIES[a.geometry]
    if g.packets_per_chunk:
        return g.packets_per_chunk
    if a.device == "gpu":
        return GPU_CHUNKING.sized(g.fmt, CaptureSettings.of("127.0.0.1:0"))[0]
    return PACKETS_PER_CHUNK


def node_count(n: int, a: argparse.Namespace, rates: list[float], tail: float,
               workdir: Path, out: dict, single: bool = False) -> None:  # fmt: skip
    """N's ceiling, its cluster's warm-up and its rising rates, added to ``out``; with
    ``single``, then the one-process live fold of node 0's subband at N's per-node
    rates (``out["single"]``)."""
    g: Geometry = GEOMETRIES[a.geometry]
    band = Band(n, a.seconds + tail, seed=a.seed, fmt=g.fmt, unit_s=g.unit_s)
    names = [f"node{i}" for i in range(n)]
    plan, _ = demo_plan(names, ["127.0.0.1:9"] * n, workdir / "x.fits", a.tsub, a.seconds,
                        seed=a.seed, device=a.device, **plan_geometry(a))  # fmt: skip
    spp = band.fmt.samples_per_packet
    part = band.parts[0] if g.unit_s is None else band.parts[0][:CEILING_SAMPLES]
    ceiling = fold_ceiling(plan.jobs[0], part, a.node_ppc * spp)
    print(f"cluster bench: {n} node(s) ({a.geometry}); one node's fold alone: "
          f"{ceiling['samples_per_s'] / 1e6:.2f} M samples/s = {ceiling['gbps_per_node']:.3f} "
          f"Gb/s ({ceiling['x_realtime']:.1f} x real time)", flush=True)  # fmt: skip
    runs = []
    # This machine's load before N's runs: other work on these cores (another
    # checkout's tests, say) lowers every rate and lengthens every latency.
    load = os.getloadavg()
    with local_nodes(names, workdir / f"dask{n}", a.netns) as nodes:
        out["where"] = nodes.where
        # A first observation on fresh workers pays their imports (astropy in the
        # merger, the FFTs in the nodes) and first calls, seconds on a busy machine:
        # it is run, reported as the cold start, and not rated.
        # At the telescope's own rate (the demo's): quick, and far from any limit; at
        # most the first rate asked (YNAO's real time is 4.1 Gb/s a node).
        warm_s = WARMUP_S if g.unit_s is None else min(WARMUP_S, a.seconds)
        w = argparse.Namespace(**dict(vars(a), seconds=warm_s))
        rt = n * realtime_gbps(band.fmt)
        rt = rt if g.unit_s is None else min(rt, rates[0])
        warm_band = Band(n, warm_s + tail, seed=a.seed, fmt=g.fmt, unit_s=g.unit_s)
        warm = one_run(nodes, warm_band, rt, w, workdir)
        out["warmups"].append(warm)
        lat = warm["merge_latency_s"]
        print(f"  {n} node(s), warm-up ({warm_s:g} s of rows at {rt:.3f} Gb/s): "
              f"merge latency max {_ms(lat['max'])} ms", flush=True)  # fmt: skip
        for rate in rates:
            r = one_run(nodes, band, rate, a, workdir)
            runs.append(r)
            lat = r["merge_latency_s"]
            print(f"  {n} node(s) at {rate:g} Gb/s: lost {sum(x['lost'] for x in r['per_node'])}"
                  f", rows {r['rows_written']}/{r['rows_complete']}, latency p50 "
                  f"{_ms(lat['p50'])} ms, max {_ms(lat['max'])} ms, growth "
                  f"{r['latency_growth'] or 0:.2f}, {'lossless' if r['lossless'] else 'LOSSY'}",
                  flush=True)  # fmt: skip
            if not r["lossless"]:
                break
    out["runs"] += runs
    summary = summarise(n, runs, ceiling, out["machine"]["cpus_allowed"])
    out["summary"].append(dict(summary, loadavg_before=list(load)))
    if single:  # the same subband, the same per-node rates, one `fold --listen` process
        job = plan.jobs[0]
        assert job.fmt is not None
        packets = job.fmt.packetize(band.parts[0], 0, job.obs, subband=0)
        ppc = g.packets_per_chunk
        out["single"] = dict(single_fold(band, job, packets, [r / n for r in rates], a, ppc,
                                         workdir), nodes=n)  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    counts = [int(x) for x in a.nodes.split(",")]
    rates = sorted(float(x) for x in a.rates.split(","))
    a.node_ppc = node_packets_per_chunk(a)
    single = a.single == "yes" or (a.single == "auto" and a.geometry == "ynao")
    # The measured rows, then one more sub-integration (at least 0.25 s) of data
    # after them: it carries them out of their nodes' chunks and FFT blocks.
    tail = max(a.tsub, 0.25)
    info = machine()
    if a.device == "gpu":
        import cupy

        info["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    settings = {"geometry": a.geometry, "nodes": counts, "rates_gbps": rates,
                "seconds": a.seconds, "tail_s": tail, "tsub_s": a.tsub, "device": a.device,
                "seed": a.seed, "grace_s": GRACE_S, "packets_per_chunk": a.node_ppc,
                "node_realtime_gbps": realtime_gbps(GEOMETRIES[a.geometry].fmt)}  # fmt: skip
    out: dict[str, Any] = {
        "machine": info,
        "date": now(),
        "command": " ".join(["python", "bench/cluster.py", *argv]),
        "git": git_commit(),
        "settings": settings,
        "warmups": [],
        "runs": [],
        "summary": [],
    }
    workdir = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        for n in counts:
            node_count(n, a, rates, tail, workdir, out, single=single and n == max(counts))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.update(headline(out, a.geometry))
    print(f"nodes {out.get('where', '?')}; {info['cpus_allowed']} cores")
    for line in table(out):
        print(line)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
