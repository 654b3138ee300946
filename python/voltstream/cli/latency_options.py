"""`voltstream latency`: its options (the verb itself is commands_latency.latency)."""

from __future__ import annotations

import argparse
from typing import Any

from voltstream.cli.options import (
    add_alias,
    add_options,
    add_verb,
    cpu_list,
    host_port,
    positive,
)

DESCRIPTION = """\
Low-latency acquisition (adaptive optics, triggers): small frames from the network into
the GPU within microseconds, every frame's latency measured. It needs an NVIDIA GPU
and CuPy; --standin runs the same loop with a host thread in the GPU's place.

A frame is --packets-per-frame packets of one stream. Packets carry the frame number
and their place in it: either one packet counter (the format's index: frame = index /
P, place = index % P) or, with --frame-field, a frame number field and the format's
index as the place (RTMS-like). A frame goes to the GPU the moment its last packet
arrives. A frame with packets missing when the window moves on (or its deadline,
--frame-timeout-us, passes) is counted incomplete and never handed over as whole: the
GPU is told to skip it. When the GPU has not finished with a slot the frame would
use, the frame is dropped whole (gpu_busy): the receive loop never waits for the GPU.

The receive loop is one Rust thread, pinned (--cpus), busy-polling recvmmsg without
ever sleeping. Hand-off modes (--mode), fastest found by measurement (docs/benchmarks.md,
"Low latency"):
  copy             per frame: async copy, kernel launch, synchronise (the baseline)
  persistent-flag  a persistent GPU kernel; per frame an async copy, then the ready
                   flag by cuStreamWriteValue64 (ordered after the copy)
  zerocopy         the persistent kernel reads the frame from GPU-mapped host memory
                   (the default: the lowest latency measured up to 8 KiB frames)
(A fourth, the frame and its flag in one async copy, is only in bench/latency.py:
the kernel saw flags before their frames had landed, docs/latency.md.)
The GPU work is the stand-in computation (sum and sum of squares of the payload bytes,
checked against the host for every frame). The report: counters and, per stage
(send_to_received when the format carries a send stamp, received_to_ack,
end_to_end), p50, p99, p99.9, max and peak to peak in microseconds.
"""

EPILOG = """\
examples:
  voltstream latency --listen 127.0.0.1:7300 --packets-per-frame 8 --frames 20000
  voltstream latency --listen 0.0.0.0:7300 --stream wfs.toml --packets-per-frame 16 \\
      --frame-field 8:4:be --mode zerocopy --cpus 3 --duration 60 --report lat.json
A test source: voltstream.latency.send_test_frames (python -m voltstream.latency.send).
"""


def listen_addr(text: str) -> str:
    """HOST:PORT; port 0 picks a free port (with --print-address)."""
    return host_port(text, free_port=True)


def field_spec(text: str) -> dict[str, Any]:
    """OFFSET:BYTES[:be|le] -> a layout field dict."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        off, nbytes = int(parts[0], 0), int(parts[1], 0)
        endian = {"be": "big", "le": "little"}[parts[2] if len(parts) == 3 else "be"]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give OFFSET:BYTES[:be|le], e.g. 8:4:be"
        ) from None
    return {"offset": off, "bytes": nbytes, "endian": endian}


def add_latency_parser(verbs: Any) -> None:
    p = add_verb(
        verbs,
        "latency",
        "low-latency mode: small frames to the GPU in microseconds, measured",
        DESCRIPTION,
        EPILOG,
    )
    add_options(p, (
        ("--listen", listen_addr, None,
         "receive on HOST:PORT (required; port 0 picks one, see --print-address)"),
        ("--stream", None, None,
         "the packet format as a stream description (TOML: any format voltstream "
         "captures, e.g. a declarative layout; docs/formats.md). Default: the built-in "
         "test frame (32-byte header with a send stamp, docs/formats.md 'Latency frames')"),
        ("--packets-per-frame", positive(int), 8, "packets per frame. Default: 8"),
        ("--payload-len", positive(int), 1024,
         "payload bytes per packet of the built-in test frame. Default: 1024"),
        ("--frame-field", field_spec, None,
         "where the frame number is (OFFSET:BYTES[:be|le] in the UDP payload); the "
         "format's index is then the packet's place in the frame"),
        ("--send-time", field_spec, None,
         "where the sender's CLOCK_MONOTONIC ns stamp is (OFFSET:BYTES[:be|le]); the "
         "built-in test frame has one"),
        ("--mode", None, "zerocopy", "hand-off to the GPU. Default: zerocopy",
         ("copy", "persistent-flag", "zerocopy")),
        ("--frames", positive(int), None, "stop after this many frames"),
        ("--duration", positive(float), None, "stop after this many seconds"),
        ("--frame-timeout-us", int, 1000,
         "close a frame as incomplete this long after its first packet (0: only when "
         "the window moves on). Default: 1000"),
        ("--window", positive(int), 2, "frames open at once (reordering). Default: 2"),
        ("--slots", positive(int), 16, "frames in flight to the GPU (power of 2). Default: 16"),
        ("--blocks", positive(int), None,
         "GPU blocks per frame. Default: one block up to 64 KiB frames (docs/latency.md)"),
        ("--block-threads", positive(int), None,
         "GPU threads per block (a multiple of 32). Default: a frame's 16-byte units / 4"),
        ("--warmup", int, 100, "frames left out of the statistics first. Default: 100"),
        ("--report", None, None, "write the report (counters, statistics) as JSON here"),
    ))  # fmt: skip
    cpus = p.add_argument("--cpus", type=cpu_list, default=None,
                          help="CPU to pin the receive loop to (one; it never sleeps)")  # fmt: skip
    add_alias(p, "--cpu", cpus)
    idle = p.add_argument("--idle-timeout", type=positive(float), default=None,
                          help="stop after this many seconds without a packet (once one "
                          "came)")  # fmt: skip
    add_alias(p, "--idle", idle)
    add_alias(p, "--threads", p._option_string_actions["--block-threads"])
    p.add_argument(
        "--print-address",
        action="store_true",
        help="print 'listening on HOST:PORT' once bound (for --listen HOST:0)",
    )
    p.add_argument(
        "--standin",
        action="store_true",
        help="no GPU: a host thread plays the kernel (tests, and machines without one)",
    )
