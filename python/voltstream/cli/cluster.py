"""Many nodes, one observation, from the command line (issue 16; docs/scale-out.md):
`voltstream demo --nodes N` on one machine and `voltstream fold --scheduler ...` on a
Dask cluster (commands.py dispatches here)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.cli.common import _now_mjd, _stop_event
from voltstream.errors import ConfigError

log = logging.getLogger("voltstream.cli.commands")

#: The cluster demo's band: four (N) YNAO subbands of 32 narrow channels, so that
#: N CPU folds keep up on a small machine: 32 x 62.5 kHz per node, 2 x 8-bit pols.
DEMO_CHAN_BW_MHZ = 0.0625
DEMO_FREQ_MHZ = 1420.0
DEMO_PORT = 7148
#: A cluster node's packets per chunk unless --packets-per-chunk says: small chunks,
#: since a node's row leaves about 4 chunks after its last packet (the capture's own
#: default, capture/defaults.py, is sized for one host's throughput). The demo's
#: narrow channels take half of it (`demo_plan`).
NODE_PACKETS_PER_CHUNK = 64


def demo_nodes(args: argparse.Namespace) -> int:
    """`voltstream demo --nodes N`: see the verb's help."""
    from voltstream.cluster.driver import Kill
    from voltstream.cluster.local import local_nodes

    n = args.nodes
    args.duration = 4.0 if args.duration is None else args.duration
    args.rate = 0.1 if args.rate is None else args.rate
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "demo-nodes.fits"
    archive.unlink(missing_ok=True)
    names = [f"node{i}" for i in range(n)]
    kills = []
    if args.kill_node is not None:
        if not 0 <= args.kill_node < n:
            raise ConfigError(f"--kill-node {args.kill_node}: the nodes are 0 .. {n - 1}")
        kills.append(Kill(names[args.kill_node], args.at))
    print(
        f"demo: {n} nodes x 32 channels of {DEMO_CHAN_BW_MHZ * 1e3:g} kHz around "
        f"{DEMO_FREQ_MHZ} MHz; starting a Dask scheduler, {n} node workers and a merger"
    )
    t_start = time.monotonic()
    with local_nodes(names, out / "dask", args.netns) as nodes:
        print(f"demo: Dask cluster up in {time.monotonic() - t_start:.1f} s, nodes "
              f"{nodes.where} (dashboard {nodes.cluster.dashboard})")  # fmt: skip
        plan, sim_cmd = demo_plan(names, nodes.dests, archive, args.tsub, args.duration,
                                  device=args.device)  # fmt: skip
        sim_cmd += ["--rate", str(args.rate)]
        report, sim_rc = run_simulated(nodes.cluster.client, plan, sim_cmd, kills,
                                       stop_event=_stop_event(args))  # fmt: skip
    return _demo_verdict(args, report, archive, out, sim_rc, kills)


