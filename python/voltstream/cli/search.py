"""`voltstream search FILE.fil`: the single-pulse search of a SIGPROC filterbank, gulp
by gulp (pipeline/search.py), on the CPU (the NumPy reference) or the GPU
(search/gpu_single_pulse.py); `voltstream search --listen HOST:PORT`: capture,
filterbank and search of a live stream in one process, candidates written as found
(pipeline/live_search.py). docs/search.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from voltstream.cli.dump import DUMP_FLAGS, add_dump_options
from voltstream.cli.live_group import add_live_stream, filterbank_shape
from voltstream.cli.options import (
    add_device,
    add_format_options,
    add_options,
    add_verb,
    finite,
    positive,
)
from voltstream.cli.search_options import DEFAULTS, LIVE_GULP_S, search_device, settings_from
from voltstream.errors import ConfigError

DESCRIPTION = """\
Search a SIGPROC filterbank (.fil, 8- or 32-bit, one IF: what `voltstream filterbank`
writes), or a live stream (--listen), for dispersed single pulses, on the GPU or the
CPU (--device): each channel normalised by its running median and MAD, brute-force
incoherent dedispersion over DM trials spaced by the smearing budget, boxcars of 1,
2, 4 .. --max-width samples, clusters of detections (heimdall's friends of friends)
written as heimdall-style candidate lines. The data is searched in gulps that overlap
by the sweep across the band at --dm-max plus the widest boxcar; each candidate is
reported once. Live, the stream is captured and made into a filterbank (--fine-channels,
--tsamp, as `voltstream filterbank`) in the same process, each gulp searched as soon
as its last sample has arrived, each candidate line appended and flushed as it is
found, with its detection latency in the report. With --ring-seconds the last seconds
of voltages are kept and each candidate above --dump-threshold is dumped as DADA.
"""

EPILOG = """\
candidate lines (tab-separated, no header, heimdall's columns):
  snr  sample_index  time_s  boxcar_filter  dm_index  dm  members  first_sample  last_sample
  (time_s: arrival at the highest channel frequency, from the file's first sample;
  the boxcar is 2**boxcar_filter samples)

examples:
  voltstream search obs.fil --dm-max 2000
  voltstream search obs.fil --dm-min 400 --dm-max 600 --threshold 7 --candidates frb.cand
  voltstream search --listen 0.0.0.0:7000 --format ynao --fine-channels 128 --tsamp 64e-6 \
      --dm-max 2000 --device gpu --candidates live.cand --metrics 0.0.0.0:9100
  voltstream search --listen 0.0.0.0:7000 --format ynao --fine-channels 128 --tsamp 64e-6 \
      --dm-max 2000 --ring-seconds 10 --dump-dir /data/dumps --dump-threshold 10
      (each candidate with S/N >= 10 writes its burst's voltages as DADA: its sweep
      across the band and --dump-margin either side)
"""


def add_search_parser(verbs: Any) -> None:
    p = add_verb(
        verbs,
        "search",
        "single-pulse search of a SIGPROC filterbank: heimdall-style candidates",
        DESCRIPTION,
        EPILOG,
    )
    p.add_argument("input", nargs="?",
                   help="the filterbank (.fil, SIGPROC) to search (not with --listen)")  # fmt: skip
    add_options(p, (
        ("--dm-min", finite(float, 0), DEFAULTS.dm_min,
         f"lowest DM trial, pc cm^-3. Default: {DEFAULTS.dm_min:g}"),
        ("--dm-max", finite(float, 0), DEFAULTS.dm_max,
         f"highest DM searched, pc cm^-3 (the last trial reaches it). "
         f"Default: {DEFAULTS.dm_max:g}"),
        ("--dm-tol", finite(float, 1, above=True), DEFAULTS.dm_tol,
         "width growth allowed half-way between DM trials (heimdall's). "
         f"Default: {DEFAULTS.dm_tol:g}"),
        ("--threshold", positive(float), DEFAULTS.threshold,
         f"S/N a detection must exceed, sigma. Default: {DEFAULTS.threshold:g}"),
        ("--max-width", positive(float), None,
         "widest boxcar, seconds (boxcars are 1, 2, 4 .. samples up to it). "
         f"Default: {DEFAULTS.boxcar_max} samples"),
        ("--baseline", positive(float), DEFAULTS.window_s,
         "seconds of each channel's running median and MAD (heimdall's "
         f"-baseline_length). Default: {DEFAULTS.window_s:g}"),
        ("--gulp", positive(float), None,
         "seconds of arrival times searched per gulp (each read with the overlap). "
         "Default: a file: as much as keeps a gulp's working copy under 256 MB; live: "
         f"{LIVE_GULP_S:g} s (a burst is found at most a gulp + the sweep after it came)"),
        ("--candidates", None, None,
         "candidate file to write. Default: INPUT with its suffix replaced by .cand "
         "(live: search.cand)"),
        ("--top", finite(int, 0), 5, "candidates printed in the summary. Default: 5"),
    ))  # fmt: skip
    p.add_argument("-o", dest="candidates", help=argparse.SUPPRESS)
    add_device(p, "where the search runs")
    live = add_live_stream(
        p, "capture, filterbank and search", report="write the search's report (JSON) "
        "here: live, with the capture's and each candidate's detection latency",
    )  # fmt: skip
    filterbank_shape(live, "the filterbank: ")
    live.add_argument("--filterbank", default=None,
                      help="also write the filterbank searched, 8-bit (.fil SIGPROC, .fits "
                      "PSRFITS)")  # fmt: skip
    add_dump_options(p, candidates=True)
    add_format_options(p)


def search(args: argparse.Namespace) -> Any:
    from voltstream.service.outputs import check_outputs

    if args.dm_min > args.dm_max:
        raise ConfigError(f"--dm-min {args.dm_min:g} is above --dm-max {args.dm_max:g}")
    if (args.input is None) == (args.listen is None):
        raise ConfigError("give either an INPUT .fil or --listen HOST:PORT, not both or neither")
    default = "search.cand" if args.input is None else str(Path(args.input).with_suffix(".cand"))
    cand_path = args.candidates or default
    if args.input is not None and Path(cand_path).resolve() == Path(args.input).resolve():
        raise ConfigError(f"--candidates {cand_path} would overwrite the input")
    check_outputs([("--candidates", cand_path), ("--report", args.report),
                   ("--filterbank", args.filterbank)])  # fmt: skip
    if args.listen is not None:
        from voltstream.cli.search_live import search_live

        return search_live(args, cand_path)
    if dumped := [f for f in ("--ring-seconds", *DUMP_FLAGS)
                  if getattr(args, f[2:].replace("-", "_"), None) is not None]:  # fmt: skip
        raise ConfigError(f"{dumped[0]} dumps the voltages of a live stream (--listen); a "
                          ".fil holds none")  # fmt: skip
    if args.filterbank is not None or args.fine_channels != 1 or args.tsamp is not None:
        raise ConfigError("--filterbank, --fine-channels and --tsamp make the filterbank of a "
                          "live stream (--listen); a .fil is searched as it is")  # fmt: skip
    return search_file_cli(args, cand_path)


def search_file_cli(args: argparse.Namespace, cand_path: str) -> int:
    from voltstream.cli.common import _progress
    from voltstream.io.sigproc import read_filterbank
    from voltstream.pipeline.search import search_file
    from voltstream.search.candidates import write_candidates

    fil = read_filterbank(args.input)
    settings = settings_from(args, fil.tsamp_s)
    device = search_device(args)
    Path(cand_path).write_text("")  # candidates are appended as gulps finish them
    with _progress(args, "search", fil.nsamp, "samples") as update:
        report = search_file(
            fil, settings, args.gulp,
            on_candidates=lambda c: write_candidates(cand_path, c, append=True),
            progress=update, device=device,
        )  # fmt: skip
    for line in report.summary_lines(args.top):
        print(line)
    print(f"search: {len(report.candidates)} candidate(s) -> {cand_path}")
    if args.report:
        out = {"search": report.as_dict(), "candidates_file": cand_path}
        with open(args.report, "w") as f:
            json.dump(out, f, indent=2, default=str)
            f.write("\n")
    return 0
