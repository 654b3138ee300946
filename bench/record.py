"""Recording benchmark (issue 12): the highest rate the recorder sustains onto disks
while capturing over loopback with nothing lost, against fio's sequential O_DIRECT
write to the same directories in the same run, and on a tmpfs (CPU-bound) against the
capture alone at the same settings.

A trial at rate R: a capture (counter format, 8192-byte packets, 4096 per chunk: 32 MiB
chunk files; packet ring, 256 MiB kernel queue, a pool of 2 + dirs x (queue + 1) + 4
chunks, 16 at least) and a `_core.Recorder` on the directories (one writer thread
each, at most `--queue-chunks` queued; O_DIRECT where the file system allows)
run while bench/record_send.py, its own process, sends R Gb/s for `--seconds`. The
trial is lossless when every packet sent was received (no kernel drop, none missing,
late, dropped or malformed; no chunk dropped by the capture), every chunk the capture
emitted was written (none unwritten, none lost, no writer failed), and the payload
bytes in the files equal those captured. record_gbps = payload bytes written per
second of sending. A trial whose sender fell more than 3% short of R is marked
sender-bound: the search does not go above it.

Search (per configuration, at most `--trials`): start at fio's rate of those
directories (tmpfs: at the capture-alone ceiling), go up by `--step` while lossless,
down while not, then bisect between the highest lossless and the lowest lossy rate
until they are within 5%. Configurations: the first 1..N of `--dirs` (fio before and
after the searches, one job per directory; fio_gbps is their mean, ratio =
record_gbps / fio_gbps; one search per queue depth of `--queue-chunks 2,8`), then
the capture alone (chunks released as they come), then a tmpfs the benchmark mounts
(or /dev/shm), where ratio = record_gbps / capture_alone_gbps. Chunk files are
deleted after each trial, and during it on tmpfs or where the free space would not
hold the trial; after each trial and each fio run the disks are synced and left to go
quiet (a file system mounted with `discard` trims deleted files for seconds) before
the next one.

    python bench/record.py --dirs /mnt/d0,/mnt/d1 [--seconds 10] [--trials 6]
        [--queue-chunks 2,8] [--fio PATH | --no-fio] [--no-tmpfs] [--machine LABEL]
        [--json F]
    python bench/record.py --burst --dirs D [--packets 60000]   # the first measurement
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_burst  # noqa: E402
from capture import Consumer  # noqa: E402 - releases chunks, as a pipeline stage
from record_disk import (  # noqa: E402
    Cleaner,
    filesystem,
    find_fio,
    fio_version,
    fio_write,
    free_bytes,
    machine,
    settle,
    tmpfs,
)
from voltstream import _core  # noqa: E402

PACKET = 8192
PAYLOAD = PACKET - 10
PER_CHUNK = 4096
CHUNK_BYTES = PER_CHUNK * PACKET  # whole packets, as the vbs layout records them
SENDER = str(Path(__file__).resolve().parent / "record_send.py")
METSAHOVI_GBPS = 4.2  # the Metsähovi recorder paper's sustained rate (issue 12)
CLOSE = 1.05  # bisection stops when lowest lossy / highest lossless is within this


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pool_chunks(a: argparse.Namespace, ndirs: int, queue: int) -> int:
    """The capture's pool: `--nchunks`, or room for the assembly window, every
    writer's queue and the chunk it writes, and 4 spare; 16 at least."""
    return a.nchunks or max(16, 2 + ndirs * (queue + 1) + 4)


