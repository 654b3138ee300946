"""Whether a sender kept the rate it was asked for, and a warning when it did not.

A simulator on a small machine (two cores synthesising a dispersed pulsar) can fall
far below its --rate while every packet still goes out: the receiver then sees a
slower stream than the user asked for, and nothing said so. The rate is measured
as a receiver sees it, bytes over wall time from the first send, synthesis
included.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("voltstream.simulate")

#: Below this fraction of the asked rate at the end, the run says so.
END_BELOW = 0.8
#: Below this fraction while running (after LIVE_AFTER_S), it says so once, live.
LIVE_BELOW = 0.5
LIVE_AFTER_S = 2.0


class RateWatch:
    """Call ``begin()`` before the first send, ``update(total bytes)`` after each,
    ``finish(total bytes)`` at the end; ``asked_gbps`` 0 or None (unpaced): silent."""

    def __init__(self, asked_gbps: float | None, what: str = "simulate") -> None:
        self.asked = float(asked_gbps or 0.0)
        self.what = what
        self.t0: float | None = None
        self.warned_live = False

    def begin(self) -> None:
        if self.t0 is None:
            self.t0 = time.monotonic()

    def achieved(self, nbytes: int) -> tuple[float, float]:
        """(Gb/s since the first send, seconds since it)."""
        if self.t0 is None:
            return 0.0, 0.0
        seconds = time.monotonic() - self.t0
        return (nbytes * 8 / seconds / 1e9 if seconds > 0 else 0.0), seconds

    def update(self, nbytes: int) -> None:
        if self.asked <= 0 or self.warned_live:
            return
        gbps, seconds = self.achieved(nbytes)
        if seconds >= LIVE_AFTER_S and gbps < LIVE_BELOW * self.asked:
            self.warned_live = True
            log.warning("%s: sending at %.3f Gb/s so far, far below the asked %g Gb/s: "
                        "%s", self.what, gbps, self.asked, _WHY)  # fmt: skip

    def finish(self, nbytes: int) -> str | None:
        """The warning (also logged) when the whole run fell below the asked rate."""
        if self.asked <= 0 or not nbytes:
            return None
        gbps, seconds = self.achieved(nbytes)
        if gbps >= END_BELOW * self.asked:
            return None
        text = (f"{self.what}: sent at {gbps:.3f} Gb/s over {seconds:.2f} s, "
                f"{gbps / self.asked:.0%} of the asked {self.asked:g} Gb/s: {_WHY}")  # fmt: skip
        log.warning("%s", text)
        return text


_WHY = (
    "this machine cannot make and send the stream that fast (a receiver sees the slower "
    "stream); ask a lower --rate, or write a file (--output) and `voltstream replay` it"
)
