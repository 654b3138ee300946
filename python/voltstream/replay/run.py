"""The replay loop: a Source's batches, read ahead, sent by one ``_core.Sender`` on
one pacing schedule for the whole replay, and one report.

Pacing. The sender's clock starts once, before the first packet. At ``--rate R``
the batch whose first byte is byte B of the replay is due at ``B * 8 / R`` seconds
(``send(..., at=...)``), so gaps between calls (reading, Python) are caught up
within the next batch instead of adding up: the average rate over the whole replay
is R whenever the sender can reach it. With ``--realtime`` every packet is due at
its own time in the recording (``send(..., times=...)``), loop k shifted by k times
the recording's span. ``late_s`` in the report is how far any burst fell behind
its due time: well above a millisecond means the rate asked for is beyond the
sender (or the read-ahead) on this machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.replay.sources import Source, read_ahead


def replay(
    source: Source,
    dest: str,
    *,
    rate_gbps: float = 0.0,
    realtime: bool = False,
    loops: int = 1,
    bind: str | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
    live_report: Callable[[Callable[[], dict]], None] | None = None,
) -> dict[str, Any]:
    """Sends ``source`` to ``dest`` (HOST:PORT) ``loops`` times; returns the report:
    packets, bytes, seconds, rate_gbps, asked_gbps, pacing_error, late_s, loops,
    interrupted, and the source's own counters (gaps, fill frames, truncated
    records...). ``stop`` set (SIGINT/SIGTERM) ends the replay after the batch in
    hand; ``progress(bytes sent)`` is called after each batch. ``live_report`` (the
    metrics board's ``watch``) is given a callable that returns the counters so far,
    and one that returns the report at the end."""
    from voltstream import _core

    if loops < 1:
        raise ConfigError(f"--loop {loops}: replay at least once")
    if realtime and rate_gbps:
        raise ConfigError("give --rate or --realtime, not both")
    if not rate_gbps >= 0:
        raise ConfigError(f"--rate {rate_gbps}: use a rate in Gb/s >= 0 (0 = as fast as possible)")
    sender = _core.Sender(dest, bind)
    packets = nbytes = 0
    late_s, gso = 0.0, False
    offset = 0.0  # realtime: where this loop starts on the clock
    span = 0.0
    lengths: set[int] = set()
    t0 = time.monotonic()
    started = interrupted = False
    loops_done = 0
    if live_report is not None:
        live_report(lambda: {
            "dest": dest, "source": source.kind, "packets": packets, "bytes": nbytes,
            "loops_done": loops_done, "late_s": late_s, **source.counts,
        })  # fmt: skip
    for _ in range(loops):
        first_t: float | None = None
        last_t, prev_t, step = 0.0, 0.0, 0.0
        for batch in read_ahead(source.batches(realtime)):
            if stop is not None and stop.is_set():
                interrupted = True  # leaving read_ahead early stops its reader
                break
            pk = batch.packets
            n, plen = pk.shape
            if not started:  # the schedule starts with the first packet, not the first read
                sender.restart_clock()
                started = True
            if realtime:
                assert batch.times is not None
                first_t = float(batch.times[0]) if first_t is None else first_t
                r = sender.send(pk, plen, 0.0, times=batch.times + offset)
                prev_t, last_t = last_t, float(batch.times[-1])
                step = _step(batch.times, prev_t, n)
            elif rate_gbps:
                r = sender.send(pk, plen, rate_gbps, at=nbytes * 8 / (rate_gbps * 1e9))
            else:  # unpaced, on the same clock (seconds cover the whole replay)
                r = sender.send(pk, plen, 0.0, at=0.0)
            packets += int(r["packets"])
            nbytes += int(r["bytes"])
            late_s = max(late_s, float(r["late_s"]))
            gso = gso or bool(r["gso"])
            lengths.add(plen)
            if progress is not None:
                progress(nbytes)
        if interrupted:
            break
        if realtime and first_t is not None:
            # The next loop starts one packet interval after this one's last packet.
            span = last_t - first_t + step
            offset += span
        loops_done += 1
    seconds = sender.clock if packets else 0.0
    wall = time.monotonic() - t0
    achieved = nbytes * 8 / seconds / 1e9 if seconds > 0 else 0.0
    asked = rate_gbps if rate_gbps else None
    if realtime and offset > 0:
        asked = nbytes * 8 / offset / 1e9
    report = {
        "dest": dest,
        "source": source.kind,
        "packets": packets,
        "bytes": nbytes,
        "packet_len": sorted(lengths)[0] if len(lengths) == 1 else sorted(lengths),
        "seconds": seconds,
        "wall_s": wall,
        "rate_gbps": achieved,
        "asked_gbps": asked,
        "pacing_error": abs(achieved - asked) / asked if asked and achieved else None,
        "late_s": late_s,
        "gso": gso,
        "loops": loops,
        "realtime": realtime,
        "interrupted": interrupted,
        "loops_done": loops_done,
        **source.counts,
    }
    if live_report is not None:
        live_report(lambda: report)
    return report


def _step(times: np.ndarray, before: float, n: int) -> float:
    """The mean interval between a batch's distinct packet times (threads of one frame
    share a time), or the gap from the batch before when it has only one."""
    gaps = np.diff(times, prepend=before if n == 1 else times[0])
    gaps = gaps[gaps > 0]
    return float(gaps.mean()) if gaps.size else 0.0