def trial(
    dirs: list[Path] | None, rate: float, a: argparse.Namespace, clean: bool, queue: int
) -> dict:
    """One run at `rate` Gb/s: recorder on `dirs` (`queue` chunks queued per writer at
    most), or (None) the capture alone."""
    nchunks = pool_chunks(a, len(dirs or []), queue)
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": PAYLOAD},
        "network": {"bind": "127.0.0.1:0", "queue_bytes": a.queue_mb << 20},
        "engine": {"kind": a.engine},
        "chunks": {"packets_per_chunk": PER_CHUNK, "nchunks": nchunks, "window": 2,
                   "whole_packets": True},
    })  # fmt: skip
    cap.start()
    scan = f"vsbench{time.monotonic_ns()}"
    rec, cons, cleaner, report = None, None, None, None
    try:
        if dirs is None:
            cons = Consumer(cap)
        else:
            rec = _core.Recorder(cap, [str(d) for d in dirs], scan, queue_chunks=queue)
            cleaner = Cleaner(dirs, scan) if clean else None
        c0 = cpu_seconds()
        r = subprocess.run(
            [sys.executable, SENDER, str(cap.address), f"{rate:.4f}", f"{a.seconds:g}"],
            capture_output=True, text=True, timeout=a.seconds * 3 + 60,
        )  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"sender failed: {r.stderr.strip()[-500:]}")
        sent = json.loads(r.stdout)
        t_sent = time.perf_counter()
        while cap.stats()["packets"] < sent["sent"] and time.perf_counter() - t_sent < 2:
            time.sleep(0.002)
    finally:
        cap.stop()
        if rec is not None:
            report = rec.finish()
        if cons is not None:
            cons.close()
    drain_s = time.perf_counter() - t_sent
    cpu = cpu_seconds() - c0
    deleted = cleaner.close() if cleaner is not None else 0
    for d in dirs or []:
        shutil.rmtree(d / scan, ignore_errors=True)
    p = point(rate, sent, cap.stats(), report, drain_s, cpu, deleted, clean)
    p["settle_s"] = settle(dirs) if dirs else 0.0
    p["queue_chunks"], p["pool_chunks"] = (queue if dirs else None), nchunks
    return p


def point(
    rate: float, sent: dict, st: dict, report: dict | None, drain_s: float, cpu: float,
    deleted: int, clean: bool,
) -> dict:  # fmt: skip
    t = st["totals"]
    p: dict[str, Any] = {
        "rate_gbps": rate,
        "sent_gbps": sent["gbps"],
        "seconds": sent["seconds"],
        "sender_late_calls": sent["late_calls"],
        "engine": st["engine"],
        "sent": sent["sent"],
        "received": t["received"],
        **{k: t[k] for k in ("missing", "late", "dropped", "duplicate", "invalid")},
        **{k: st[k] for k in ("malformed", "foreign", "kernel_drops")},
        **{k: st[k] for k in ("chunks_emitted", "chunks_dropped")},
        "receiver_cpu": cpu / (sent["seconds"] + drain_s),
        "drain_s": drain_s,
    }
    losses = [p["sent"] - p["received"]] + [
        p[k] for k in ("missing", "late", "dropped", "malformed", "kernel_drops", "chunks_dropped")
    ]
    captured = p["received"] * PACKET  # whole packets, as the vbs layout records them
    if report is None:
        p["gbps"] = captured * 8 / sent["seconds"] / 1e9
    else:
        written = (report["chunks_written"] * PER_CHUNK - report["filled_packets"]) * PACKET
        w = report["writers"]
        p.update(
            {k: report[k] for k in ("chunks_written", "chunks_unwritten", "chunks_lost")},
            filled_packets=report["filled_packets"],
            bytes_written=report["bytes_written"],
            payload_written=written,
            payload_captured=captured,
            direct_chunks=sum(x["direct_chunks"] for x in w),
            failed_writers=[x["failed"] for x in w if x["failed"]],
            per_writer_chunks=[x["chunks"] for x in w],
            deleted_during=deleted if clean else None,
            gbps=written * 8 / sent["seconds"] / 1e9,
        )
        losses += [p["chunks_unwritten"], p["chunks_lost"], len(p["failed_writers"])]
        losses += [p["chunks_emitted"] - p["chunks_written"], captured - written]
    p["lossless"] = p["sent"] > 0 and not any(losses)
    p["sender_bound"] = sent["gbps"] < 0.97 * rate
    return p


