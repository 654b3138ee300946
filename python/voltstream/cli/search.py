"""`voltstream search FILE.fil`: the single-pulse search of a SIGPROC filterbank (CPU,
the NumPy reference), gulp by gulp (pipeline/search.py, docs/search.md)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from voltstream.cli.options import add_options, finite, positive
from voltstream.errors import ConfigError
from voltstream.search.single_pulse import SearchSettings

DEFAULTS = SearchSettings()

DESCRIPTION = """\
Search a SIGPROC filterbank (.fil, 8- or 32-bit, one IF: what `voltstream filterbank`
writes) for dispersed single pulses (CPU, NumPy): each channel normalised by its
running median and MAD, brute-force incoherent dedispersion over DM trials spaced by
the smearing budget, boxcars of 1, 2, 4 .. --max-width samples, clusters of
detections (heimdall's friends of friends) written as heimdall-style candidate lines.
The file is read in gulps that overlap by the sweep across the band at --dm-max plus
the widest boxcar; each candidate is reported once.
"""

EPILOG = """\
candidate lines (tab-separated, no header, heimdall's columns):
  snr  sample_index  time_s  boxcar_filter  dm_index  dm  members  first_sample  last_sample
  (time_s: arrival at the highest channel frequency, from the file's first sample;
  the boxcar is 2**boxcar_filter samples)

examples:
  voltstream search obs.fil --dm-max 2000
  voltstream search obs.fil --dm-min 400 --dm-max 600 --threshold 7 --candidates frb.cand
"""


def add_search_parser(verbs: Any) -> None:
    p = verbs.add_parser(
        "search",
        help="single-pulse search of a SIGPROC filterbank: heimdall-style candidates",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="the filterbank (.fil, SIGPROC) to search")
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
        ("--window", positive(float), DEFAULTS.window_s,
         "seconds of each channel's running median and MAD (heimdall's "
         f"-baseline_length). Default: {DEFAULTS.window_s:g}"),
        ("--gulp", positive(float), None,
         "seconds of arrival times searched per gulp (each read with the overlap). "
         "Default: as much as keeps a gulp's working copy under 256 MB"),
        ("--candidates", None, None,
         "candidate file to write. Default: INPUT with its suffix replaced by .cand"),
        ("--report", None, None, "write the search's report (JSON) here"),
        ("--top", finite(int, 0), 5, "candidates printed in the summary. Default: 5"),
    ))  # fmt: skip
    p.add_argument("-o", dest="candidates", help=argparse.SUPPRESS)


def search(args: argparse.Namespace) -> int:
    from voltstream.cli.common import _progress
    from voltstream.io.sigproc import read_filterbank
    from voltstream.pipeline.search import search_file
    from voltstream.search.candidates import write_candidates
    from voltstream.service.outputs import check_outputs

    if args.dm_min > args.dm_max:
        raise ConfigError(f"--dm-min {args.dm_min:g} is above --dm-max {args.dm_max:g}")
    cand_path = args.candidates or str(Path(args.input).with_suffix(".cand"))
    if Path(cand_path).resolve() == Path(args.input).resolve():
        raise ConfigError(f"--candidates {cand_path} would overwrite the input")
    check_outputs([("--candidates", cand_path), ("--report", args.report)])
    fil = read_filterbank(args.input)
    boxcar = DEFAULTS.boxcar_max
    if args.max_width is not None:
        boxcar = 1 << max(0, int(math.floor(math.log2(max(1.0, args.max_width / fil.tsamp_s)))))
    settings = SearchSettings(
        dm_min=args.dm_min, dm_max=args.dm_max, dm_tol=args.dm_tol, threshold=args.threshold,
        boxcar_max=boxcar, window_s=args.window,
    )  # fmt: skip
    Path(cand_path).write_text("")  # candidates are appended as gulps finish them
    with _progress(args, "search", fil.nsamp, "samples") as update:
        report = search_file(
            fil, settings, args.gulp,
            on_candidates=lambda c: write_candidates(cand_path, c, append=True),
            progress=update,
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
