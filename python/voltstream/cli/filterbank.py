"""`voltstream filterbank`: a search filterbank (SIGPROC .fil or PSRFITS search mode)
from a baseband file or a live stream: its options and the verb (docs/search.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from voltstream.cli.live_group import add_live_stream, filterbank_shape
from voltstream.cli.options import add_device, add_format_options, add_options, add_verb, finite
from voltstream.errors import ConfigError

log = logging.getLogger("voltstream.cli.filterbank")

DESCRIPTION = """\
Make a search filterbank, on the GPU or with the CPU's NumPy reference (--device):
each coarse channel split into --fine-channels fine channels by FFT (in frequency
order), optionally coherently dedispersed within each fine channel at --dm (digifil
-D), detected (--pol), integrated to --tsamp and written as 8-bit samples with a scale
and offset per channel (or 32-bit floats) to a SIGPROC filterbank (.fil) or PSRFITS
search-mode file (.fits). Live on the GPU the capture's chunks go to the GPU as they
arrived; only the integrated samples come back. Lost input (missing packets or
frames) is flagged: those samples hold the channel's mean (the quantiser's zero), a
PSRFITS row with nothing else gets weight 0, and the report counts them.
"""

EPILOG = """\
examples:
  voltstream filterbank obs.dada --fine-channels 64 --tsamp 0.000256 -o obs.fil
  voltstream filterbank obs.vdif --fine-channels 16 --dm 56.8 --pol IQUV -o obs.fits
  voltstream filterbank --listen 127.0.0.1:7000 --duration 10 --fine-channels 32 -o live.fil
  voltstream filterbank --listen 127.0.0.1:7000 --device gpu --fine-channels 64 \
      --tsamp 0.000128 -o /dev/shm/live.fil