def search(run: Callable[[float], dict], start: float, a: argparse.Namespace) -> dict:
    """The highest lossless rate within `a.trials` runs (module docstring)."""
    points: list[dict] = []
    best: dict | None = None
    lossy: float | None = None
    rate, note = start, None
    while len(points) < a.trials:
        if time.monotonic() > a.deadline:
            note = "time budget spent: search cut short"
            break
        p = run(rate)
        points.append(p)
        if p["lossless"]:
            best = p if best is None or p["gbps"] > best["gbps"] else best
        else:
            lossy = rate if lossy is None else min(lossy, rate)
        if p["lossless"] and p["sender_bound"]:
            note = "sender-bound: lossless at the most the sender could send"
            break
        if best is None:
            rate = rate / a.step
        elif lossy is None:
            rate = min(rate * a.step, a.max_rate)
            if rate <= best["rate_gbps"]:
                note = f"lossless at --max-rate {a.max_rate:g}"
                break
        elif lossy / best["rate_gbps"] <= CLOSE:
            break
        else:
            rate = (best["rate_gbps"] + lossy) / 2
    if note is None and len(points) == a.trials and (best is None or lossy is None):
        note = f"{a.trials} trials, all {'lossy' if best is None else 'lossless'}: " + (
            "the ceiling is lower" if best is None else "the ceiling is higher"
        )
    return {
        "record_gbps": best["gbps"] if best else 0.0,
        "best": best,
        "lowest_lossy_gbps": lossy,
        "note": note,
        "trials": points,
    }


def loss_counters(p: dict | None) -> dict | None:
    keys = ("sent", "received", "missing", "late", "dropped", "malformed", "kernel_drops",
            "chunks_emitted", "chunks_dropped", "chunks_written", "chunks_unwritten",
            "chunks_lost", "filled_packets", "failed_writers")  # fmt: skip
    return None if p is None else {k: p[k] for k in keys if k in p}


def fits(dirs: list[Path], rate: float, seconds: float) -> bool:
    """Whether a trial's files fit in the free space (with a 20% margin)."""
    need = rate * 1e9 / 8 * seconds * 1.2 / len(dirs) + 4 * CHUNK_BYTES
    return all(free_bytes(d) > need * len(dirs) for d in dirs)


def configuration(where: str, dirs: list[Path] | None, a: argparse.Namespace, **kw: Any) -> dict:
    base = {"machine": a.machine_text, "date": a.date, "where": where}
    base["dirs"] = len(dirs) if dirs else 0
    base["paths"] = [str(d.parent) for d in dirs or []]
    base["filesystems"] = [filesystem(d) for d in dirs or []]
    return {**base, **kw}


def run_disks(base: list[Path], a: argparse.Namespace) -> list[dict]:
    rows = []
    for k in range(1, len(base) + 1):
        dirs = [Path(tempfile.mkdtemp(prefix="vs-record-", dir=b)) for b in base[:k]]
        try:
            settle(dirs)
            fio = [fio_write(a.fio, dirs, a.seconds, bs=a.fio_bs, iodepth=a.fio_iodepth)
                   ] if a.fio else []  # fmt: skip
            start = fio[0].get("gbps", a.start_rate) if fio else a.start_rate
            found = []
            for q in a.queues:  # each queue depth between the same two fio runs

                def run(rate: float, dirs: list[Path] = dirs, q: int = q) -> dict:
                    return trial(dirs, rate, a, not fits(dirs, rate, a.seconds), q)

                found.append((q, search(run, min(start, a.max_rate), a)))
            if a.fio:
                fio.append(fio_write(a.fio, dirs, a.seconds, bs=a.fio_bs, iodepth=a.fio_iodepth))
            for q, s in found:
                row = configuration("disk", dirs, a, queue_chunks=q)
                rows.append(with_fio(row, s, fio, a) | {"pool_chunks": pool_chunks(a, k, q)})
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
    return rows


def with_fio(row: dict, s: dict, fio: list[dict], a: argparse.Namespace) -> dict:
    rates = [f["gbps"] for f in fio if "gbps" in f]
    fio_gbps = sum(rates) / len(rates) if rates else None
    reason = a.fio_skipped or (None if rates else "fio failed: " + str(fio[0].get("error")))
    return {
        **row,
        "record_gbps": s["record_gbps"],
        "fio_gbps": fio_gbps,
        "fio_before_after_gbps": rates,
        "fio_skipped": reason,
        "ratio": s["record_gbps"] / fio_gbps if fio_gbps else None,
        "ratio_of": "record_gbps / fio_gbps",
        "lossless": s["best"] is not None,
        "loss": loss_counters(s["best"]),
        "loss_above": loss_counters(lowest_lossy(s)),
        **{k: s[k] for k in ("lowest_lossy_gbps", "note", "trials")},
        "fio": fio,
    }