def demo_plan(
    names: list[str], dests: list[str], archive: Path, tsub_s: float, duration_s: float,
    seed: int = 1, device: str = "cpu", chan_bw_mhz: float = DEMO_CHAN_BW_MHZ,
    packets_per_chunk: int | None = NODE_PACKETS_PER_CHUNK // 2,
) -> tuple[Any, list[str]]:  # fmt: skip
    """The demo's observation of `DEMO_PULSAR` on nodes ``names`` capturing at ``dests``,
    and the simulator's command (without its rate) that feeds them. ``chan_bw_mhz``:
    the YNAO channels' width (the demo's narrow ones; 4 MHz is a real YNAO subband,
    bench/cluster.py); ``packets_per_chunk`` None: the nodes' own chunk sizes."""
    from voltstream.cli.pulsar import DEMO_PULSAR as psr
    from voltstream.cluster.driver import plan_observation
    from voltstream.fold.reference import FoldSettings
    from voltstream.formats import make_format
    from voltstream.io.polyco import ConstantPeriod
    from voltstream.subbands import subband_formats

    n = len(names)
    fmt = make_format("ynao", chan_bw_mhz=chan_bw_mhz, freq_mhz=DEMO_FREQ_MHZ)
    formats = subband_formats(fmt, n)
    mjd, sec = _now_mjd()
    obss = [f.observation(start_mjd=mjd, start_sec=sec, source="PSR_DEMO") for f in formats]
    settings = FoldSettings(psr["dm"], ConstantPeriod(psr["period"], mjd, sec), nbin=128,
                            tsub_s=tsub_s)  # fmt: skip
    plan = plan_observation(
        list(zip(names, dests, obss, strict=True)), settings, str(archive),
        duration_s=duration_s + 120.0, formats=formats,
        # Small chunks: a row leaves a node about 4 chunks after its last packet.
        capture={} if packets_per_chunk is None else {"packets_per_chunk": packets_per_chunk},
        device=device,
        history=(f"voltstream demo --nodes {n} (voltstream.cli.cluster.demo_plan)",),
    )  # fmt: skip
    sim_cmd = [
        sys.executable, "-m", "voltstream.cli", "simulate", "--format", "ynao",
        "--subbands", str(n), "--chan-bw", str(chan_bw_mhz),
        "--freq", str(DEMO_FREQ_MHZ), "--signal", "pulsar", "--dm", str(psr["dm"]),
        "--period", str(psr["period"]), "--duty", str(psr["duty"]),
        "--pulse-phase", str(psr["pulse_phase"]), "--duration", str(duration_s),
        "--seed", str(seed), "--dest", ",".join(dests),
    ]  # fmt: skip
    return plan, sim_cmd


def run_simulated(
    client: Any, plan: Any, sim_cmd: list[str], kills: Any = (), stop_event: Any = None,
    grace_s: float = 3.0,
) -> tuple[dict, int]:  # fmt: skip
    """Runs ``plan`` with the simulator started once every node captures, ending
    ``grace_s`` after the simulator; (report, the simulator's exit status)."""
    from voltstream.cluster.driver import run_observation

    sim: list[subprocess.Popen] = []

    def start_sender() -> None:
        dests = sim_cmd[sim_cmd.index("--dest") + 1]
        print(f"cluster: every node is capturing; simulating -> {dests}")
        sim.append(subprocess.Popen(sim_cmd, env=dict(os.environ, PYTHONUNBUFFERED="1")))

    def sender_done() -> bool:
        return bool(sim) and sim[0].poll() is not None

    try:
        report = run_observation(client, plan, on_ready=start_sender,
                                 stop_when=held_for(sender_done, grace_s), kills=kills,
                                 stop_event=stop_event)  # fmt: skip
    finally:
        rc = _wait(sim)
    return report, rc


def held_for(cond: Any, grace_s: float) -> Any:
    """A check that ``cond()`` has held for ``grace_s`` (the sender has ended and the
    nodes' last packets have had time to arrive; each node also ends by its idle
    timeout)."""
    since: list[float] = []

    def check() -> bool:
        if not cond():
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= grace_s

    return check


def _wait(procs: list[subprocess.Popen]) -> int:
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return procs[0].returncode if procs else 1


