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
from voltstream.errors import ConfigError, optional_module
from voltstream.service.exit_status import Loss

log = logging.getLogger("voltstream.cli.dump")

#: --voltage-ring-mb's default: the most host memory a ring takes unless asked.
RING_LIMIT_MB = 4096
#: --dump-margin's default: seconds dumped either side of a burst's sweep.
MARGIN_S = 0.05


def trigger_address(text: str) -> str:
    """``--trigger-listen HOST:PORT``: port 0 picks a free one (logged)."""
    return host_port(text, free_port=True)


#: --dump-threshold's default: the S/N from which a live search's candidate is dumped.
DUMP_THRESHOLD = 10.0
#: The options that mean nothing without --ring-seconds (the search's flags too).
DUMP_FLAGS = ("--trigger-listen", "--trigger-katcp", "--dump-dir", "--dump-margin",
              "--voltage-ring-mb",
              "--dump-threshold")  # fmt: skip


def add_dump_options(p: argparse.ArgumentParser, candidates: bool = False) -> None:
    """The options of the triggered voltage dumps: capture's, and with ``candidates``
    the live search's (the same ones, --trigger-listen then optional, and
    --dump-threshold and --source). Defaults of those given only with --ring-seconds
    are None here, so that `check_dump_options` sees them given; `ring_and_dumps`
    applies them."""
    g = p.add_argument_group(
        "triggered voltage dumps",
        "keep the last seconds of voltages in host memory and write a window of them as "
        "DADA when a trigger asks (POST /trigger; live search: a candidate; docs/search.md)",
    )
    add_options(g, (
        ("--ring-seconds", positive(float), None,
         "keep the last this many seconds of the stream's samples (the voltage ring; "
         "memory: seconds x the stream's rate) for triggered dumps: capture needs "
         "--trigger-listen; search --listen dumps its candidates above --dump-threshold"),
        ("--voltage-ring-mb", positive(float), None,
         "the most host memory (MiB) the voltage ring may take: a --ring-seconds that "
         "needs more, or more than the machine has available, is refused at start. "
         f"Default: {RING_LIMIT_MB}"),
        ("--trigger-listen", trigger_address, None,
         "serve triggers over HTTP on HOST:PORT (port 0 picks one, logged): POST /trigger "
         'with a JSON window ({"start": S, "end": S} in seconds since the stream\'s first '
         'sample, "start_mjd"/"end_mjd", or a burst\'s "dm" and "time"), GET /ring'),
        ("--trigger-katcp", trigger_address, None,
         "serve the same triggers over katcp on HOST:PORT (port 0 picks one, logged): "
         "?trigger-window START END [partial], ?trigger-mjd START_MJD END_MJD [partial], "
         "?trigger-burst DM TIME [MARGIN [FREQ]], ?ring"),
        ("--dump-dir", None, None, "directory the dumps are written to, one DADA file "
         "each. Default: the current one"),
        ("--dump-margin", finite(float, 0), None,
         "seconds dumped before a burst's arrival at the top of the band and after its "
         f"arrival at the bottom (a trigger's \"margin\" overrides). Default: {MARGIN_S:g}"),
    ))  # fmt: skip
    if candidates:
        add_options(g, (
            ("--dump-threshold", positive(float), None,
             "search --listen: dump the voltages of every candidate with at least this "
             f"S/N (its burst's sweep and --dump-margin). Default: {DUMP_THRESHOLD:g}"),
            ("--source", None, "J0000+0000", "source name for the DADA header"),
        ))  # fmt: skip


def check_dump_options(args: argparse.Namespace, trigger_needed: bool = False) -> bool:
    """Whether the run keeps a voltage ring; a ConfigError (one line) for a dump option
    without --ring-seconds, for a ring without --trigger-listen where it is the only
    trigger (``trigger_needed``: capture), and for a --dump-dir that is no writable
    directory. Applies the defaults left None by `add_dump_options`."""
    given = [f for f in DUMP_FLAGS if getattr(args, f[2:].replace("-", "_"), None) is not None]
    if getattr(args, "ring_seconds", None) is None:
        if given:
            raise ConfigError(f"{given[0]} is an option of the voltage ring: give "
                              "--ring-seconds T too (the seconds it keeps)")  # fmt: skip
        return False
    if trigger_needed and args.trigger_listen is None and args.trigger_katcp is None:
        raise ConfigError(
            "--ring-seconds keeps voltages for triggers: give --trigger-listen HOST:PORT "
            "or --trigger-katcp HOST:PORT too (e.g. 127.0.0.1:7070)"
        )
    for name, default in (("dump_dir", "."), ("dump_margin", MARGIN_S),
                          ("voltage_ring_mb", RING_LIMIT_MB),
                          ("dump_threshold", DUMP_THRESHOLD)):  # fmt: skip
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    d = Path(args.dump_dir)
    if not d.is_dir():
        raise ConfigError(f"--dump-dir {d}: no such directory; create it first (mkdir -p)")
    if not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError(f"--dump-dir {d}: the directory is not writable")
    return True


#: The least capture pool (MiB of chunks) of a run that keeps a voltage ring.
DUMP_POOL_MB = 512


