"""How long a recorded chunk may wait in memory, and so what a crash can lose.

The capture flushes a chunk open for the flush age (``chunks.flush_age_s``;
``--flush-age``), full or not, with every older one; the recorder's writers write
each chunk as soon as they get it and sync it. So kill -9 or a power cut loses at
most about the flush age of the stream, at any rate (issue 27 item 5): without it
a chunk waited until the reorder window moved on, 4 chunks of 256 packets, which at
a slow rate is seconds. A chunk's packets that come after it went out are late, so
the chunks of a stream whose rate is known are made short enough to fill within
half the flush age (the other half is for reordering and for the capture's clock,
read once per batch).
"""

from __future__ import annotations

import logging
from typing import Any

from voltstream.capture.config import CaptureFormat, CaptureSettings

log = logging.getLogger("voltstream.record.flush")

#: Seconds a chunk may stay in the capture before it goes to a writer, unless the
#: settings say (``--flush-age``).
FLUSH_AGE_S = 0.5


def packets_per_second(stream: CaptureFormat) -> float | None:
    """Packets a second of each stream, where the format says (VDIF: a thread's frames
    a second); None where it does not."""
    fps = stream.capture_kwargs().get("frames_per_second")
    if fps:
        return float(fps)
    rate: Any = getattr(stream, "packets_per_second", None)
    return float(rate) if rate else None


def flush_settings(settings: CaptureSettings, stream: CaptureFormat) -> CaptureSettings:
    """`settings` with a flush age (FLUSH_AGE_S unless they have one) and, where the
    stream's rate is known, chunks that fill within half of it."""
    age = settings.chunks.flush_age_s or FLUSH_AGE_S
    settings = settings.replace(flush_age=age)
    rate, ppc = packets_per_second(stream), settings.chunks.packets_per_chunk
    if rate is None or ppc <= rate * age / 2:
        return settings
    fit = max(1, int(rate * age / 2))
    log.info(
        "record: a chunk of %d packets is %.3g s of this stream, more than half the flush "
        "age (%g s): chunks of %d packets instead, so that each fills before it is written",
        ppc, ppc / rate, age, fit,
    )  # fmt: skip
    return settings.replace(packets_per_chunk=fit)