def lowest_lossy(s: dict) -> dict | None:
    lossy = [p for p in s["trials"] if not p["lossless"]]
    return min(lossy, key=lambda p: p["rate_gbps"]) if lossy else None


def run_tmpfs(a: argparse.Namespace, start: float, alone: float | None) -> dict:
    with tmpfs(a.tmpfs_gib) as mnt:
        dirs = [Path(tempfile.mkdtemp(prefix="vs-record-", dir=mnt["path"]))
                for _ in range(a.tmpfs_dirs)]  # fmt: skip
        fio: list[dict] = []
        buffered: dict | None = None
        if a.fio:
            # O_DIRECT (what the recorder uses where the open succeeds: tmpfs takes it
            # since Linux 6.6, else refuses it) and buffered, both in this run.
            fio = [fio_write(a.fio, dirs, a.seconds, bs=a.fio_bs, iodepth=a.fio_iodepth)]
            buffered = fio_write(
                a.fio, dirs, a.seconds, bs=a.fio_bs, iodepth=a.fio_iodepth, direct=False
            )
            if "error" in fio[0]:  # a tmpfs without O_DIRECT: buffered only
                fio = [buffered]
        q = a.queues[0]
        s = search(lambda rate: trial(dirs, rate, a, True, q), start, a)
        row = configuration("tmpfs", dirs, a, queue_chunks=q, tmpfs=mnt["how"])
        row = with_fio(row, s, fio, a) | {"pool_chunks": pool_chunks(a, len(dirs), q)}
        row["fio_buffered_gbps"] = buffered.get("gbps") if buffered else None
        row["fio_buffered"] = buffered
    row["capture_alone_gbps"] = alone
    row["ratio"] = s["record_gbps"] / alone if alone else None
    row["ratio_of"] = "record_gbps / capture_alone_gbps"
    return row


