"""The capture's consumer while a triggered dump is written: the window copied whole
as the trigger came (sessions 14-15) against the writer reading it out of the ring a
piece at a time (record/dumps.py now). A/B in one run, alternated.

Why this bench. At 30 Gb/s the live dump lost 6 to 167 of the capture's chunks in
10 s points (docs/benchmarks.md, sessions 14-15) while the dump itself was whole:
copying a 3.7 GB window out of the ring in one go took 1.35 s and competed with the
consumer's own writes into the ring. Those points need the GPU machine's cores; this
bench isolates the consumer on any host.

The model. The capture fills a pool of --pool-mb of chunks at --rate GB/s (payload):
chunk k is ready at k x its duration. The consumer (one thread, as run_capture's)
hands each ready chunk to the real VoltageRing (capture/ring.py), which copies it in
and releases it. When the consumer is more than the pool behind, the capture would
have had no free chunk: that chunk is dropped, counted, as the engines count it. The
frames are real YNAO frames (the ring's clock is read from the first one's header).
After --warm-s, one trigger asks for the newest --window-s of data; the consumer runs
on until the dump is written, and 0.3 s more. The dump goes to --dir (tmpfs by
default: the disk is not what is measured).

Out: per try, the chunks dropped while the dump was taken, the consumer's largest
backlog (ms of stream), the time from trigger to answer and to written; JSON with
--json (docs/results/dump_ring.json).

    .venv/bin/python bench/dump_ring.py --rate 2 --window-s 1 --json /tmp/dr.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from voltstream.capture.ring import VoltageRing
from voltstream.capture.timeline import Block
from voltstream.formats import make_format
from voltstream.io.dada import DadaWriter
from voltstream.record import dumps as dumps_module
from voltstream.record.dumps import Dumps

FMT = make_format("ynao")
GB = 1e9
MIB = 1 << 20


class _Chunk:
    """One pool chunk of whole frames, as the engine hands it over (by address)."""

    def __init__(self, frames: np.ndarray) -> None:
        self.buf, self.streams, self.thread = frames, [0], 0
        self.address = frames.ctypes.data

    def release(self) -> None:
        pass


class _Release:
    """The capture's own sink, reduced to giving each block back."""

    def take(self, item) -> None:
        item.release()

    def poll(self) -> None:
        pass

    def finish(self) -> None:
        pass


def _write_whole_copy(ring: VoltageRing, copy, path: Path) -> None:
    """Sessions 14-15's dump: the window copied out whole (``copy``, as the trigger was
    answered), then converted and written in pieces (as record/dumps.py did)."""
    first, stop = copy.first, copy.stop
    obs = FMT.observation(start_mjd=60000, start_sec=0.0)
    step = dumps_module.WRITE_PACKETS
    skip, left = first - copy.first_packet * ring.spp, stop - first
    with DadaWriter(path, obs) as out:
        for a in range(0, copy.present.shape[1], step):
            tfp = FMT.payload_to_tfp(copy.payload[:, a : a + step], copy.present[:, a : a + step])
            tfp = tfp[skip : skip + left]
            out.write(tfp)
            left -= tfp.shape[0]
            skip = 0


