"""The cluster benchmark's same-run baseline for a node's rate (bench/cluster.py): the
one-process live fold, `voltstream fold --listen ... --device D`, of node 0's subband,
fed by the cluster benchmark's paced sender (bench/cluster_traffic.py) at each rate a
node was fed, on this machine's loopback.

A rate is sustained when the fold received every packet sent (capture `lost` 0,
received == sent) and kept up: stopped (SIGINT, as the cluster's driver stops its
nodes) `STOP_AFTER_S` after its sender, it had no more than ``KEEP_UP_SLOPE`` of the
sending time plus ``RISE_NOISE_S`` of captured chunks left to fold (`lag_s`: from the
stop to its capture's end, which is when the last chunk has been handed to the fold;
the CPU fold's queue of host samples after that is counted in `samples_not_folded`).
The rates rise and stop at the first one not sustained. `headline` and `single_table`:
the JSON's headline figures and the table beside the nodes'.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_traffic import Band, BandSender
from e2e_receivers import free_port, udp_bound

#: Seconds between the sender's end and the stop: the last packets are read.
STOP_AFTER_S = 0.5
#: A fold that had more than this share of the sending time left to fold at the stop
#: fell behind (as bench/cluster.py's nodes: latency growing by 0.1 s per s).
KEEP_UP_SLOPE = 0.1
RISE_NOISE_S = 0.1


def fold_listen_argv(dest: str, job: Any, a: Any, out: Path, ppc: int | None) -> list[str]:
    """`voltstream fold --listen` of the job's subband as the node folds it: the same
    format, dispersion, period, bins, sub-integrations and device."""
    from voltstream.cli.pulsar import DEMO_PULSAR

    fmt, s = job.fmt, job.settings
    argv = [sys.executable, "-m", "voltstream.cli", "fold", "--listen", dest, "--format", "ynao",
            "--chan-bw", f"{fmt.chan_bw_mhz:g}", "--freq", f"{job.obs.freq_mhz:.6f}",
            "--dm", str(DEMO_PULSAR["dm"]), "--period", str(DEMO_PULSAR["period"]),
            "--nbin", str(s.nbin), "--tsub", f"{s.tsub_s:g}", "--device", a.device,
            "--duration", "3600", "--idle-timeout", "3600", "--no-status",
            "-o", str(out.with_suffix(".fits")),
            "--report", str(out.with_suffix(".json"))]  # fmt: skip
    return argv + (["--packets-per-chunk", str(ppc)] if ppc else [])


def single_run(band: Band, job: Any, packets: Any, rate: float, a: Any, ppc: int | None,
               workdir: Path) -> dict:  # fmt: skip
    """One observation of node 0's subband by one `fold --listen` process at ``rate``."""
    port = free_port()
    dest = f"127.0.0.1:{port}"
    out = workdir / f"single-{rate:g}"
    log = out.with_suffix(".log")
    with open(log, "w") as f:
        proc = subprocess.Popen(fold_listen_argv(dest, job, a, out, ppc), stdout=f,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        # "listening on": the capture runs (a GPU fold's engine is warmed up before it).
        deadline = time.monotonic() + 300
        while not (udp_bound(port) and "listening on" in log.read_text(errors="replace")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fold --listen did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        t_listen = time.time()
        tx = BandSender([dest], [packets], band.fmt.packet_len, rate)
        tx.start()
        tx.join()
        time.sleep(STOP_AFTER_S)
        t_stop = time.time()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    send = tx.sends[0]
    try:
        rep = json.loads(out.with_suffix(".json").read_text())
    except (OSError, ValueError):
        rep = {}
    tot = rep.get("totals") or {}
    received, lost = int(tot.get("received", 0)), int(rep.get("lost", 0) or 0)
    assert tx.t0 is not None
    span = (send.ended_at or t_stop) - tx.t0
    lag = t_listen + float(rep.get("duration_s", 0.0)) - t_stop if rep else None
    not_folded = int(rep.get("samples_not_folded", 0) or 0)
    kept_up = lag is not None and lag < KEEP_UP_SLOPE * span + RISE_NOISE_S and not not_folded
    lossless = bool(rep) and lost == 0 and received == send.packets == len(packets)
    return {
        "gbps": rate,
        "sent": send.packets,
        "received": received,
        "lost": lost,
        "sent_gbps": send.bytes * 8 / span / 1e9 if span > 0 else None,
        "sender_late_s": send.late_s,
        "sender_error": send.error,
        "lag_s": lag,
        "samples_not_folded": not_folded,
        "exit_status": proc.returncode,
        "pipeline": rep.get("pipeline"),
        "lossless": lossless,
        "kept_up": bool(kept_up),
        "sustained": bool(lossless and kept_up),
    }


def single_fold(band: Band, job: Any, packets: Any, rates: list[float], a: Any,
                ppc: int | None, workdir: Path) -> dict:  # fmt: skip
    """The rising rates until the first not sustained; the highest sustained."""
    runs = []
    for rate in rates:
        r = single_run(band, job, packets, rate, a, ppc, workdir)
        runs.append(r)
        print(f"  one process (fold --listen --device {a.device}) at {rate:g} Gb/s: lost "
              f"{r['lost']}, lag {r['lag_s'] if r['lag_s'] is None else round(r['lag_s'], 3)} s"
              f", {'sustained' if r['sustained'] else 'NOT sustained'}", flush=True)  # fmt: skip
        if not r["sustained"]:
            break
    ok = [r["gbps"] for r in runs if r["sustained"]]
    return {"runs": runs, "sustained_gbps": ok[-1] if ok else None}


def headline(out: dict, geometry: str) -> dict:
    """The figures issue 29 asks for: 4 YNAO nodes' highest sustained total rate, and
    a node's share of it over the one-process live fold's, same subband, same run
    (None where not measured); per node, the largest N's."""
    by_n = {s["nodes"]: s for s in out["summary"]}
    four = (by_n.get(4) or {}).get("sustained")
    n = max(by_n, default=0)
    su = (by_n.get(n) or {}).get("sustained")
    per_node = su["gbps"] / n if su else None
    single = (out.get("single") or {}).get("sustained_gbps")
    return {
        "cluster_ynao_4nodes_sustained_gbps": four["gbps"] if four and geometry == "ynao" else None,
        "cluster_node_sustained_gbps": per_node,
        "single_sustained_gbps": single,
        "cluster_node_vs_single_ratio": per_node / single if per_node and single else None,
    }


def single_table(out: dict) -> list[str]:
    """The one-process live fold beside the nodes, and the headline figures."""
    sg = out.get("single")
    if not sg:
        return []
    lines = [
        "",
        f"| one process: fold --listen --device {out['settings']['device']}, node 0's subband "
        f"| Gb/s (x real time) | sent Gb/s | lost | left to fold at the stop s | lossless "
        "| kept up |",
        "|---|---|---|---|---|---|---|",
    ]
    rt = out["settings"]["node_realtime_gbps"]
    for r in sg["runs"]:
        lag = "-" if r["lag_s"] is None else f"{r['lag_s']:.3f}"
        sent = f"{r['sent_gbps']:.3f}" if r["sent_gbps"] else "-"
        ok = " | ".join("yes" if r[k] else "NO" for k in ("lossless", "kept_up"))
        lines.append(f"| | {r['gbps']:g} ({r['gbps'] / rt:.2f}) | {sent} | {r['lost']} | {lag} "
                     f"| {ok} |")  # fmt: skip

    def gb(x: float | None) -> str:
        return "none" if x is None else f"{x:.3g}"

    ratio = out.get("cluster_node_vs_single_ratio")
    lines.append(
        f"per node: {gb(out.get('cluster_node_sustained_gbps'))} Gb/s sustained in the cluster "
        f"({sg['nodes']} nodes), {gb(out.get('single_sustained_gbps'))} Gb/s in one process; "
        f"node / one process: {'-' if ratio is None else f'{ratio:.2f}'}; 4 YNAO nodes "
        f"together: {gb(out.get('cluster_ynao_4nodes_sustained_gbps'))} Gb/s"
    )
    return lines