"""


def add_filterbank_parser(verbs: Any) -> None:
    p = add_verb(
        verbs,
        "filterbank",
        "make a search filterbank (SIGPROC .fil or PSRFITS search mode) from baseband",
        DESCRIPTION,
        EPILOG,
    )
    p.add_argument("input", nargs="?",
                   help="baseband file: DADA or VDIF, as fold takes (not with --listen)"
                   )  # fmt: skip
    p.add_argument("-o", "--output", required=True,
                   help="file to write: .fil (SIGPROC) or .fits (PSRFITS search mode)")  # fmt: skip
    add_options(p, (
        ("--output-format", None, None,
         "sigproc or psrfits. Default: from the output's suffix (.fits, .sf: psrfits; "
         "else sigproc). (--format names the stream's format, as for fold --listen)",
         ("sigproc", "psrfits")),
        ("--pol", None, "I", "detection: I (|A|^2+|B|^2, one IF), AABB (two IFs) or IQUV "
         "(Stokes, four IFs). Default: I", ("I", "AABB", "IQUV")),
        ("--nbits", int, 8, "8 (bytes: running per-channel scale and offset) or 32 (float). "
         "Default: 8", (8, 32)),
        ("--dm", finite(float, 0), None,
         "coherently dedisperse within each fine channel at this DM (pc cm^-3), leaving "
         "each its delay at its centre for an incoherent search. Default: none"),
        ("--nsblk", finite(int, 1), 1024,
         "output samples per PSRFITS row, and per update of the 8-bit scales. Default: 1024"),
    ))  # fmt: skip
    filterbank_shape(p, "")
    add_device(p, "where to channelise, dedisperse and detect (live on the GPU: the "
               "capture's chunks straight to it)")  # fmt: skip
    add_live_stream(p, "capture and filterbank", duration=10.0,
                    report="write the report (JSON) here: the filterbank's counts and, live, "
                    "the capture's")  # fmt: skip
    add_format_options(p)


def filterbank(args: argparse.Namespace) -> Any:
    import json

    from voltstream.cli.common import (
        _capture_format,
        _capture_settings,
        _now_mjd,
        _progress,
        _stop_event,
        live_gpu_run,
        watcher,
    )
    from voltstream.cli.stream_options import gpu_check
    from voltstream.device import resolve_device
    from voltstream.pipeline.filterbank import open_writer, run_filterbank
    from voltstream.search.filterbank import FilterbankPlan, FilterbankSettings
    from voltstream.service.outputs import check_outputs

    check_outputs([("-o", args.output), ("--report", args.report)])
    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either an INPUT file or --listen HOST:PORT, not both or neither")
    file_format = args.output_format or (
        "psrfits" if args.output.lower().endswith((".fits", ".sf")) else "sigproc"
    )
    device = resolve_device(args.device, need=gpu_check(args))
    live = None
    reader: Any = None
    if args.listen:
        from voltstream.cli.stream_options import live_real
        from voltstream.pipeline.live import LiveReader

        fmt = _capture_format(args)
        mjd, sec = _now_mjd()
        obs = fmt.observation(start_mjd=mjd, start_sec=sec)
        if device != "gpu":
            live = LiveReader(fmt, _capture_settings(args, args.listen), args.duration, obs,
                              idle_timeout_s=args.idle_timeout, stop_event=_stop_event(args),
                              live_report=watcher(args))  # fmt: skip
        reader, obs = live_real(fmt, live, obs, device)
    else:
        from voltstream.cli.stream_options import file_threads
        from voltstream.io.baseband import open_baseband

        if args.real:
            raise ConfigError("--real describes a live stream; a file's headers say whether "
                              "its samples are real")  # fmt: skip
        reader = open_baseband(args.input, args.chan_bw, args.freq, sequence=True,
                               threads=file_threads(args))  # fmt: skip
        if reader.obs.ndim == 1:  # real-sampled channels, as the fold takes them
            from voltstream.dsp.real import RealToComplex

            reader = RealToComplex(reader)
        obs = reader.obs
    settings = FilterbankSettings(args.fine_channels, args.tsamp, args.pol, args.nbits,
                                  args.dm, args.nsblk)  # fmt: skip
    plan = FilterbankPlan(obs, settings)  # every option checked before the capture starts
    history = "voltstream " + " ".join(sys.argv[1:])
    capture_report = None
    if args.listen and device == "gpu":
        from voltstream.pipeline.live import GpuChunking
        from voltstream.pipeline.live_filterbank import filterbank_live_gpu

        writer = open_writer(args.output, file_format, plan, history)
        report, capture_report = filterbank_live_gpu(
            fmt, _capture_settings(args, args.listen), args.duration, plan, writer,
            args.output, file_format, GpuChunking(args.packets_per_chunk, args.buffer_mb),
            live_gpu_run(args, "filterbank"),
        )  # fmt: skip
    else:
        if live is not None:
            live.start()
            log.info("filterbank: listening on %s", args.listen)
        total = getattr(reader, "nsamp", None) if live is None else None
        with _progress(args, "filterbank", total, "samples") as update:
            report = run_filterbank(reader, plan, args.output, file_format, history, update,
                                    device)  # fmt: skip
        capture_report = live.report if live is not None else None
    if args.listen and capture_report is not None:
        from voltstream.cli.common import _nothing_received

        no_data = _nothing_received("filterbank", capture_report, fmt.name, args.output,
                                    args.report)  # fmt: skip
        if no_data is not None:
            return no_data
    for line in report.summary_lines():
        print(line)
    if args.tsamp is not None and abs(report.tsamp_s - args.tsamp) > 0:
        print(f"filterbank: --tsamp {args.tsamp:g} s taken as {report.tsamp_s:.12g} s "
              f"({report.spectra_per_sample} fine samples)")  # fmt: skip
    out = {"filterbank": report.as_dict()}
    loss: Any = 0
    if capture_report is not None:
        from voltstream.cli.common import _print_report

        out["capture"] = capture_report.as_dict()
        loss = _print_report(capture_report, None, capture_report.engine)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(out, f, indent=2, default=str)
            f.write("\n")
    return loss