def one_try(how: str, args: argparse.Namespace, frames: list[np.ndarray], where: Path) -> dict:
    ppc = args.packets_per_chunk
    chunk_bytes = ppc * FMT.payload_len
    chunk_s = chunk_bytes / (args.rate * GB)
    pool = max(1, int(args.pool_mb * MIB // chunk_bytes))
    ring_s = (args.window_s + args.warm_s + 1) * args.rate * GB / FMT.payload_len
    ring_s /= FMT.packets_per_second  # the ring's seconds of the stream's own clock
    ring = VoltageRing(FMT, ring_s, ppc, _Release())
    dumps = Dumps(ring, where, "bench", 0.0) if how == "piecewise" else None
    state: dict = {"answer_s": None, "written_s": None}
    present = np.ones((1, ppc), bool)

    samples = int(args.window_s * args.rate * GB / FMT.payload_len) * ring.spp

    def trigger() -> None:
        t = time.perf_counter()
        newest = ring.span()[1]
        first = newest - samples
        if dumps is not None:
            secs = [str((s - ring.clock.first_sample) * FMT.tsamp_exact) for s in (first, newest)]
            status, _ = dumps.trigger(json.dumps({"start": secs[0], "end": secs[1]}).encode())
            assert status == 202, status
            state["answer_s"] = time.perf_counter() - t
            dumps.close()
        else:
            copy = ring.copy(first, newest)
            state["answer_s"] = time.perf_counter() - t  # answered once copied out
            _write_whole_copy(ring, copy, where / "whole.dada")
        state["written_s"] = time.perf_counter() - t

    dropped = during = k = 0
    worst_ms = 0.0
    thread: threading.Thread | None = None
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter() - t0
        ready = int(now / chunk_s)
        if k > ready:
            time.sleep((k - ready) * chunk_s / 2)
            continue
        backlog = ready - k
        if thread is not None and thread.is_alive():
            worst_ms = max(worst_ms, backlog * chunk_s * 1e3)
        if backlog > pool:  # no free chunk for the capture: these were dropped
            lost = backlog - pool
            dropped += lost
            during += lost if thread is not None else 0
            k += lost
        ring.take(Block(k, [_Chunk(frames[k % len(frames)])], present, 0, ppc))
        k += 1
        if thread is None and now > args.warm_s + args.window_s:
            thread = threading.Thread(target=trigger)
            thread.start()
            t_trigger = now
        if thread is not None and not thread.is_alive() and now > t_trigger + 0.3:
            break
        if now > args.warm_s + args.window_s + args.max_s:
            raise SystemExit(f"{how}: the dump was not written in {args.max_s} s")
    thread.join()
    return {"how": how, "chunks_dropped": dropped, "dropped_during_dump": during,
            "chunks": k, "worst_backlog_ms": round(worst_ms, 1),
            "pool_ms": round(pool * chunk_s * 1e3, 1),
            "answer_s": round(state["answer_s"], 3), "written_s": round(state["written_s"], 3),
            "window_gb": round(args.window_s * args.rate, 2),
            "window_samples": samples}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=2.0, help="GB/s of payload (default 2)")
    ap.add_argument("--window-s", type=float, default=1.0, help="seconds of data dumped")
    ap.add_argument("--warm-s", type=float, default=1.0, help="seconds before the trigger")
    ap.add_argument("--pool-mb", type=float, default=512, help="the capture's pool (MiB)")
    ap.add_argument("--packets-per-chunk", type=int, default=1024)
    ap.add_argument("--tries", type=int, default=2, help="of each, alternated")
    ap.add_argument("--max-s", type=float, default=60.0)
    ap.add_argument("--dir", default="/dev/shm", help="where dumps are written (removed)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    ppc, spp = args.packets_per_chunk, FMT.samples_per_packet
    obs = FMT.observation(start_mjd=60000, start_sec=0.0)
    frames = []
    for c in range(4):
        samples = rng.integers(-128, 128, (ppc * spp, FMT.nchan, 2, 2), dtype=np.int8)
        frames.append(FMT.packetize(samples, c * ppc * spp, obs))
    tries = []
    for _ in range(args.tries):
        for how in ("whole copy", "piecewise"):
            where = Path(tempfile.mkdtemp(dir=args.dir))
            try:
                tries.append(one_try(how, args, frames, where))
                tries[-1]["file_bytes"] = sum(f.stat().st_size for f in where.iterdir())
            finally:
                shutil.rmtree(where)
            print(json.dumps(tries[-1]))
    out = {"date": datetime.now(UTC).strftime("%Y-%m-%d"),
           "command": "python bench/dump_ring.py " + " ".join(
               f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
               if v is not None and k != "json"),
           "host_cpus": len(os.sched_getaffinity(0)), "tries": tries}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