def ring_and_dumps(args: argparse.Namespace, fmt: Any, settings: Any) -> tuple[Any, Any, Any]:
    """(capture settings keeping whole packets, the voltage ring, its Dumps) of the
    options: the ring's memory checked against --voltage-ring-mb and the machine's, and
    allocated now, before the capture opens. Its consumer is set by the caller
    (``ring.inner``, or run_capture's ``tap=ring.around``)."""
    from voltstream.capture.report import CaptureReport
    from voltstream.capture.ring import VoltageRing, check_ring_memory, ring_bytes
    from voltstream.capture.run import CountingSink
    from voltstream.formats import StreamFormat
    from voltstream.record.dumps import Dumps

    if not isinstance(fmt, StreamFormat):
        raise ConfigError(
            f"--ring-seconds dumps YNAO and VDIF streams (their samples and clock are "
            f"known); a {fmt.name} stream is captured and counted without it"
        )
    # Whole packets in the chunks: the first packet's header is the stream's clock.
    settings = settings.replace(whole_packets=True)
    ppc = settings.chunks.packets_per_chunk
    # The pool rides out the consumer's waits, and a dump's writer thread shares its GIL
    # and memory bus: at least DUMP_POOL_MB of it (the default of 36 chunks of
    # 256 YNAO packets is 20 ms at 30 Gb/s; session 15's dump lost 167 chunks with it).
    chunk_bytes = ppc * fmt.payload_len * fmt.streams
    floor = -(-DUMP_POOL_MB * 2**20 // chunk_bytes)
    if settings.chunks.nchunks < floor:
        settings = settings.replace(nchunks=floor)
    check_ring_memory(ring_bytes(fmt, args.ring_seconds, ppc), args.ring_seconds,
                      args.voltage_ring_mb)  # fmt: skip
    stand_in = CountingSink(fmt, CaptureReport(format=fmt.name, bind=""))
    ring = VoltageRing(fmt, args.ring_seconds, ppc, stand_in)
    source = getattr(args, "source", None) or "J0000+0000"
    return settings, ring, Dumps(ring, args.dump_dir, source, args.dump_margin)


def serve_triggers(dumps: Any, args: argparse.Namespace) -> list:
    """The trigger servers of ``dumps`` the options ask for (HTTP, katcp), their
    addresses logged; close each (`close_servers`) when the capture ends."""
    from voltstream.record.trigger_http import TriggerServer

    servers: list = []
    try:
        if args.trigger_listen is not None:
            servers.append(TriggerServer(dumps, args.trigger_listen))
            log.info("triggers: listening on http://%s (POST /trigger, GET /ring)",
                     servers[-1].address)  # fmt: skip
        if getattr(args, "trigger_katcp", None) is not None:
            # aiokatcp is optional (voltstream[control]): only katcp triggers need it.
            katcp = optional_module("voltstream.record.trigger_katcp", "--trigger-katcp")
            servers.append(katcp.KatcpTriggerServer(dumps, args.trigger_katcp))
            log.info("triggers: katcp on %s (?trigger-window, ?trigger-mjd, "
                     "?trigger-burst, ?ring)", servers[-1].address)  # fmt: skip
    except BaseException:
        close_servers(servers)
        raise
    return servers


def close_servers(servers: list) -> None:
    """Closes the trigger servers (no trigger is taken after)."""
    for server in servers:
        server.close()


def _with_dumps(watch: Any, dumps: Any) -> Any:
    """The metrics board's ``watch`` (None without --metrics) given the report so far
    with the dumps' counts in it (its ``dumps`` section, as at the end)."""
    if watch is None:
        return None
    return lambda so_far: watch(lambda: so_far() | {"dumps": dumps.as_dict()})


def capture_with_ring(args: argparse.Namespace) -> int | Loss:
    """`capture` with the voltage ring and the trigger server (``--ring-seconds``, its
    options checked by `check_dump_options`); the capture's own --output and counters
    as without it: the ring takes each item in front of the run's sink. (Imports here:
    the parser imports this module for its options, and is built without NumPy.)"""
    from voltstream.capture.run import run_capture
    from voltstream.cli.common import (
        _capture_format,
        _capture_settings,
        _nothing_received,
        _print_report,
        _stop_event,
        capture_output,
    )

    fmt = _capture_format(args)
    settings, ring, dumps = ring_and_dumps(args, fmt, _capture_settings(args, args.listen))
    writer = capture_output(args, fmt)
    servers: list = []
    try:
        servers = serve_triggers(dumps, args)
        report = run_capture(
            fmt, settings, args.duration,
            sink=None if writer is None else (lambda samples, valid: writer.write(samples)),
            idle_timeout_s=args.idle_timeout, tap=ring.around,
            on_start=lambda: log.info("capture: listening on %s", args.listen),
            stop_event=_stop_event(args), live_report=_with_dumps(watcher(args), dumps),
        )  # fmt: skip
    finally:
        close_servers(servers)
        dumps.close()  # every dump asked for is written before the report
        if writer is not None:
            writer.close()
    report.dumps = dumps.as_dict()
    no_data = _nothing_received("capture", report, fmt.name, args.output, args.report)
    if no_data is not None:
        return no_data
    return _print_report(report, args.report, report.engine)
