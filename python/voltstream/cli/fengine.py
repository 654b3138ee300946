"""`voltstream fengine`: the F-engine verb and its katcp control (commands.py
dispatches here)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
from typing import Any

from voltstream.cli.common import (
    _capture_settings,
    _print_report,
    _status_line,
    _stop_event,
)
from voltstream.cli.ops import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.cli.simulate import _parse_dig_ids
from voltstream.digitiser import check_bits
from voltstream.errors import ConfigError, optional_module
from voltstream.fengine.settings import FEngineSettings
from voltstream.service.exit_status import Loss, capture_loss

log = logging.getLogger("voltstream.cli.commands")


def fengine_settings(args: argparse.Namespace, antennas: int = 1) -> Any:
    """The verb's options as one FEngineSettings (a pipeline file's [fengine] comes
    here too, as this verb's command line: run_file.py). Several ``antennas``: their
    destinations left out (``split_settings`` shares them out)."""
    from voltstream.fengine.settings import FEngineSettings

    # The checks that name an option and need no other come first, as the user gave them.
    check_bits(args.sample_bits, "--sample-bits")
    dig_ids = _dig_id_pairs(args.dig_ids)[0]  # one antenna's; each one's: fengine()
    given = {name: getattr(args, name) for name in _SETTINGS if name != "dig_ids"}
    if antennas > 1:
        given["dest"] = ()
    return FEngineSettings(dig_ids=dig_ids, **given)


#: The options that are FEngineSettings' fields, each under its own name.
_SETTINGS = tuple(f.name for f in dataclasses.fields(FEngineSettings))


def fengine(args: argparse.Namespace) -> Loss:
    """`voltstream fengine`: capture, channelise, send; prints every counter at the end.
    Several --listen addresses: one antenna each, all in this process
    (fengine/antennas.py); one address runs exactly as it always has."""
    from voltstream.cli.options import listen_addresses
    from voltstream.fengine.antennas import split_capture, split_settings
    from voltstream.fengine.engines import resolve_device
    from voltstream.fengine.output import parse_destinations

    n = len(listen_addresses(args.listen))
    s = fengine_settings(args, n)
    dest = parse_destinations(args.dest)
    if not dest and not s.output:
        raise ConfigError(
            "nowhere to send: give --dest HOST:PORT (one per substream) and/or --output FILE"
        )
    pairs = _dig_id_pairs(args.dig_ids)
    if len(pairs) not in (1, n):
        raise ConfigError(
            f"--dig-ids {args.dig_ids}: {len(pairs)} pairs of ids for {n} antenna(s) "
            "(--listen): give one pair for every antenna or one pair per antenna"
        )
    outputs = s.output.split(",") if n > 1 and s.output else None
    per_antenna = split_settings(s, n, dest=dest, dig_ids=pairs, outputs=outputs)
    captures = split_capture(_capture_settings(_no_threads(args), args.listen), n,
                             _threads_per_antenna(args.threads, n))  # fmt: skip
    device = resolve_device(args.device)
    files = _per_antenna(args.settings, n, "--settings") if args.settings else [None] * n
    antennas = [
        _antenna(args, device, k, n, ak, cap, path)
        for k, (ak, cap, path) in enumerate(zip(per_antenna, captures, files, strict=True))
    ]
    for k, a in enumerate(antennas):
        print(_start_line(a.settings, device, a.capture.network.bind,
                          f"antenna {k}: " if n > 1 else ""), flush=True)  # fmt: skip
    controls = [a.control for a in antennas if a.control is not None]
    for k, a in enumerate(antennas):
        if a.control is not None:
            a.control.start()
            host, port = a.control.address
            where = f"antenna {k} " if n > 1 else ""
            print(f"fengine: {where}katcp control on {host}:{port}", flush=True)
    try:
        if n == 1:
            return _run_one(args, antennas[0])
        return _run_many(args, antennas)
    finally:
        for c in controls:
            c.stop()


def _threads_per_antenna(threads: int | None, n: int) -> int:
    """--threads (in all) as each of ``n`` antennas' share; one each by default (1, as a
    pipeline file that says nothing else gives it)."""
    if threads is None or threads == 1:
        return 1
    if threads % n:
        raise ConfigError(
            f"--threads {threads}: the {n} antennas share the capture threads evenly: "
            f"give a multiple of {n}"
        )
    return threads // n


def _no_threads(args: argparse.Namespace) -> argparse.Namespace:
    """The options with --threads left to the split per antenna (split_capture): a band
    of several addresses takes one thread per address otherwise."""
    return argparse.Namespace(**(vars(args) | {"threads": None}))


def _run_one(args: argparse.Namespace, a: Any) -> Loss:
    """One antenna: run_fengine and its report, as ever."""
    from voltstream.fengine.pipeline import run_fengine

    report = run_fengine(
        a.capture, a.settings, a.engine, a.output, duration_s=args.duration,
        idle_timeout_s=args.idle_timeout, control=a.control, engine_factory=a.factory,
        status=_status_line(args), live_report=watcher(args), stop_event=_stop_event(args),
        on_start=lambda address: print(f"fengine: listening on {address}", flush=True),
    )  # fmt: skip
    return _print_report(report, args.report, report.capture)


def _run_many(args: argparse.Namespace, antennas: list[Any]) -> Loss:
    """Several antennas in threads of this process: a section per antenna, then the
    totals; the loss is every antenna's, added up."""
    from voltstream.fengine.antennas import run_antennas

    lock, bound = threading.Lock(), [""] * len(antennas)

    def started(k: int, address: str) -> None:
        with lock:
            bound[k] = address
            print(f"fengine: antenna {k} on {address}", flush=True)
            if all(bound):  # the process is ready once every antenna captures
                print(f"fengine: listening on {', '.join(bound)}", flush=True)

    report = run_antennas(
        antennas,
        duration_s=args.duration,
        idle_timeout_s=args.idle_timeout,
        stop_event=_stop_event(args),
        status=_status_line(args),
        live_report=watcher(args),
        on_start=started,
    )
    for line in report.summary_lines():
        print(line)
    if args.report:
        report.write_json(args.report)
    losses = [capture_loss(r.capture) for r in report.antennas]  # every antenna's packets
    return Loss(sum(x.lost for x in losses), sum(x.expected for x in losses))


