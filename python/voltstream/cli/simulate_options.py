"""`voltstream simulate`'s options for the streams beyond complex VDIF and YNAO frames
(real-sampled VDIF, CODIF, layout and counter packets; streams/packets.py makes them)."""

from __future__ import annotations

import argparse

from voltstream.cli.options import positive


def add_simulate_stream_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "other streams",
        "Real-sampled VDIF (--real), and the formats a stream description gives "
        "(--stream FILE.toml, as `capture --stream` takes it): CODIF frames carry the "
        "samples of the format options (--nchan, --chan-bw, --bits: one thread per "
        "polarisation); layout and counter packets carry a packet counter and noise bytes "
        "(docs/examples/codif.toml, docs/examples/wfs.toml).",
    )
    g.add_argument(
        "--real",
        action="store_true",
        help="VDIF of real-sampled channels, as a DBBC3 or R2DBE sends them (with --bits 2): "
        "each channel real at twice its bandwidth; `fold` converts them back",
    )
    g.add_argument(
        "--stream",
        metavar="FILE.toml",
        help="the stream to make, as a stream description (codif, layout, counter)",
    )
    g.add_argument(
        "--packets",
        type=positive(int),
        help="packets per stream of layout and counter streams (they have no sample "
        "clock). Default: --duration seconds at --rate",
    )
