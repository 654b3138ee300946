"""`voltstream latency`: the low-latency mode as a tool (options in latency_options.py)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

from voltstream.cli.ops import watcher
from voltstream.dsp.cuda import GpuError
from voltstream.errors import CaptureError, ConfigError
from voltstream.service.exit_status import Loss

log = logging.getLogger("voltstream.latency")


def stream_format(args: argparse.Namespace) -> tuple[str, dict[str, Any] | None]:
    """The format and its keywords: the stream file's, or the built-in test frame."""
    if args.stream is None:
        return "vlat", {"payload_len": args.payload_len}
    from voltstream.streams import load_stream

    kw = dict(load_stream(args.stream).capture_kwargs())
    return str(kw.pop("format")), kw


#: Seconds between the status lines a run logs while it goes on.
STATUS_EVERY_S = 10.0


def status_line(c: dict[str, Any]) -> str:
    """The frame counters in one line (the status line and the summary's first)."""
    return (
        f"{c.get('frames_complete', 0)} whole, {c.get('frames_incomplete', 0)} "
        f"incomplete, {c.get('frames_lost', 0)} lost, {c.get('frames_gpu_busy', 0)} dropped "
        f"(GPU busy); acknowledged {c.get('frames_acked', 0)}, sum mismatches "
        f"{c.get('sum_mismatch', 0)}"
    )


def frames_lost(report: dict[str, Any]) -> Loss:
    """Frames that did not reach the GPU whole, of every frame due."""
    keys = ("frames_incomplete", "frames_lost", "frames_gpu_busy")
    lost = sum(int(report.get(k, 0)) for k in keys)
    return Loss(lost, lost + int(report.get("frames_complete", 0)))


def summary(report: dict[str, Any], stages: dict[str, dict[str, Any]]) -> str:
    c = report
    lines = [
        f"frames: {status_line(c)}",
        f"packets: {c.get('received', 0)} placed, {c.get('missing', 0)} missing, "
        f"{c.get('late', 0)} late, {c.get('duplicate', 0)} duplicate, "
        f"{c.get('malformed', 0)} malformed, {c.get('truncated', 0)} truncated, "
        f"{c.get('foreign', 0)} foreign",
    ]
    for stage, s in stages.items():
        if s.get("frames"):
            lines.append(
                f"{stage:>18}: p50 {s['p50_us']:.2f} µs, p99 {s['p99_us']:.2f}, "
                f"p99.9 {s['p999_us']:.2f}, max {s['max_us']:.2f}, "
                f"peak to peak {s['ptp_us']:.2f} ({s['frames']} frames)"
            )
    return "\n".join(lines)


def _one_cpu(cpus: list[int] | None) -> int | None:
    """--cpus of the latency loop: the vocabulary's CPU list, holding one CPU."""
    if cpus is not None and len(cpus) != 1:
        raise ConfigError(f"--cpus {cpus}: the receive loop is one thread, give one CPU")
    return None if cpus is None else cpus[0]


def latency(args: argparse.Namespace) -> Loss:
    from voltstream.latency.run import LatencyRun, LatencySettings
    from voltstream.latency.stats import records_array, stage_stats

    if args.listen is None:
        raise ConfigError("latency needs --listen HOST:PORT")
    fmt, kwargs = stream_format(args)
    settings = LatencySettings(
        mode=args.mode, packets_per_frame=args.packets_per_frame, slots=args.slots,
        blocks=args.blocks, threads=args.block_threads, window=args.window,
        timeout_us=args.frame_timeout_us, records=min(args.frames or 1_000_000, 1_000_000) + 16,
        cpu=_one_cpu(args.cpus), standin=args.standin,
    )  # fmt: skip
    try:
        run = LatencyRun(
            args.listen,
            settings,
            format=fmt,
            format_kwargs=kwargs,
            frame_field=args.frame_field,
            send_time=args.send_time,
        )
    except GpuError as e:
        raise GpuError(f"{e}; without a GPU, --standin runs the same loop on the host") from e
    with run:
        if args.print_address:
            print(f"listening on {run.local_addr}", flush=True)
        log.info(
            "latency: %s frames of %d bytes (%d packets) on %s, mode %s, %d x %d GPU threads",
            fmt, run.frame_bytes, settings.packets_per_frame, run.local_addr,
            settings.mode, run.blocks, run.threads,
        )  # fmt: skip
        run.start(frames=args.frames, seconds=args.duration, idle_s=args.idle_timeout)
        live = watcher(args)  # --metrics: every counter, live (0.1 s old at most)
        if live is not None:
            live(lambda: {"latency": dict(run.session.stats())})
        # Ctrl-C or SIGTERM (the shared shutdown handler) stops the loop cleanly.
        stop = args.shutdown.watch()
        report: dict[str, Any] | None = None
        next_line = time.monotonic() + STATUS_EVERY_S
        while report is None:
            if stop.is_set():
                run.stop()
            report = run.session.join(0.2)
            if report is None and time.monotonic() >= next_line:
                log.info("latency: frames %s", status_line(run.session.stats()))
                next_line += STATUS_EVERY_S
        recs = records_array(run.records())
    if report.get("end") == "error":
        # The loop could not run or the GPU failed it (a CPU it may not use, a
        # driver error): the counters up to then, then the error, exit status 2.
        print(summary(report, {}), flush=True)
        raise CaptureError(f"the latency loop stopped: {report.get('error')}")
    stages = stage_stats(recs, warmup=args.warmup)
    print(summary(report, stages), flush=True)
    if args.report:
        doc = {
            "mode": settings.mode,
            "frame_bytes": run.frame_bytes,
            "blocks": run.blocks,
            "threads": run.threads,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "counters": report,
            "stages": stages,
        }
        with open(args.report, "w") as f:
            json.dump(doc, f, indent=1)
    return frames_lost(report)
