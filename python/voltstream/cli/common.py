"""What the verbs share: the stop event, progress, the capture's settings and format
from the command line, and the end-of-run report (commands.py and its siblings in cli/)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.cli.ops import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.errors import ConfigError
from voltstream.record import RecordSettings
from voltstream.service.exit_status import Loss, capture_loss
from voltstream.service.progress import progress_bar

if TYPE_CHECKING:
    from voltstream.pipeline.live import LiveGpuRun

log = logging.getLogger("voltstream.cli.commands")


def _stop_event(args: argparse.Namespace) -> threading.Event | None:
    """The event the verb's run loop polls to stop on SIGINT/SIGTERM (cli.main's
    Shutdown); None when the verb is called without cli.main."""
    shutdown = getattr(args, "shutdown", None)
    return shutdown.watch() if shutdown is not None else None


def _progress(args: argparse.Namespace, description: str, total: int | None, unit: str) -> Any:
    """The long verbs' progress (service/progress.py): a bar at a terminal, a plain
    line every few seconds in a log; neither with --no-progress or --no-status."""
    off = getattr(args, "no_progress", True) or getattr(args, "no_status", False)
    return progress_bar(description, total, unit, not off)


def _status_line(args: argparse.Namespace) -> bool:
    """The live verbs' once-a-second status line on stderr: plain text, so not with
    --log-format json (whose readers want one JSON object a line), nor --no-status."""
    return not args.no_status and getattr(args, "log_format", "text") == "text"


def live_gpu_run(args: argparse.Namespace, verb: str) -> LiveGpuRun:
    """How the capture of ``verb --listen --device gpu`` (fold, filterbank) runs, from its
    options (its chunks and pool are sized by --packets-per-chunk and --buffer-mb)."""
    from voltstream.pipeline.live import LiveGpuRun

    return LiveGpuRun(
        idle_timeout_s=args.idle_timeout,
        status=_status_line(args),
        on_start=lambda: log.info("%s: listening on %s", verb, args.listen),
        stop_event=_stop_event(args),
        live_report=watcher(args),
    )


#: Longest a paced send call of `simulate --dest` may take: the stop request is seen
#: between calls, so this bounds how long a SIGTERM waits on the sender.
SEND_SLICE_S = 0.1


def _send_sliced(sender: Any, pkts: np.ndarray, packet_len: int, rate_gbps: float) -> dict:
    """``sender.send`` in slices of at most SEND_SLICE_S at ``rate_gbps`` (a block of
    65536 samples at 0.01 Gb/s would otherwise hold the process for seconds); the
    summed counters."""
    pkts = pkts.reshape(-1, packet_len)
    per_slice = pkts.shape[0]
    if rate_gbps > 0:
        per_slice = max(1, int(rate_gbps * 1e9 / 8 * SEND_SLICE_S // packet_len))
    sent = {"packets": 0, "bytes": 0, "refused": 0}
    for a in range(0, pkts.shape[0], per_slice):
        r = sender.send(np.ascontiguousarray(pkts[a : a + per_slice]), packet_len, rate_gbps)
        sent["packets"] += int(r["packets"])
        sent["bytes"] += int(r["bytes"])
        sent["refused"] = int(r.get("refused", 0))  # the sender's total so far
    return sent


def _now_mjd() -> tuple[int, float]:
    t = time.time()
    days, sec = divmod(t, 86400.0)
    return 40587 + int(days), float(int(sec))  # whole seconds: packet time stamps start there


def capture_output(args: argparse.Namespace, fmt: Any) -> Any:
    """capture ``--output``: a DadaWriter of the stream's samples (None without it);
    refused, one line, for a stream DADA cannot hold, before the socket opens."""
    if not args.output:
        return None
    if not hasattr(fmt, "observation"):
        raise ConfigError(
            f"--output writes the samples of YNAO and VDIF streams as DADA; a {fmt.name} "
            "stream is captured and counted without it"
        )
    if (bits := getattr(fmt, "bits", 8)) != 8:
        raise ConfigError(
            f"--output writes 8-bit DADA; {bits}-bit VDIF cannot be written to it "
            "yet: capture it without --output, or record its packets (voltstream record "
            "--layout vdif)"
        )
    from voltstream.io.dada import DadaWriter

    mjd, sec = _now_mjd()
    return DadaWriter(
        args.output, fmt.observation(start_mjd=mjd, start_sec=sec, source=args.source)
    )


#: Standard deviation (in codes) of re and im that simulated sub-byte VDIF gets.
SUB_BYTE_RMS = {1: 1.0, 2: 2.2, 4: 3.0}  # 1 bit: the sign, any scale


#: The capture options a verb may have, each a ``_core.Capture`` keyword of its name.
_CAPTURE_OPTIONS = (
    "packets_per_chunk", "window", "engine", "multicast", "interface", "threads", "cpus",
    "spread", "dpdk_port", "dpdk_eal_args", "flush_age",
)  # fmt: skip


def _capture_settings(args: argparse.Namespace, bind: str) -> Any:
    """The capture options a verb has, as one CaptureSettings (the core's sections);
    an option the verb lacks or the user left unset keeps the settings' default. A
    pipeline file (run_file.py) gives its sections whole, as ``capture_settings``."""
    from voltstream.capture.config import CaptureSettings
    from voltstream.cli.options import listen_addresses

    if (whole := getattr(args, "capture_settings", None)) is not None:
        return whole
    given = {name: getattr(args, name, None) for name in _CAPTURE_OPTIONS}
    ring_mb = getattr(args, "ring_mb", None)
    binds = listen_addresses(bind)
    if len(binds) > 1:  # a band in several streams: one capture thread per address
        if given.get("threads") not in (None, 1, len(binds)):
            raise ConfigError(
                f"--listen gives {len(binds)} addresses, each captured by its own thread: "
                f"leave --threads out (or give {len(binds)})"
            )
        given["threads"] = len(binds)
    return CaptureSettings.of(
        binds[0], queue_bytes=ring_mb and ring_mb << 20, more_binds=binds[1:] or None, **given
    )


def record_settings(options: dict[str, Any]) -> RecordSettings:
    """The record options (the verb's, or a pipeline file's [record]) as one
    RecordSettings; each field under its own name, the others left out."""
    return RecordSettings(**{f.name: options[f.name] for f in dataclasses.fields(RecordSettings)})


def _capture_format(args: argparse.Namespace) -> Any:
    """The capture's format: a stream description file, the digitiser stream's
    defaults, or the YNAO/VDIF options."""
    from voltstream.cli.options import format_from

    if getattr(args, "stream", None):
        from voltstream.streams import load_stream  # pydantic: only where a file is read

        # A path (--stream), or a description a pipeline file holds (run_file.py).
        desc = load_stream(args.stream) if isinstance(args.stream, str) else args.stream
        if args.format not in ("ynao", desc.format):  # ynao: the default, not a choice
            raise ConfigError(f"--format {args.format} but {args.stream} says {desc.format}")
        return desc
    if args.format == "spead-dig":
        from voltstream.streams import spead_dig

        return spead_dig()
    if args.format in ("codif", "spead", "counter", "layout"):
        raise ConfigError(
            f"--format {args.format} needs --stream FILE.toml with its geometry "
            "(docs/formats.md has an example per format)"
        )
    fmt = format_from(args)
    listen = getattr(args, "listen", None)
    if isinstance(listen, str) and ("," in listen or "+" in listen):
        from voltstream.cli.options import listen_addresses

        fmt = fmt.in_subbands(len(listen_addresses(listen)))
    return fmt


def _print_report(report: Any, path: str | None, stats: dict) -> Loss:
    """The end of a run, alike for every verb: the report's summary on stdout, the
    whole report as JSON where ``--report`` asks; the run's loss, counted on the
    capture's counters ``stats``, for cli.main's exit status."""
    for line in report.summary_lines():
        print(line)
    if path:
        report.write_json(path)
    return capture_loss(stats)


def _nothing_received(
    verb: str, report: Any, fmt: str, output: str | None = None, report_path: str | None = None
) -> int | None:
    """A run that received none of its stream: its summary (and ``--report``), one
    line saying what
    arrived and what to check, no ``output`` left as if it were a recording (a
    header-only file is removed); NO_DATA (exit status 3). None when data came, or
    when a signal stopped the run (a stop is an end as asked: the line is a warning)."""
    from pathlib import Path

    from voltstream.service.exit_status import NO_DATA
    from voltstream.service.outcomes import nothing_received

    hint = nothing_received(report.as_dict(), report.bind, f"--format {fmt}")
    if hint is None:
        return None
    if report.interrupted:  # a stop by signal ends a run as asked (status 0): a warning
        if output is not None:
            hint += f" ({output} holds no data)"
        log.warning("voltstream %s: %s", verb, hint)
        return None
    for line in report.summary_lines():
        print(line)
    if report_path:
        report.write_json(report_path)
    if output is not None and Path(output).is_file():
        Path(output).unlink()
        hint += f" ({output} removed: it held no data)"
    elif output is not None:
        hint += f" ({output} not written)"
    log.error("voltstream %s: %s", verb, hint)
    return NO_DATA