def _demo_verdict(args: argparse.Namespace, report: dict, archive: Path, out: Path,
                  sim_rc: int, kills: list) -> int:  # fmt: skip
    from voltstream.cli.pulsar import DEMO_PULSAR, pulsar_check
    from voltstream.io.psrfits import read_psrfits
    from voltstream.monitor.plots import plot_archive

    (out / "demo-nodes-report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    for line in cluster_summary(report):
        print(line)
    problems = []
    if sim_rc != 0:
        problems.append(f"the simulator exited with status {sim_rc}")
    if not archive.exists():
        problems.append("no archive was written")
        print("demo: FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    arch = read_psrfits(archive)
    plot_archive(arch, out / "demo-nodes.png", title=f"voltstream demo: {len(report['nodes'])} "
                 f"nodes, DM {DEMO_PULSAR['dm']}")  # fmt: skip
    killed = {k["node"] for k in report["kills"] if k["at_s"] is not None}
    for node, r in report["nodes"].items():
        if r["error"] and node not in killed:
            problems.append(f"{node}: {r['error']}")
        lost = ((r["task"] or {}).get("capture") or {}).get("lost", 0)
        if lost and node not in killed:
            problems.append(f"{node} lost {lost} packets")
        missing = r["merger"].get("rows_missing", 0)
        if missing and node not in killed:
            problems.append(f"{node} is missing from {missing} rows")
    snr, peak, err, bad = pulsar_check(arch, DEMO_PULSAR)
    problems += bad
    print(f"demo: {arch.nsub} rows x {arch.data.shape[2]} channels x {arch.nbin} bins in "
          f"{archive}, S/N {snr:.1f}, peak at phase {peak:.3f} "
          f"(expected {DEMO_PULSAR['pulse_phase']})")  # fmt: skip
    print(f"demo: wrote {archive}, {out / 'demo-nodes.png'}, {out / 'demo-nodes-report.json'}, "
          f"worker logs in {out / 'dask' / 'logs'}")  # fmt: skip
    if problems:
        print("demo: FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    what = "zero loss"
    if killed:
        zeroed = sorted(n for n in killed if report["nodes"][n]["merger"].get("rows_missing"))
        what = f"{', '.join(sorted(killed))} killed" + (
            f", {', '.join(zeroed)} weighted zero while away"
            if zeroed
            else ", back before its first row was due"
        )
    print(f"demo: OK: {what}, pulsar detected across {len(report['nodes'])} subbands")
    return 0


def cluster_summary(report: dict) -> list[str]:
    """The report's lines for the terminal: the merge, then one line per node."""
    m = report["merge"]
    lat = m["merge_latency_s"]
    lines = [
        f"cluster: {m['rows_written']} rows written ({m['rows_complete']} with every node; "
        f"by rule {m['rows_by_rule']}), {m['late']} late, {m['duplicate']} duplicate, "
        f"{m['malformed']} malformed node rows; merge latency p50 {lat['p50'] * 1e3:.1f} ms, "
        f"max {lat['max'] * 1e3:.1f} ms"
    ]
    for node, r in report["nodes"].items():
        t = r["task"] or {}
        cap = t.get("capture") or {}
        tot = cap.get("totals") or {}
        mv = r["merger"]
        text = f"  {node} ({r['source']}, {r['nchan']} ch at {r['freq_mhz']:.4f} MHz): "
        if "file" in cap:
            text += f"{cap.get('samples', 0)} samples read, "
        else:
            text += (f"{tot.get('received', 0)} packets, {cap.get('lost', 0)} lost (missing "
                     f"{tot.get('missing', 0)}, dropped {tot.get('dropped', 0)}), ")  # fmt: skip
        text += f"{t.get('rows_sent', 0)} rows sent"
        earlier = [((e.get("capture") or {}).get("totals") or {}).get("received", 0)
                   for e in mv.get("earlier_runs") or []]  # fmt: skip
        if earlier:  # a run killed: what it had counted when it last sent a row
            text += (
                f" (this run; the run(s) before: {'+'.join(map(str, earlier))} packets, "
                f"{mv.get('rows_received', 0)} rows merged in all)"
            )
        if mv.get("rows_missing"):
            text += (f"; missing from rows {mv['missing_rows']} ({mv['seconds_lost']:.2f} s "
                     "weighted zero)")  # fmt: skip
        if mv.get("restarts"):
            text += f"; its worker left {mv['restarts']}x"
            if mv.get("first_rows"):
                text += f", back from row {mv['first_rows'][-1]}"
        if r["error"]:
            text += f"; ERROR {r['error']}"
        lines.append(text)
    for k in report["kills"]:
        if k["at_s"] is None:
            lines.append(f"  {k['node']} was not killed: the run ended first")
        else:
            lines.append(f"  killed {k['node']} (pid {k['pid']}) at {k['at_s']:.2f} s")
    return lines


def _subbands(args: argparse.Namespace) -> list[tuple[str, str]]:
    """--subband NODE=SOURCE, checked: names unique, sources all live or all files."""
    if not args.scheduler:
        raise ConfigError("--subband folds on a Dask cluster: give --scheduler tcp://HOST:8786")
    if not args.subband:
        raise ConfigError("--scheduler needs the subbands: --subband NODE=SOURCE per node")
    if args.input or args.listen:
        raise ConfigError("with --scheduler, each node's source comes from --subband "
                          "NODE=SOURCE: leave out INPUT and --listen")  # fmt: skip
    pairs = []
    for text in args.subband:
        node, sep, source = text.partition("=")
        if not sep or not node or not source:
            raise ConfigError(f"--subband {text!r}: write NODE=HOST:PORT or NODE=FILE")
        pairs.append((node, source))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--subband names a node twice: {', '.join(names)}")
    return pairs


def fold_cluster(args: argparse.Namespace) -> int:
    """`voltstream fold --scheduler ADDR --subband NODE=SOURCE ...`: one observation
    on a running Dask cluster (docs/scale-out.md)."""
    from distributed import Client

    from voltstream.cli.ops import watcher
    from voltstream.cli.pulsar import fold_predictor
    from voltstream.cluster.driver import plan_observation, run_observation
    from voltstream.cluster.job import NodeJob
    from voltstream.cluster.node import probe_file
    from voltstream.fold.reference import FoldSettings

    pairs = _subbands(args)
    files = [NodeJob.source_is_file(src) for _, src in pairs]
    if any(files) and not all(files):
        raise ConfigError("--subband: give every node a HOST:PORT or every node a file")
    with Client(args.scheduler, timeout="30s") as client:
        formats, offsets = None, None
        if all(files):
            probes = [client.submit(probe_file, src, resources={node: 1}, pure=False)
                      for node, src in pairs]  # fmt: skip
            found = [p.result(timeout=120) for p in probes]
            t0 = min(o.start_mjd * 86400.0 + o.start_sec for o, _ in found)
            mjd, sec = divmod(t0, 86400.0)
            obss = [replace(o, start_mjd=int(mjd), start_sec=sec) for o, _ in found]
            offsets = [round((o.start_mjd * 86400.0 + o.start_sec - t0) / o.tsamp_s)
                       for o, _ in found]  # fmt: skip
            ends = [off + n for off, (_, n) in zip(offsets, found, strict=True)]
            span = max(ends) * obss[0].tsamp_s
            duration = span + 3600.0  # files end by themselves
        else:
            from voltstream.cli.options import format_from
            from voltstream.subbands import subband_formats

            formats = subband_formats(format_from(args), len(pairs))
            mjd, sec = _now_mjd()
            obss = [f.observation(start_mjd=mjd, start_sec=sec) for f in formats]
            span = duration = args.duration
        band = replace(obss[0], nchan=obss[0].nchan * len(pairs),
                       freq_mhz=float(np.mean([o.freq_mhz for o in obss])),
                       bw_mhz=obss[0].bw_mhz * len(pairs))  # fmt: skip
        predictor = fold_predictor(args, band, span)
        tsub = args.tsub if args.tsub is not None else span / 10
        settings = FoldSettings(args.dm, predictor, args.nbin, tsub, pol_mode=args.pol)
        capture = {"packets_per_chunk": args.packets_per_chunk or NODE_PACKETS_PER_CHUNK}
        plan = plan_observation(
            [(n, src, o) for (n, src), o in zip(pairs, obss, strict=True)], settings,
            args.output, duration, formats=formats, start_packet=args.start_packet,
            file_offsets=offsets, capture=capture, device=args.device,
            history=("voltstream " + " ".join(sys.argv[1:]),),
        )  # fmt: skip
        print(f"fold: {len(pairs)} subbands on the Dask cluster at {args.scheduler} "
              f"({client.dashboard_link}); merging into {args.output}")  # fmt: skip
        report = run_observation(
            client, plan, stop_event=_stop_event(args), live_report=watcher(args),
            on_ready=lambda: print(f"fold: every node is {'reading' if all(files) else 'capturing'}"
                                   f" (the observation's {duration:g} s count from now)",
                                   flush=True),
        )  # fmt: skip
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, default=str) + "\n")
    for line in cluster_summary(report):
        print(line)
    errors = [n for n, r in report["nodes"].items() if r["error"]]
    if args.plot and Path(args.output).exists():
        from voltstream.io.psrfits import read_psrfits
        from voltstream.monitor.plots import plot_archive

        plot_archive(read_psrfits(args.output), args.plot, title=f"DM {args.dm}")
    return 1 if errors or not report["merge"]["rows_written"] else 0