def run_alone(a: argparse.Namespace, start: float) -> dict:
    s = search(lambda rate: trial(None, rate, a, False, a.queues[0]), start, a)
    return configuration(
        "capture alone", None, a, pool_chunks=pool_chunks(a, 0, a.queues[0]),
        record_gbps=None, fio_gbps=None, ratio=None,
        capture_alone_gbps=s["record_gbps"], lossless=bool(s["best"]),
        loss=loss_counters(s["best"]), loss_above=loss_counters(lowest_lossy(s)),
        **{k: s[k] for k in ("lowest_lossy_gbps", "note", "trials")},
    )  # fmt: skip


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| where | dirs | queue | record Gb/s (highest lossless) | lowest lossy Gb/s | fio Gb/s "
        "(before / after) | capture alone Gb/s | ratio | receiver CPU | trials | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        best = next((p for p in r["trials"] if p["lossless"] and p["gbps"] == max(
            q["gbps"] for q in r["trials"] if q["lossless"])), None)  # fmt: skip
        fio = " / ".join(fmt(x) for x in r.get("fio_before_after_gbps", [])) or "-"
        if r.get("fio_buffered_gbps"):
            fio += f" (buffered {fmt(r['fio_buffered_gbps'])})"
        gbps = r["record_gbps"] if r["record_gbps"] is not None else r["capture_alone_gbps"]
        ratio = f"{fmt(r.get('ratio'), '.2f')} ({r.get('ratio_of', '-').split(' / ')[-1]})"
        lines.append(
            f"| {r['where']} | {r['dirs']} | {r.get('queue_chunks') or '-'} | {fmt(gbps)} | "
            f"{fmt(r['lowest_lossy_gbps'])} | "
            f"{fio} | {fmt(r.get('capture_alone_gbps'))} | "
            f"{ratio if r.get('ratio') else '-'} | "
            f"{fmt(best['receiver_cpu'], '.2f') if best else '-'} | {len(r['trials'])} | "
            f"{r['note'] or r.get('fio_skipped') or ''} |"
        )
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = ap.add_argument
    add("--dirs", required=True, help="comma-separated, one per disk")
    add("--seconds", type=float, default=10.0, help="sending time per trial (default 10)")
    add("--trials", type=int, default=6, help="trials per configuration at most (default 6)")
    add("--step", type=float, default=1.25, help="rate factor up/down (default 1.25)")
    add("--start-rate", type=float, default=10.0, help="Gb/s where fio gives none")
    add("--max-rate", type=float, default=100.0, help="never ask the sender for more")
    add("--fio", default=None, metavar="PATH", help="the fio to run (default: fio on PATH)")
    add("--no-fio", action="store_true", help="no fio baseline (the JSON says so)")
    add("--fio-bs", default="4M")
    add("--fio-iodepth", type=int, default=8)
    add("--no-tmpfs", action="store_true", help="skip the tmpfs and capture-alone runs")
    add("--no-disk", action="store_true", help="skip the runs on --dirs (tmpfs only)")
    add("--tmpfs-gib", type=int, default=4, help="size of the tmpfs mounted (default 4)")
    add("--tmpfs-dirs", type=int, default=1, help="writers on the tmpfs (default 1)")
    add("--engine", default="auto")
    add(
        "--nchunks",
        type=int,
        default=None,
        help="capture pool, 32 MiB chunks (default: 2 + dirs x (queue + 1) + 4, 16 at least)",
    )
    add("--queue-mb", type=int, default=256, help="kernel queue / packet ring (default 256)")
    add(
        "--queue-chunks",
        default="2",
        help="recorder queue per writer, chunks; a list "
        "(2,8) searches each between the same fio runs (default 2, as `voltstream record`)",
    )
    add("--budget-s", type=float, default=1500.0, help="stop searching after this long")
    add("--machine", default=None, help="a label for the machine, put before its description")
    add("--burst", action="store_true", help="the burst-drain mode (first measurement)")
    add("--packets", type=int, default=60000, help="--burst: packets queued per run")
    add("--json", default=None, metavar="PATH")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    a = parse(argv)
    a.queues = [int(q) for q in str(a.queue_chunks).split(",") if q]
    base = [Path(d) for d in a.dirs.split(",") if d]
    a.machine_text = machine(a.machine)
    a.date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    a.deadline = time.monotonic() + a.budget_s
    a.fio_skipped = "--no-fio given" if a.no_fio else None
    a.fio = None if a.no_fio else find_fio(a.fio)
    out: dict[str, Any] = {
        "benchmark": "bench/record.py",
        "command": shlex.join(
            ["python", "bench/record.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": a.machine_text,
        "date": a.date,
        "fio_version": fio_version(a.fio) if a.fio else None,
    }
    if a.burst:
        out |= {"mode": "burst", "packet_bytes": PACKET, "chunk_bytes": CHUNK_BYTES, "runs": {}}
        out["runs"]["dirs"] = record_burst.run(base, a.packets, a.fio)
        if not a.no_tmpfs:
            with tmpfs(a.tmpfs_gib) as mnt:
                out["runs"]["tmpfs"] = record_burst.run([mnt["path"]], a.packets, a.fio)
        lines = record_burst.table(out["runs"])
    else:
        out |= {
            "mode": "sustained",
            "settings": {k: getattr(a, k) for k in (
                "seconds", "trials", "step", "start_rate", "max_rate", "fio_bs", "fio_iodepth",
                "engine", "nchunks", "queue_mb", "queue_chunks", "tmpfs_gib", "tmpfs_dirs")},
            "packet_bytes": PACKET,
            "chunk_bytes": CHUNK_BYTES,
            "targets": {"ratio_to_fio": 0.95, "record_gbps": 2 * METSAHOVI_GBPS},
        }  # fmt: skip
        rows = [] if a.no_disk else run_disks(base, a)
        if not a.no_tmpfs:
            start = max([r["fio_gbps"] or 0 for r in rows] + [a.start_rate])
            alone = run_alone(a, min(start, a.max_rate))
            rows.append(alone)
            ceiling = alone["capture_alone_gbps"] or a.start_rate
            rows.append(run_tmpfs(a, ceiling, alone["capture_alone_gbps"] or None))
        out["configurations"] = rows
        lines = table(rows)
    print("\n".join(lines))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
