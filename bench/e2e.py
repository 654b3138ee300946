"""End-to-end benchmark: the product as a user runs it (issue 10).

Each configuration runs the real CLI (`python -m voltstream.cli capture|fold|fengine
... --report r.json`) as the receiver on 127.0.0.1, fed by K sender processes
(bench/e2e_traffic.py: pre-made packet buffers, restamped per send, `_core.Sender`,
one absolute schedule, each pinned to its own core from the top down), and finds the
highest total rate at which the product is LOSSLESS: every packet sent was received,
and missing = late = dropped = kernel_drops = 0. Per configuration: a ladder of
--probe-seconds probes from --start-gbps, doubling while lossless, then --steps
bisection probes between the last lossless and the first lossy rate, then one run of
--confirm-seconds at the best lossless rate (and, if that loses, one at 0.9 of it).
Every counter of every point is printed and kept in the JSON, with the senders'
achieved rate (a point whose senders fell 3% short, or one of them over 512 packets
behind the schedule, is marked sender-limited) and the receivers' CPU (user + system
over the sending window, 1.0 = one core; busiest threads too). Senders start --warmup seconds
after the receiver has bound its port (default: capture 1, fold 6, fengine 3: fold
builds its GPU plan after binding).

Configurations (--only, comma-separated; JSON keys `<name>_lossless_gbps`):
  capture_ynao, capture_vdif8, capture_vdif2, capture_spead   capture alone (chunks
      released unprocessed; SPEAD via a stand-in receiver while the CLI lacks it)
  fold_ynao, fold_vdif8, fold_vdif2   `voltstream fold --listen ... --device gpu`
  filterbank_ynao   `voltstream filterbank --listen ... --device gpu --fine-channels 64
      --tsamp 0.000256` into a file on tmpfs; target >= 0.9 x fold_ynao (same run):
      JSON `filterbank_ynao_vs_fold_ratio`
  capture_vdif2real, fold_vdif2real   real-sampled 2-bit VDIF (a DBBC3's channels, two
      threads as polarisations): the frames of vdif2, each channel real at twice its
      width; the fold converts them to complex on the GPU (`fold --listen --real`)
  capture_vdif4real, fold_vdif4real   2-bit real VDIF of 4 threads of one channel each
      (EDV3, the common VLBI shape): the fold takes every thread as a subband of one
      pol (`--vdif-threads 0,1,2,3 --npol 1 --real`), converted on the GPU
  fengine_4096, fengine_32768   `voltstream fengine --channels N --taps 16`, output to
      /dev/null (--fengine-sink)
  fengine_two_processes   two F-engines (4096 ch) on one GPU, two ports, the senders
      split between them; the figure is per antenna
  fengine_4ant_4096, fengine_4ant_32768   one `voltstream fengine` of 4 antennas
      (--listen P+3, a capture thread per antenna on --cpus, 4 engines on one GPU),
      the senders split over the 4 ports; the figure is the total over the antennas
  dump_ynao   capture_ynao with the voltage ring (`capture --ring-seconds --trigger-listen
      --dump-dir` on tmpfs): each point POSTs one trigger for --dump-seconds (1) of the
      data mid-run and is lossless only if the capture is and the dump was written
      whole, nothing lost (bench/e2e_dump.py); JSON `dump_1s_lossless_gbps`,
      `dump_vs_capture_ratio` (over capture_ynao), also merged into --search-json
  gpu_alone   bench/fold_gpu.py and bench/fengine_gpu.py, short runs (G samples/s)
  file_fold   `voltstream fold FILE.dada --device gpu` on a --file-gb DADA file in the
      page cache, timed end to end (and marginally, minus a small file's run)

Figures. Gb/s are UDP payload bits (packet headers of the formats included). G
samples/s: fold = complex samples x channels x pols (as bench/fold_gpu.py); F-engine
= real digitiser samples of both pols (as bench/fengine_gpu.py). The ratio per
product is end to end / min(capture alone, GPU alone), both in samples/s (two
F-engines: capture alone x 2, GPU alone of one F-engine).

CPUs (default, 16 cores): receivers' Python on 0,1; capture threads on 2,3,... (passed
as --threads/--cpus where the verb has them, else added to the process's CPU mask);
senders on the top cores (15, 14, ...).

(Just over 600 lines: the configurations, one point, the search and the summary read
together; receivers, traffic, baselines, merging and dumps are e2e_*.py beside it.)

Results: --json (default docs/results/e2e.json) is merged into when it exists
(bench/e2e_merge.py: per configuration the best confirmed run; a figure no run
measured is never written over with null); --replace overwrites it.

Runs, each under the device's 10-minute limit (--budget, default 500 s, stops starting
new points and lists what was skipped; with the defaults a capture configuration takes
about 1.5 minutes, a fold or F-engine one 2-3), then one merge here (no network):
    scripts/gpu.sh bench-e2e --only capture_ynao,fold_ynao,capture_vdif8,fold_vdif8
    scripts/gpu.sh bench-e2e --only capture_ynao,fold_ynao,filterbank_ynao
    scripts/gpu.sh bench-e2e --only capture_vdif2,fold_vdif2,capture_spead,fengine_4096
    scripts/gpu.sh bench-e2e --only capture_vdif2real,fold_vdif2real
    scripts/gpu.sh bench-e2e --only capture_vdif4real,fold_vdif4real
    scripts/gpu.sh bench-e2e --only fengine_32768,fengine_two_processes,gpu_alone,file_fold
    scripts/gpu.sh bench-e2e --only capture_ynao,dump_ynao --rates 30 --confirm-seconds 10
    python bench/e2e.py --merge part1.json part2.json part3.json --json docs/results/e2e.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from e2e_baselines import file_fold, gpu_alone  # noqa: E402
from e2e_dump import DumpPoint, add_args, write_search  # noqa: E402
from e2e_dump import figures as dump_figures  # noqa: E402
from e2e_merge import merge_docs  # noqa: E402
from e2e_receivers import (  # noqa: E402
    ALL_COUNTERS,
    Receivers,
    Skip,
    cpu_model,
    cpu_share,
    filterbank_output,
    free_port,
    free_ports,
    lossless,
    preflight,
    product_extras,
    receiver_argv,
    receiver_counts,
)
from e2e_traffic import SenderGroup, make_traffic  # noqa: E402

CONFIGS = {  # name: (product, traffic, options)
    "capture_ynao": ("capture", "ynao", {}),
    "fold_ynao": ("fold", "ynao", {}),
    "capture_vdif8": ("capture", "vdif8", {}),
    "fold_vdif8": ("fold", "vdif8", {}),
    "capture_vdif2": ("capture", "vdif2", {}),
    "fold_vdif2": ("fold", "vdif2", {}),
    "capture_vdif2real": ("capture", "vdif2real", {}),
    "fold_vdif2real": ("fold", "vdif2real", {}),
    # 2-bit real, 4 threads of one channel (EDV3): every thread a subband of one pol.
    "capture_vdif4real": ("capture", "vdif2real4t", {}),
    "fold_vdif4real": ("fold", "vdif2real4t", {}),
    "capture_spead": ("capture", "spead", {}),
    "fengine_4096": ("fengine", "spead", {"channels": 4096}),
    "fengine_32768": ("fengine", "spead", {"channels": 32768}),
    "fengine_two_processes": ("fengine", "spead", {"channels": 4096, "receivers": 2}),
    # Four antennas in one process (issue 26 item 3): one receiver on 4 consecutive ports.
    "fengine_4ant_4096": ("fengine", "spead", {"channels": 4096, "antennas": 4}),
    "fengine_4ant_32768": ("fengine", "spead", {"channels": 32768, "antennas": 4}),
    # One YNAO stream (one flow) on --spread-threads capture threads taking turns by chunk.
    "capture_1stream_threads": ("capture", "ynao", {"threads": "spread"}),
    "fold_1stream_threads": ("fold", "ynao", {"threads": "spread"}),
    # One band as 4 YNAO subbands on 4 consecutive ports (one receiver, --listen P+3).
    "capture_4streams": ("capture", "ynao", {"streams": 4}),
    "fold_4streams": ("fold", "ynao", {"streams": 4}),
    # The live search filterbank on the GPU (issue 28): its target is >= 0.9 x fold_ynao's
    # lossless rate in the same run (PRODUCT_BASELINE, `<name>_vs_fold_ratio`).
    "filterbank_ynao": ("filterbank", "ynao", {}),
    # capture_ynao with the voltage ring and a triggered dump each point (e2e_dump.py).
    "dump_ynao": ("capture", "ynao", {"dump": True}),
}
OTHERS = ("gpu_alone", "file_fold")
WARMUP = {
    "capture": 1.0,
    "fold": 6.0,
    "fengine": 3.0,
    "filterbank": 6.0,
}  # seconds from bind to first packet
CAPTURE_ALONE = {
    "fold_ynao": "capture_ynao",
    "fold_vdif8": "capture_vdif8",
    "fold_vdif2": "capture_vdif2",
    "fold_vdif2real": "capture_vdif2real",
    "fold_vdif4real": "capture_vdif4real",
    "fengine_4096": "capture_spead",
    "fengine_32768": "capture_spead",
    "fengine_two_processes": "capture_spead",
    "fengine_4ant_4096": "capture_spead",
    "fengine_4ant_32768": "capture_spead",
    "fold_1stream_threads": "capture_1stream_threads",
    "fold_4streams": "capture_4streams",
    "filterbank_ynao": "capture_ynao",
}
#: A product measured against another's lossless rate on the same traffic (a ratio of
#: Gb/s: `<name>_vs_<base product>_ratio`).
PRODUCT_BASELINE = {"filterbank_ynao": "fold_ynao"}
GPU_ALONE = {
    "fold_ynao": "fold_8bit_gsps",
    "fold_vdif8": "fold_8bit_gsps",
    "fold_vdif2": "fold_2bit_gsps",
    "fold_vdif2real": "fold_2bit_real_gsps",  # none measured yet: capture alone is the bound
    "fold_vdif4real": "fold_2bit_real_gsps",
    "fengine_4096": "fengine_4096_gsps",
    "fengine_32768": "fengine_32768_gsps",
    "fengine_two_processes": "fengine_4096_gsps",
    # The GPU alone is one engine at a time: four share the GPU, so it bounds the total.
    "fengine_4ant_4096": "fengine_4096_gsps",
    "fengine_4ant_32768": "fengine_32768_gsps",
    "fold_1stream_threads": "fold_8bit_gsps",
    "fold_4streams": "fold_8bit_gsps",
    "filterbank_ynao": None,  # no GPU-alone filterbank figure yet: capture alone bounds it
}


def cpu_plan(a) -> dict:
    """Receiver (Python) cores, capture-thread cores, sender cores (from the top)."""
    cpus = sorted(os.sched_getaffinity(0))
    pick = lambda text: [int(c) for c in text.split(",") if c != ""]  # noqa: E731
    rx = pick(a.receiver_cpus) if a.receiver_cpus else cpus[:2]
    # Two receivers, one spread over threads, or one of several antennas (a thread each).
    ncap = max(2 * a.capture_threads, a.spread_threads, _most_antennas(a) * a.capture_threads)
    cap = pick(a.capture_cpus) if a.capture_cpus is not None else cpus[2 : 2 + ncap]
    rest = [c for c in reversed(cpus) if c not in rx + cap]
    tx = pick(a.sender_cpus) if a.sender_cpus else (rest or cpus[-1:])[: a.senders]
    shared = bool(set(tx) & set(rx + cap)) or len(tx) < a.senders
    return {"receiver": rx, "capture": cap, "sender": tx, "shared_cores": shared}


def _most_antennas(a) -> int:
    """The most antennas one receiver of the selected configurations has."""
    names = [n for n in a.only.split(",") if n in CONFIGS]
    return max((CONFIGS[n][2].get("antennas", 1) for n in names), default=1)


def ports_of(opt: dict) -> int:
    """Ports one receiver listens on: a band's streams or an F-engine's antennas."""
    return opt.get("streams", opt.get("antennas", 1))


# ------------------------------------------------------------------------ one point


def run_point(name: str, rate: float, seconds: float, a, cpus, ctx, workdir: Path) -> dict:
    """One measurement: the receiver(s) of `name`, the senders at `rate` Gb/s in total
    (0 = unpaced) for `seconds`."""
    product, traffic, opt = CONFIGS[name]
    tr = make_traffic(traffic)
    nrx = opt.get("receivers", 1)
    nstreams = ports_of(opt)
    ports = [free_port() for _ in range(nrx)] if nstreams == 1 else free_ports(nstreams)
    k = max(1, len(cpus["sender"]) // len(ports))
    block = a.block_packets
    most = max(1, int(a.buffer_mib * 2**20 // (block * tr.packet_len)))
    per = rate / (len(ports) * k) * 1e9 / 8 if rate else 0.0  # bytes/s per sender
    blocks = most if not rate else min(most, max(1, int(0.05 * per / (block * tr.packet_len))))
    warmup = WARMUP[product] if a.warmup is None else a.warmup
    dur = warmup + seconds + 60
    stamp = f"{name}-{int(time.time() * 1000) % 10**8}"
    point = {
        "config": name,
        "asked_gbps": rate,
        "receivers": [],
        "packets_per_block": block,
        "blocks_per_call": blocks,
        "senders_per_port": k,
        "error": None,
    }
    t_start = time.monotonic()
    reports = [workdir / f"{stamp}-{r}.json" for r in range(nrx)]
    # A band in several streams, or several antennas: one receiver on every port (P+N).
    listens = ports if nstreams == 1 else [f"{ports[0]}+{nstreams - 1}"]
    dump = DumpPoint(a, rate, seconds, workdir, stamp) if opt.get("dump") else None
    ra = dump.receiver_args() if dump else a  # the ring's flags in --capture-args
    cmds = [
        receiver_argv(product, traffic, opt, r, port, dur, reports[r], ra, cpus)
        for r, port in enumerate(listens)
    ]
    point["receiver_argv"] = [shlex.join(argv) for argv, _, _ in cmds]
    point["notes"] = sorted({note for _, _, note in cmds if note})
    dests = [f"127.0.0.1:{p}" for p in ports]
    group = SenderGroup(
        ctx, dests, traffic, k, cpus["sender"], rate, seconds, block, blocks, a.pace_margin
    )
    rx = Receivers(
        [(argv, mask) for argv, mask, _ in cmds], [r.with_suffix(".log") for r in reports]
    )
    try:
        rx.wait_bound(ports, a.start_timeout)
        group.wait_ready()
        time.sleep(warmup)
        c0 = rx.cpu()
        t0 = time.monotonic() + 0.05
        group.go(t0)
        if dump:
            dump.start(t0)
        res = group.results(seconds + 120)
        c1 = rx.cpu()
        window = res["end"] - t0
        sent = res["sent"]
        total = sum(sent)
        point.update(
            seconds=window,
            sent=total,
            senders=res["senders"],
            offered_gbps=total * tr.packet_len * 8 / window / 1e9,
        )
        time.sleep(a.idle_timeout)  # the last packets through the capture and its stage
        rx.interrupt()
        rx.wait(a.drain_timeout)
        point["drain_s"] = time.monotonic() - res["end"]
        point["send_end"] = res["end"]  # time.monotonic(), one clock for every process
    except (RuntimeError, TimeoutError, EOFError, OSError, subprocess.TimeoutExpired) as e:
        point["error"] = f"{type(e).__name__}: {e}"
    finally:
        rx.stop()
        group.close()
    point["wall_s"] = time.monotonic() - t_start
    point["receiver_output"] = rx.tails()
    if not point["error"] and any(rx.status()):
        point["error"] = f"a receiver exited with status {rx.status()}"
    if point["error"]:
        # After the senders: the product did not keep up (or failed); a lossy point.
        point.update(lossless=False, received_gbps=None, sender_limited=False)
        if dump:
            dump.finish(point, None)
        return point
    for r in range(nrx):
        rep = json.loads(reports[r].read_text())
        c = receiver_counts(rep)
        cpu, busy = cpu_share(c0[r], c1[r], window)
        sent_r = sum(sent) if nstreams > 1 else sent[r]  # one receiver takes every port
        point["receivers"].append(
            dict(
                c,
                sent=sent_r,
                lost=sent_r - c["received"],
                cpu=cpu,
                busy_threads=busy,
                product=product_extras(rep),
            )
        )
    for key in ALL_COUNTERS:
        point[key] = sum(x[key] for x in point["receivers"])
    point["lost"] = total - point["received"]
    point["received_gbps"] = point["received"] * tr.packet_len * 8 / window / 1e9
    point["receiver_cpu"] = [x["cpu"] for x in point["receivers"]]
    point["lossless"] = all(lossless(x["sent"], x) for x in point["receivers"])
    if dump:  # and its dump written whole
        dump.finish(point, json.loads(reports[0].read_text()))
    # A sender behind the schedule puts its packets that much behind its peers' (late).
    behind = max(x["behind_s"] for x in res["senders"])
    point["sender_drift_packets"] = behind * point["offered_gbps"] * 1e9 / 8 / tr.packet_len
    point["sender_limited"] = bool(rate) and (
        point["offered_gbps"] < 0.97 * rate or point["sender_drift_packets"] > 512
    )
    for f in workdir.glob(f"{stamp}-*.fits"):
        f.unlink()
    for r in reports:
        filterbank_output(r).unlink(missing_ok=True)
    return point


def point_line(p: dict) -> str:
    asked = f"{p['asked_gbps']:.2f}" if p["asked_gbps"] else "unpaced"
    if p.get("error"):
        return f"{p['config']} asked {asked}: ERROR {p['error']} | " + " / ".join(
            " ".join(t[-2:]) for t in p.get("receiver_output", [])
        )
    counts = " ".join(f"{k}={p[k]}" for k in ALL_COUNTERS)
    cpu = ",".join(f"{c:.0%}" for c in p["receiver_cpu"])
    products = [r.get("product") or {} for r in p.get("receivers", [])]
    slow = [x for x in products if x.get("consumer_chunks")]
    stalls = "".join(
        f" stage>10ms={x['consumer_over_10ms']}/{x['consumer_chunks']}"
        f" >100ms={x['consumer_over_100ms']}"
        for x in slow
    )
    return (
        f"{p['config']} asked {asked} Gb/s: offered {p['offered_gbps']:.2f} received "
        f"{p['received_gbps']:.2f} Gb/s in {p['seconds']:.1f} s, sent={p['sent']} {counts} "
        f"lost={p['lost']} rx_cpu={cpu}{stalls} -> {'LOSSLESS' if p['lossless'] else 'lossy'}"
        + (" (sender-limited)" if p["sender_limited"] else "")
    )


# ---------------------------------------------------------------- search per config


def find_ceiling(name: str, run, a, budget_ok) -> dict:
    """Unpaced probe, bisection (or --rates), then a --confirm-seconds run (and one at
    0.9 x that rate if it loses)."""
    points, notes = [], []

    def go(rate, secs):
        if not budget_ok(name, secs):
            notes.append(f"budget spent: a {secs:g} s point at {rate:.2f} Gb/s was skipped")
            return None
        p = run(rate, secs)
        print(point_line(p), flush=True)
        points.append(p)
        return None if p.get("error") and "offered_gbps" not in p else p

    best = None  # (asked rate, point)
    if a.rates:
        for r in a.rates:
            p = go(r, a.probe_seconds)
            if (
                p
                and p["lossless"]
                and (best is None or p["received_gbps"] > best[1]["received_gbps"])
            ):
                best = (r, p)
    else:
        # A ladder up from --start-gbps, doubling while lossless, then --steps bisection
        # probes between the last lossless and the first lossy rate. (An overloaded
        # product says little about its capacity: it can collapse far below it, so no
        # bound is taken from what it received.)
        lo, hi, rate = 0.0, None, a.start_gbps
        while rate <= a.max_gbps:
            if (p := go(rate, a.probe_seconds)) is None:
                break
            if not p["lossless"]:
                hi = rate
                break
            lo, best = rate, (rate, p)
            if p["offered_gbps"] < 0.97 * rate:
                notes.append(f"sender-bound: lossless at {rate:.1f} Gb/s, senders at their limit")
                break
            rate *= 2
        for _ in range(a.steps if hi is not None else 0):
            mid = (lo + hi) / 2
            if (p := go(mid, a.probe_seconds)) is None:
                break
            if p["lossless"]:
                lo, best = mid, (mid, p)
            else:
                hi = mid
    confirmed = None
    if best and a.confirm_seconds > 0:
        for rate in (best[0], 0.9 * (best[0] or best[1]["offered_gbps"])):
            confirmed = go(rate, a.confirm_seconds)
            if confirmed is None or confirmed["lossless"]:
                break
            notes.append(f"the {a.confirm_seconds:g} s run at {rate:.2f} Gb/s was not lossless")
            confirmed = None
    chosen = confirmed or (best[1] if best else None)
    if chosen is None:
        notes.append("no lossless point")
    lossy = [p["offered_gbps"] for p in points if "offered_gbps" in p and not p["lossless"]]
    nrx = CONFIGS[name][2].get("receivers", 1)  # per process; 4 antennas: the total
    return {
        "lossless_gbps": chosen["received_gbps"] / nrx if chosen else None,
        "total_lossless_gbps": chosen["received_gbps"] if chosen else None,
        "confirmed_seconds": confirmed["seconds"] if confirmed else None,
        "receiver_cpu": chosen["receiver_cpu"] if chosen else None,
        "lowest_lossy_gbps": min(lossy, default=None),
        "errors": [p["error"] for p in points if p.get("error")],
        "notes": notes + sorted({n for p in points for n in p.get("notes", [])}),
        "points": points,
    }


# ------------------------------------------------------------------ summary, output


def gsps(name: str, gbps: float | None) -> float | None:
    """Gb/s of packets -> G samples/s (module docstring)."""
    if gbps is None:
        return None
    tr = make_traffic(CONFIGS[name][1])
    return gbps * 1e9 / 8 / tr.packet_len * tr.samples_per_packet / 1e9


def finalize(doc: dict) -> dict:
    """Top-level figures and ratios from the per-configuration results."""
    cfg, gpu = doc.get("configs", {}), doc.get("gpu_alone") or {}
    doc["unconfirmed_gbps"] = {}
    for name in CONFIGS:
        # A figure counts only once a --confirm-seconds run was lossless at it.
        c = cfg.get(name) or {}
        ok = c.get("confirmed_seconds")
        doc[f"{name}_lossless_gbps"] = c.get("lossless_gbps") if ok else None
        if c.get("lossless_gbps") and not c.get("confirmed_seconds"):
            doc["unconfirmed_gbps"][name] = c["lossless_gbps"]
    ratios = {}
    for name, base in CAPTURE_ALONE.items():
        doc[f"{name}_capture_alone_gbps"] = cap = doc[f"{base}_lossless_gbps"]
        opt = CONFIGS[name][2]
        scale = opt.get("receivers", 1)  # a per-process figure: times the processes
        cores = scale * opt.get("antennas", 1)  # capture threads, each a core's capture alone
        e2e = gsps(name, doc[f"{name}_lossless_gbps"])
        e2e = e2e * scale if e2e is not None else None
        ceilings = {
            "capture_alone_gsps": gsps(base, cap) * cores if cap else None,
            "gpu_alone_gsps": gpu.get(GPU_ALONE[name]),
        }
        known = [v for v in ceilings.values() if v]
        ratios[name] = dict(
            ceilings, e2e_gsps=e2e, ratio=e2e / min(known) if e2e is not None and known else None
        )
        # The product against its capture alone (target: >= 0.9), the same packets.
        cap_gsps = ceilings["capture_alone_gsps"]
        doc[f"{name}_vs_capture_ratio"] = e2e / cap_gsps if e2e is not None and cap_gsps else None
    doc["ratios"] = ratios
    doc.update(dump_figures(doc))
    for name, base in PRODUCT_BASELINE.items():
        mine, theirs = doc.get(f"{name}_lossless_gbps"), doc.get(f"{base}_lossless_gbps")
        key = f"{name}_vs_{CONFIGS[base][0]}_ratio"
        doc[key] = mine / theirs if mine is not None and theirs else None
    ff = doc.get("file_fold") or {}
    doc["file_fold_gsps"] = ff.get("gsps")
    # From the first block to the last, as the CLI prints it ("... once started").
    doc["file_fold_steady_gsps"] = ff.get("steady_gsps")
    # The fold's own time, as the CLI prints it (no start-up, imports or PSRFITS write).
    big = (ff.get("runs") or [{}])[-1]
    doc["file_fold_engine_gsps"] = (
        big["nsamp"] * 64 / big["engine_s"] / 1e9 if big.get("engine_s") else None
    )  # 32 channels x 2 pols (the YNAO band the file holds)
    doc["skipped"] = {
        k: v
        for k, v in doc.get("skipped", {}).items()
        if k not in cfg and not (k in OTHERS and doc.get(k))
    }
    return doc


def markdown(doc: dict) -> str:
    f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [
        "| configuration | lossless Gb/s | G samples/s | confirmed s | capture alone G "
        "samples/s | GPU alone G samples/s | e2e / min | receiver CPU | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name, c in doc.get("configs", {}).items():
        r = doc["ratios"].get(name, {})
        cpu = ", ".join(f"{x:.0%}" for x in c.get("receiver_cpu") or [])
        lines.append(
            f"| {name} | {f(c['lossless_gbps'])} | {f(gsps(name, c['lossless_gbps']), 2)} "
            f"| {f(c['confirmed_seconds'], 0)} | {f(r.get('capture_alone_gsps'), 2)} "
            f"| {f(r.get('gpu_alone_gsps'), 2)} | {f(r.get('ratio'), 2)} | {cpu} "
            f"| {'; '.join(c['notes'] + c['errors'])} |"
        )
    ff = doc.get("file_fold") or {}
    if ff:
        lines.append(
            f"\nfile fold ({ff.get('file_gb')} GB DADA, page cache, whole command): "
            f"{f(ff.get('gsps'), 2)} G samples/s, marginal {f(ff.get('marginal_gsps'), 2)}, "
            f"once started {f(ff.get('steady_gsps'), 2)}"
            + (f" ERROR {ff['error']}" if ff.get("error") else "")
        )
    if doc.get("skipped"):
        lines.append("\nskipped: " + "; ".join(f"{k} ({v})" for k, v in doc["skipped"].items()))
    return "\n".join(lines)


def machine() -> dict:
    try:
        gpu = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout
    except OSError:
        gpu = ""
    return {
        "hostname": platform.node(),
        "gpu": gpu.strip() or None,
        "cores": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = ap.add_argument
    add(
        "--only",
        default=",".join(list(CONFIGS) + list(OTHERS)),
        help="configurations, comma-separated",
    )
    add(
        "--json",
        default="docs/results/e2e.json",
        help="where to write the results; an existing file is merged with them (each "
        "figure kept unless this run measured it better; never a null over a figure)",
    )
    add("--replace", action="store_true", help="overwrite --json instead of merging")
    add(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="merge earlier runs' JSON into --json, run nothing",
    )
    add("--budget", type=float, default=500.0, help="seconds for the whole run (default 500)")
    add("--probe-seconds", type=float, default=5.0)
    add("--confirm-seconds", type=float, default=20.0, help="0: no confirmation run")
    add("--steps", type=int, default=3, help="bisection probes after the ladder")
    add("--start-gbps", type=float, default=5.0, help="first rate of the ladder. Default: 5")
    add("--max-gbps", type=float, default=160.0, help="the ladder stops here. Default: 160")
    add("--rates", default=None, help="total Gb/s list instead of the bisection")
    add("--senders", type=int, default=8, help="sender processes (cores), split over ports")
    add("--receiver-cpus", default=None, help="receivers' CPU mask (default: first 2 cores)")
    add("--capture-cpus", default=None, help="capture thread CPUs (default: the next cores)")
    add("--sender-cpus", default=None, help="default: the top --senders cores, descending")
    add("--capture-threads", type=int, default=1,
        help="per receiver (--threads); an F-engine's: per antenna")  # fmt: skip
    add("--spread-threads", type=int, default=3, help="capture threads of the *_threads configs")
    add("--engine", default="auto", help="capture engine of every receiver")
    add("--device", default="gpu", help="fold/fengine --device")
    add("--packets-per-chunk", type=int, default=None, help="capture and fold --listen")
    add("--block-packets", type=int, default=32, help="B: contiguous packets per block (even)")
    add("--buffer-mib", type=float, default=8.0, help="each sender's pre-made buffer")
    add("--pace-margin", type=float, default=0.03, help="senders pace this much above share")
    add("--warmup", type=float, default=None, help="seconds from bind to the first packet")
    add("--idle-timeout", type=float, default=2.0)
    add("--start-timeout", type=float, default=120.0, help="for the receiver to bind")
    add("--drain-timeout", type=float, default=120.0, help="for it to finish after the senders")
    add("--fengine-sink", default="--output /dev/null", help="fengine output flags")
    add("--capture-args", default="", help="more flags for voltstream capture")
    add("--fold-args", default="", help="more flags for voltstream fold --listen")
    add("--filterbank-args", default="", help="more flags for voltstream filterbank --listen")
    add("--fengine-args", default="", help="more flags for voltstream fengine")
    add("--file-gb", type=float, default=8.0, help="file_fold: DADA file size")
    add_args(ap)  # dump_ynao's
    add("--workdir", default=None, help="reports, logs, files (default: a temporary directory)")
    a = ap.parse_args(argv)
    a.rates = [float(r) for r in a.rates.split(",")] if a.rates else None
    return a


def main(argv=None) -> dict:
    a = parse_args(argv)
    if a.merge:
        docs = [json.loads(Path(p).read_text()) for p in a.merge]
        return write(merge_docs(docs, a.merge, OTHERS, finalize), a.json)
    names = [n for n in a.only.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS and n not in OTHERS]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {list(CONFIGS) + list(OTHERS)}")
    cpus = cpu_plan(a)
    deadline = time.monotonic() + a.budget
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="voltstream-e2e-"))
    workdir.mkdir(parents=True, exist_ok=True)
    doc = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": shlex.join(["bench/e2e.py", *(argv if argv is not None else sys.argv[1:])]),
        "cpu_plan": cpus,
        "settings": {k: v for k, v in vars(a).items() if k != "merge"},
        "configs": {},
        "skipped": {
            n: "not selected (--only)" for n in list(CONFIGS) + list(OTHERS) if n not in names
        },
    }
    print(
        f"# voltstream end to end: {doc['machine']['gpu']}, {doc['machine']['cores']} cores; "
        f"receivers on {cpus['receiver']}, capture threads on {cpus['capture']}, senders on "
        f"{cpus['sender']}" + (" (some cores shared)" if cpus["shared_cores"] else ""),
        flush=True,
    )
    ctx = mp.get_context("spawn")
    overhead = {"capture": 6.0, "fold": 20.0, "fengine": 15.0, "filterbank": 20.0}  # per point

    def budget_ok(name, secs):
        return time.monotonic() + secs + overhead[CONFIGS[name][0]] < deadline

    least = {"gpu_alone": 180.0, "file_fold": 60.0 + 10 * a.file_gb}  # seconds it needs
    for name in names:
        if time.monotonic() > deadline - least.get(name, 30.0):
            doc["skipped"][name] = "budget spent before it started"
            continue
        try:
            preflight(CONFIGS[name][0] if name in CONFIGS else name, a.device)
            if name in CONFIGS:
                receiver_argv(*CONFIGS[name], 0, 1, 1.0, workdir / "probe.json", a, cpus)
        except Skip as e:
            doc["skipped"][name] = str(e)
            print(f"{name}: skipped: {e}", flush=True)
            continue
        if name in OTHERS:
            fn = gpu_alone if name == "gpu_alone" else file_fold
            try:
                doc[name] = fn(a, workdir, limit=max(60.0, deadline - time.monotonic()))
            except (subprocess.SubprocessError, OSError, KeyError, IndexError) as e:
                doc[name] = {"error": f"{type(e).__name__}: {e}"}
            figures = {k: v for k, v in doc[name].items() if k.endswith("gsps") or k == "error"}
            print(f"{name}: {figures}", flush=True)
            continue

        def run(rate, secs, name=name):
            p = run_point(name, rate, secs, a, cpus, ctx, workdir)
            if not p.get("error"):
                overhead[CONFIGS[name][0]] = max(3.0, p["wall_s"] - secs)
            return p

        doc["configs"][name] = find_ceiling(name, run, a, budget_ok)
    doc = finalize(doc)
    write_search(doc, a.search_json)  # this run's figures alone, before any merge
    if Path(a.json).exists() and not a.replace:  # merged into what it holds (e2e_merge.py)
        old = json.loads(Path(a.json).read_text())
        doc = merge_docs([old, doc], [a.json, "this run"], OTHERS, finalize)
    return write(doc, a.json)


def write(doc: dict, path: str) -> dict:
    text = markdown(doc)
    print("\n" + text, flush=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":
    main()