def _antenna(
    args: argparse.Namespace, device: str, k: int, n: int, s: Any, capture: Any,
    settings_file: str | None,
) -> Any:  # fmt: skip
    """Antenna k's engine, output and katcp control (port --katcp-port + k)."""
    from voltstream.fengine.antennas import Antenna
    from voltstream.fengine.engines import make_engine
    from voltstream.fengine.pipeline import apply_settings

    control = None
    gains = delays = None
    if args.katcp_port is not None or settings_file:
        control_mod = _fengine_control(args)
        if settings_file:
            gains, delays = control_mod.load_settings(settings_file, nchan=s.channels)
        if args.katcp_port is not None:
            control = control_mod.FEngineControl(
                {"nchan": s.channels, "sample_rate_hz": s.sample_rate_hz, "n_pols": 2},
                host=args.katcp_host,
                port=args.katcp_port + k if args.katcp_port else 0,
            )

    def factory() -> Any:
        return make_engine(device, sample_bits=s.sample_bits, **s.engine_kwargs())

    engine = factory()
    if control is not None:
        # Through the control's queue, so ?gain answers what the engine uses; it
        # reaches the engine before the first block.
        for pol, g in (gains or {}).items():
            control.queue_gains(pol, g)
        control.queue_delay_models(delays or {})
    else:
        apply_settings(engine, gains, delays)
    return Antenna(capture, s, engine, s.heap_output(), factory, control)


def _start_line(s: Any, device: str, listen: str, prefix: str) -> str:
    rate = s.send_rate_gbps
    where = ", ".join(s.dest) if s.dest else "no UDP destination"
    return (
        f"fengine ({device}): {prefix}{listen} (ids {s.dig_ids[0]},{s.dig_ids[1]}, "
        f"{s.sample_bits}-bit) -> {s.channels} channels x {s.spectra_per_heap} spectra, "
        f"{s.n_substreams} substream(s), {s.output_bits}-bit -> {where}"
        + (f" + {s.output}" if s.output else "")
        + (f", output paced at up to {rate:.2f} Gb/s" if rate else ", output unpaced")
        + (
            ""
            if s.rate is not None
            else f" (the output of a {s.sample_rate_hz / 1e6:g} MHz digitiser + 10 %; --rate)"
        )
        + (f", feng_id {s.feng_id} of {s.n_fengs}" if prefix else "")
    )


def _dig_id_pairs(text: str) -> list[tuple[int, int]]:
    """``--dig-ids``: two ids (pol 0, pol 1), or two per antenna, antenna by antenna."""
    items = str(text).split(",")
    if len(items) <= 2 or len(items) % 2:
        return [_parse_dig_ids(text)]
    return [_parse_dig_ids(",".join(items[i : i + 2])) for i in range(0, len(items), 2)]


def _per_antenna(text: str, n: int, option: str) -> list[str]:
    """A comma list of one value for every antenna or one per antenna (one antenna:
    the text as given)."""
    if n == 1:
        return [text]
    items = [t.strip() for t in str(text).split(",")]
    if len(items) not in (1, n):
        raise ConfigError(
            f"{option} {text}: {len(items)} given for {n} antennas; give one for every "
            "antenna or one per antenna, comma-separated in --listen order"
        )
    return items * n if len(items) == 1 else items


def _fengine_control(args: argparse.Namespace) -> Any:
    """The katcp control module, or a one-line error naming the option that needs it."""
    what = "--katcp-port" if args.katcp_port is not None else "--settings"
    return optional_module("voltstream.fengine.control", what)
