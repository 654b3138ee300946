"""`voltstream capture --ring-seconds T --trigger-listen HOST:PORT`: the capture keeps
the last T seconds of the stream in a host ring (capture/ring.py) and writes a window
of it as DADA when a trigger asks (record/dumps.py, record/trigger_http.py); docs/
search.md, "Triggered voltage dumps". The options, and the capture run with them.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from voltstream.cli.ops import watcher
from voltstream.cli.options import add_options, finite, host_port, positive
from voltstream.errors import ConfigError
from voltstream.service.exit_status import Loss

log = logging.getLogger("voltstream.cli.dump")

#: --voltage-ring-mb's default: the most host memory a ring takes unless asked.
RING_LIMIT_MB = 4096


def trigger_address(text: str) -> str:
    """``--trigger-listen HOST:PORT``: port 0 picks a free one (logged)."""
    return host_port(text, free_port=True)


def add_dump_options(p: argparse.ArgumentParser) -> None:
    """capture's options of the triggered voltage dumps."""
    g = p.add_argument_group(
        "triggered voltage dumps",
        "keep the last seconds of voltages in host memory and write a window of them as "
        "DADA when a trigger asks (POST /trigger, docs/search.md)",
    )
    add_options(g, (
        ("--ring-seconds", positive(float), None,
         "keep the last this many seconds of the stream's samples (the voltage ring; "
         "memory: seconds x the stream's rate) for triggered dumps; needs --trigger-listen"),
        ("--voltage-ring-mb", positive(float), RING_LIMIT_MB,
         "the most host memory (MiB) the voltage ring may take: a --ring-seconds that "
         "needs more, or more than the machine has available, is refused at start. "
         f"Default: {RING_LIMIT_MB}"),
        ("--trigger-listen", trigger_address, None,
         "serve triggers over HTTP on HOST:PORT (port 0 picks one, logged): POST /trigger "
         'with a JSON window ({"start": S, "end": S} in seconds since the stream\'s first '
         'sample, "start_mjd"/"end_mjd", or a burst\'s "dm" and "time"), GET /ring'),
        ("--dump-dir", None, ".", "directory the dumps are written to, one DADA file "
         "each. Default: the current one"),
        ("--dump-margin", finite(float, 0), 0.05,
         "seconds dumped before a burst's arrival at the top of the band and after its "
         "arrival at the bottom (a trigger's \"margin\" overrides). Default: 0.05"),
    ))  # fmt: skip


def _check(args: argparse.Namespace) -> None:
    if args.trigger_listen is None:
        raise ConfigError(
            "--ring-seconds keeps voltages for triggers: give --trigger-listen HOST:PORT "
            "too (e.g. 127.0.0.1:7070)"
        )
    d = Path(args.dump_dir)
    if not d.is_dir():
        raise ConfigError(f"--dump-dir {d}: no such directory; create it first (mkdir -p)")
    if not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError(f"--dump-dir {d}: the directory is not writable")


def _with_dumps(watch: Any, dumps: Any) -> Any:
    """The metrics board's ``watch`` (None without --metrics) given the report so far
    with the dumps' counts in it (its ``dumps`` section, as at the end)."""
    if watch is None:
        return None
    return lambda so_far: watch(lambda: so_far() | {"dumps": dumps.as_dict()})


def capture_with_ring(args: argparse.Namespace) -> int | Loss:
    """`capture` with the voltage ring and the trigger server (``--ring-seconds``); the
    capture's own --output and counters as without it. (Imports here: the parser
    imports this module for its options, and is built without NumPy.)"""
    from voltstream.capture.report import CaptureReport
    from voltstream.capture.ring import VoltageRing, check_ring_memory, ring_bytes
    from voltstream.capture.run import CountingSink, TfpSink, run_capture
    from voltstream.cli.common import (
        _capture_format,
        _capture_settings,
        _nothing_received,
        _print_report,
        _stop_event,
        capture_output,
    )
    from voltstream.formats import StreamFormat
    from voltstream.record.dumps import Dumps
    from voltstream.record.trigger_http import TriggerServer

    _check(args)
    fmt = _capture_format(args)
    if not isinstance(fmt, StreamFormat):
        raise ConfigError(
            f"--ring-seconds dumps YNAO and VDIF streams (their samples and clock are "
            f"known); a {fmt.name} stream is captured and counted without it"
        )
    # Whole packets in the chunks: the first packet's header is the stream's clock.
    settings = _capture_settings(args, args.listen).replace(whole_packets=True)
    ppc = settings.chunks.packets_per_chunk
    check_ring_memory(ring_bytes(fmt, args.ring_seconds, ppc), args.ring_seconds,
                      args.voltage_ring_mb)  # fmt: skip
    # The capture's sink counts into a report of its own: run_capture makes the run's.
    counts = CaptureReport(format=fmt.name, bind=args.listen)
    ring = VoltageRing(fmt, args.ring_seconds, ppc, CountingSink(fmt, counts))
    writer = capture_output(args, fmt)
    if writer is not None:
        sink = TfpSink(fmt, lambda samples, valid: writer.write(samples), counts,
                       slot_len=fmt.packet_len)  # fmt: skip
        ring.inner = sink
    dumps = Dumps(ring, args.dump_dir, args.source, args.dump_margin)
    server: Any = None
    try:
        server = TriggerServer(dumps, args.trigger_listen)
        log.info("triggers: listening on http://%s (POST /trigger, GET /ring)", server.address)
        report = run_capture(
            fmt, settings, args.duration, consumer=ring,
            idle_timeout_s=args.idle_timeout,
            on_start=lambda: log.info("capture: listening on %s", args.listen),
            stop_event=_stop_event(args), live_report=_with_dumps(watcher(args), dumps),
        )  # fmt: skip
    finally:
        if server is not None:
            server.close()
        dumps.close()  # every dump asked for is written before the report
        if writer is not None:
            writer.close()
    report.chunks, report.samples_written = counts.chunks, counts.samples_written
    report.bytes_written = counts.bytes_written
    report.dumps = dumps.as_dict()
    no_data = _nothing_received("capture", report, fmt.name, args.output, args.report)
    if no_data is not None:
        return no_data
    return _print_report(report, args.report, report.engine)
