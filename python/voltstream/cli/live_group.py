"""The options a file verb takes to run on a live stream instead (`filterbank
--listen`, `search --listen`): one group, so the two verbs size and steer their
capture with the same words as `fold --listen` (the capture threads, the chunk pool,
the kernel's ring, the engine) and make their filterbank with the same
`--fine-channels` and `--tsamp`."""

from __future__ import annotations

import argparse
from typing import Any

from voltstream.cli.options import (
    add_capture_threads,
    add_chunk_pool,
    add_engine,
    add_no_status,
    add_options,
    add_ring_mb,
    add_run,
    finite,
    listen_option,
    positive,
)

__all__ = ["add_live_stream", "filterbank_shape", "power_of_two"]


def power_of_two(text: str) -> int:
    """--fine-channels: a power of two (1 .. 65536)."""
    value = finite(int, 1, 1 << 16)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two (1, 2, 4 .. 65536), got {text}")
    return value


def filterbank_shape(g: Any, what: str) -> None:
    """--fine-channels and --tsamp: how ``what`` channelises and integrates."""
    add_options(g, (
        ("--fine-channels", power_of_two, 1,
         f"{what}fine channels per coarse channel, a power of two: M-point FFTs. Default: 1"),
        ("--tsamp", positive(float), None,
         f"{what}output sampling time in seconds: a whole number of fine samples (fine "
         "channels x the input's sample time). Default: one fine sample"),
    ))  # fmt: skip


def add_live_stream(p: argparse.ArgumentParser, what: str, report: str,
                    duration: float | None = None) -> Any:  # fmt: skip
    """The group "a live stream (instead of INPUT)": --listen, --real, the run's
    duration and report, the capture's threads, pool, kernel ring, engine and status
    line. ``what`` says what runs in the one process; returns the group, for the
    verb's own live options."""
    live = p.add_argument_group(
        "a live stream (instead of INPUT)",
        f"{what} in one process; the stream format options below apply",
    )
    live.add_argument("--listen", type=listen_option, default=None,
                      help="capture UDP on HOST:PORT (a band in several streams: "
                      "HOST:PORT,HOST:PORT2,... or HOST:PORT+N)")  # fmt: skip
    live.add_argument("--real", action="store_true",
                      help="VDIF of real-sampled channels, converted to complex first")  # fmt: skip
    add_run(live, what="capture", duration=duration, report=report)
    add_capture_threads(live, "capture threads (packet_ring engine), steered in the kernel by "
                        "stream id or by chunk (--spread). Default: 1")  # fmt: skip
    add_chunk_pool(live)
    add_ring_mb(live)
    add_no_status(live)
    add_engine(live)
    return live
