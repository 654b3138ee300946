"""`voltstream fengine`: the F-engine verb and its katcp control (commands.py
dispatches here)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from voltstream.cli.common import (
    _by_name,
    _capture_settings,
    _print_report,
    _status_line,
    _stop_event,
)
from voltstream.cli.ops import status, watcher  # noqa: F401 - status: `voltstream status`
from voltstream.cli.simulate import _parse_dig_ids
from voltstream.errors import ConfigError
from voltstream.service.exit_status import Loss

log = logging.getLogger("voltstream.cli.commands")


def fengine(args: argparse.Namespace) -> Loss:
    """`voltstream fengine`: capture, channelise, send; prints every counter at the end."""
    from voltstream.digitiser import check_bits
    from voltstream.dsp.pfb import check_pfb_shape
    from voltstream.fengine.engines import make_engine, resolve_device
    from voltstream.fengine.heaps import HeapLayout
    from voltstream.fengine.output import HeapOutput, parse_destinations
    from voltstream.fengine.pipeline import apply_settings, run_fengine

    check_bits(args.sample_bits, "--sample-bits")
    if args.output_bits not in (4, 8):
        raise ConfigError(
            f"--output-bits {args.output_bits}: the output is 8-bit or 4-bit, use 8 or 4"
        )
    nchan, taps = check_pfb_shape(args.channels, args.taps)
    dig_ids = _parse_dig_ids(args.dig_ids)
    dests = parse_destinations(args.dest)
    substreams = args.substreams if args.substreams is not None else max(1, len(dests))
    if substreams < 1:
        raise ConfigError(f"--substreams {substreams}: give at least 1")
    if not dests and not args.output:
        raise ConfigError(
            "nowhere to send: give --dest HOST:PORT (one per substream) and/or --output FILE"
        )
    layout = HeapLayout(nchan, args.spectra_per_heap, substreams, args.output_bits)
    if args.rate is None:
        # Output bytes per digitiser sample time: 2 pols x (2 or 1) bytes per complex
        # value x nchan values per 2*nchan samples; plus packet headers; 10% margin.
        per_sample = 2 * (2 if args.output_bits == 8 else 1) / 2
        per_packet = max(1, min(args.packet_payload, layout.payload_bytes))
        overhead = (per_packet + 72) / per_packet
        rate = 1.1 * args.sample_rate_hz * per_sample * 8 * overhead / 1e9
    else:
        rate = args.rate
    settings = dict(
        nchan=nchan,
        taps=taps,
        n_substreams=substreams,
        bits=args.output_bits,
        **_by_name(args, "spectra_per_heap", "sample_rate_hz", "max_delay_samples",
                   "feng_id", "dither_seed"),
    )  # fmt: skip
    if not 0 <= args.feng_id < args.n_fengs:
        raise ConfigError(f"--feng-id {args.feng_id} must be in 0 .. --n-fengs - 1")
    device = resolve_device(args.device)
    control = None
    gains = delays = None
    if args.katcp_port is not None or args.settings:
        control_mod = _fengine_control(args)
        if args.settings:
            gains, delays = control_mod.load_settings(args.settings, nchan=nchan)
        if args.katcp_port is not None:
            control = control_mod.FEngineControl(
                {"nchan": nchan, "sample_rate_hz": args.sample_rate_hz, "n_pols": 2},
                host=args.katcp_host,
                port=args.katcp_port,
            )

    def factory() -> Any:
        return make_engine(device, sample_bits=args.sample_bits, **settings)

    engine = factory()
    if control is not None:
        # Through the control's queue, so ?gain answers what the engine uses; it
        # reaches the engine before the first block.
        for pol, g in (gains or {}).items():
            control.queue_gains(pol, g)
        control.queue_delay_models(delays or {})
    else:
        apply_settings(engine, gains, delays)
    output = HeapOutput(
        layout,
        dests,
        rate_gbps=rate,
        output_file=args.output,
        **_by_name(args, "packet_payload", "n_fengs", "descriptor_interval"),
    )
    where = ", ".join(dests) if dests else "no UDP destination"
    print(
        f"fengine ({device}): {args.listen} (ids {dig_ids[0]},{dig_ids[1]}, "
        f"{args.sample_bits}-bit) -> {nchan} channels x {args.spectra_per_heap} spectra, "
        f"{substreams} substream(s), {args.output_bits}-bit -> {where}"
        + (f" + {args.output}" if args.output else "")
        + (f", output paced at up to {rate:.2f} Gb/s" if rate else ", output unpaced")
        + (
            ""
            if args.rate is not None
            else f" (the output of a {args.sample_rate_hz / 1e6:g} MHz digitiser + 10 %; --rate)"
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
            engine,
            output,
            dig_ids=dig_ids,
            sample_bits=args.sample_bits,
            duration_s=args.duration,
            idle_timeout_s=args.idle_timeout,
            control=control,
            engine_factory=factory,
            status=_status_line(args),
            live_report=watcher(args),
            **_by_name(args, "samples_per_heap", "chunk_heaps"),
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
