"""`voltstream fengine`: the F-engine verb and its katcp control (commands.py
dispatches here)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
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
from voltstream.errors import ConfigError
from voltstream.fengine.settings import FEngineSettings
from voltstream.service.exit_status import Loss

log = logging.getLogger("voltstream.cli.commands")


def fengine_settings(args: argparse.Namespace) -> Any:
    """The verb's options as one FEngineSettings (a pipeline file's [fengine] comes
    here too, as this verb's command line: run_file.py)."""
    from voltstream.fengine.settings import FEngineSettings

    # The checks that name an option and need no other come first, as the user gave them.
    check_bits(args.sample_bits, "--sample-bits")
    dig_ids = _parse_dig_ids(args.dig_ids)
    given = {name: getattr(args, name) for name in _SETTINGS if name != "dig_ids"}
    return FEngineSettings(dig_ids=dig_ids, **given)


#: The options that are FEngineSettings' fields, each under its own name.
_SETTINGS = tuple(f.name for f in dataclasses.fields(FEngineSettings))


def fengine(args: argparse.Namespace) -> Loss:
    """`voltstream fengine`: capture, channelise, send; prints every counter at the end."""
    from voltstream.fengine.engines import make_engine, resolve_device
    from voltstream.fengine.pipeline import apply_settings, run_fengine

    s = fengine_settings(args)
    if not s.dest and not s.output:
        raise ConfigError(
            "nowhere to send: give --dest HOST:PORT (one per substream) and/or --output FILE"
        )
    device = resolve_device(args.device)
    control = None
    gains = delays = None
    if args.katcp_port is not None or args.settings:
        control_mod = _fengine_control(args)
        if args.settings:
            gains, delays = control_mod.load_settings(args.settings, nchan=s.channels)
        if args.katcp_port is not None:
            control = control_mod.FEngineControl(
                {"nchan": s.channels, "sample_rate_hz": s.sample_rate_hz, "n_pols": 2},
                host=args.katcp_host,
                port=args.katcp_port,
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
    output = s.heap_output()
    rate = s.send_rate_gbps
    where = ", ".join(s.dest) if s.dest else "no UDP destination"
    print(
        f"fengine ({device}): {args.listen} (ids {s.dig_ids[0]},{s.dig_ids[1]}, "
        f"{s.sample_bits}-bit) -> {s.channels} channels x {s.spectra_per_heap} spectra, "
        f"{s.n_substreams} substream(s), {s.output_bits}-bit -> {where}"
        + (f" + {s.output}" if s.output else "")
        + (f", output paced at up to {rate:.2f} Gb/s" if rate else ", output unpaced")
        + (
            ""
            if s.rate is not None
            else f" (the output of a {s.sample_rate_hz / 1e6:g} MHz digitiser + 10 %; --rate)"
        ),
        flush=True,
    )
    if control is not None:
        control.start()
        host, port = control.address
        print(f"fengine: katcp control on {host}:{port}", flush=True)
    try:
        report = run_fengine(
            _capture_settings(args, args.listen),
            s,
            engine,
            output,
            duration_s=args.duration,
            idle_timeout_s=args.idle_timeout,
            control=control,
            engine_factory=factory,
            status=_status_line(args),
            live_report=watcher(args),
            on_start=lambda address: print(f"fengine: listening on {address}", flush=True),
            stop_event=_stop_event(args),
        )
    finally:
        if control is not None:
            control.stop()
    return _print_report(report, args.report, report.capture)


def _fengine_control(args: argparse.Namespace) -> Any:
    """The katcp control module, or a one-line error naming the option that needs it."""
    try:
        from voltstream.fengine import control
    except ImportError as e:
        what = "--katcp-port" if args.katcp_port is not None else "--settings"
        raise ConfigError(
            f"{what} needs voltstream.fengine.control (katcp control, aiokatcp), which "
            f"cannot be imported: {e}"
        ) from None
    return control
