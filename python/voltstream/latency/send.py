"""A test source for `voltstream latency`: paced frames of the built-in latency format
(docs/formats.md, "Latency frames"), each stamped with CLOCK_MONOTONIC just before its
first packet is sent, payload in the ordering pattern.

  python -m voltstream.latency.send --dest 127.0.0.1:7300 --frames 20000 --rate-hz 5000
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from voltstream import _core

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dest", required=True, help="HOST:PORT of `voltstream latency`")
    ap.add_argument("--frames", type=int, default=10000, help="frames to send")
    ap.add_argument("--packets-per-frame", type=int, default=8)
    ap.add_argument("--payload-len", type=int, default=1024, help="multiple of 8")
    ap.add_argument("--rate-hz", type=float, default=1000.0, help="frames per second")
    ap.add_argument("--first-frame", type=int, default=0)
    ap.add_argument(
        "--skip",
        default=None,
        help="N:K: leave packet K out of every N-th frame (incomplete frames, for tests)",
    )
    ap.add_argument("--cpu", type=int, default=None, help="pin the sender to this CPU")
    a = ap.parse_args(argv)
    skip = None
    if a.skip:
        n, k = (int(x) for x in a.skip.split(":"))
        skip = (n, k)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    sender = _core.FrameSender(a.dest, a.packets_per_frame, a.payload_len)
    stats = sender.send_frames(a.first_frame, a.frames, a.rate_hz, skip=skip)
    print(json.dumps(dict(stats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
