"""The command line of operations: ``--metrics HOST:PORT`` on every long-running
verb, the `serving` wrapper that runs a verb with its metrics server, and the
``voltstream status`` verb. Nothing heavy is imported until a verb runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from voltstream.errors import ConfigError, optional_module

#: The verbs that run until a duration, an idle timeout or Ctrl-C, and serve metrics.
LONG_RUNNING = ("capture", "fold", "fengine", "record", "replay", "latency", "search")

#: Options that describe a run, copied into the info metric and /status.json.
CONFIG_KEYS = (
    "format", "stream", "listen", "dest", "engine", "threads", "cpus", "packets_per_chunk",
    "window", "ring_mb", "duration", "idle_timeout", "device", "dirs", "scan", "layout",
    "channels", "rate", "multicast", "interface", "input", "inputs",
)  # fmt: skip


def metrics_address(text: str) -> str:
    """``--metrics HOST:PORT``: like every HOST:PORT, but port 0 (pick a free one) too."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT (e.g. 127.0.0.1:9100, port 0 picks a free one), got {text!r}"
        )
    return text


def add_metrics_options(verbs: Any) -> None:
    """``--metrics`` on each long-running verb of the subparsers ``verbs``."""
    for verb in LONG_RUNNING:
        verbs.choices[verb].add_argument(
            "--metrics",
            type=metrics_address,
            default=None,
            metavar="HOST:PORT",
            help="serve the run's counters while it runs: Prometheus text at "
            "http://HOST:PORT/metrics, the report so far at /status.json (what "
            "`voltstream status HOST:PORT` shows); port 0 picks a free port, printed on "
            "stderr. docs/operations.md lists the metrics",
        )


#: The verbs that also serve their counters as katcp sensors (issue 13, item 6).
KATCP_VERBS = ("capture", "fold", "record")


def add_katcp_options(verbs: Any) -> None:
    """``--katcp-sensors`` on the capture verbs of the subparsers ``verbs``."""
    for verb in KATCP_VERBS:
        verbs.choices[verb].add_argument(
            "--katcp-sensors",
            type=metrics_address,
            default=None,
            metavar="HOST:PORT",
            help="serve the run's counters as katcp sensors (aiokatcp) on HOST:PORT, the "
            "same numbers as --metrics (e.g. stream-packets.stream1.missing); port 0 picks "
            "a free port, printed on stderr",
        )


@contextmanager
def serving(args: argparse.Namespace) -> Iterator[None]:
    """Runs a verb with ``args.run_status`` (a `RunStatus` its run reports into) and,
    with ``--metrics`` (``--katcp-sensors``), the server that shows it; the servers
    stop when the verb ends."""
    address = getattr(args, "metrics", None)
    katcp_address = getattr(args, "katcp_sensors", None)
    if address is None and katcp_address is None:
        yield
        return
    from voltstream.ops.board import RunStatus

    config = {k: getattr(args, k) for k in CONFIG_KEYS if getattr(args, k, None) is not None}
    if config.get("stream"):  # the file says what the format is; --format is its default
        config.pop("format", None)
    args.run_status = board = RunStatus(args.verb, config)
    servers: list[Any] = []
    try:
        if address is not None:
            from voltstream.ops.server import MetricsServer

            servers.append(MetricsServer(board, address))
            print(
                f"{args.verb}: metrics on http://{servers[-1].address}/metrics "
                f"(status: voltstream status {servers[-1].address})",
                file=sys.stderr,
                flush=True,
            )
        if katcp_address is not None:
            sensors = optional_module("voltstream.ops.katcp_sensors", "--katcp-sensors")
            servers.append(sensors.KatcpSensors(board, katcp_address))
            print(f"{args.verb}: katcp sensors on {servers[-1].address}", file=sys.stderr,
                  flush=True)  # fmt: skip
        yield
    finally:
        board.finish()
        for server in servers:
            server.close()


def watcher(args: argparse.Namespace) -> Callable[[Callable[[], dict]], None] | None:
    """What a verb passes its run as ``live_report``: None without ``--metrics``."""
    board = getattr(args, "run_status", None)
    return None if board is None else board.watch


def add_status_parser(verbs: Any) -> None:
    p = verbs.add_parser(
        "status",
        help="live view of a running voltstream process (one started with --metrics)",
        description="Polls http://HOST:PORT/status.json of a verb run with --metrics "
        "HOST:PORT once a second and shows it: rates in (Gb/s, packets/s), every "
        "counter with its rate of change per stream and per capture thread, the chunk "
        "pool's fill, GPU busy where the verb has a GPU stage, time running; a loss "
        "counter that rose since the last poll is shown red. Plain terminal output: "
        "works over ssh. Ctrl-C ends it.",
    )
    p.add_argument("address", type=metrics_address, metavar="HOST:PORT",
                   help="the --metrics address of the running verb")  # fmt: skip
    p.add_argument("--once", action="store_true",
                   help="print one frame (counters and their totals) and exit")  # fmt: skip
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between polls. Default: 1")  # fmt: skip


def status(args: argparse.Namespace) -> int:
    from voltstream.ops.status_view import run_status_view

    if not args.interval > 0:
        raise ConfigError(f"--interval {args.interval}: give a positive number of seconds")
    return run_status_view(args.address, once=args.once, interval_s=args.interval)
