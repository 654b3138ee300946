"""The live search's candidates as voltage dumps (issue 28 item 3; docs/search.md,
"Triggered voltage dumps"): each candidate at or above the dump threshold becomes a
trigger of its burst, its DM and its arrival at the search's highest channel on the
stream's clock, handed to the same ``Dumps.trigger`` as an HTTP trigger.

A candidate is written once its burst's sweep has arrived, but its window runs a
margin past the sweep: asked at once, the part not yet in the ring would be refused
(409, "not yet"). So a trigger waits here until the ring holds its window's end (and
no more dumps wait for the disk than Dumps takes), then goes to Dumps, which copies
the window out. A thread of its own does that, polling the ring: neither the search
(its detection latency runs until a candidate line is written) nor the capture waits
on a dump. The wait is bounded: as long as the stream takes, at its own rate, to
bring the window's end, plus ``WAIT_S``; past that (the stream stalled), or when the
stream ends (``close``), what the ring holds of the window is dumped (``"partial"``),
counted as ``expired`` or ``at_end``. Nothing found is dropped uncounted.

Times: the caller gives each candidate's burst arrival on the reader's sample axis
(the samples the capture handed on, from the stream's first one: a filterbank
sample's input samples, ``FilterbankPlan.first_input`` + n x ``span``); the ring maps
that axis back to its own, across gaps and discontinuities (``stream_sample``), and
its clock makes it seconds since the stream's first sample, as a trigger's ``time``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from voltstream.record.dumps import Dumps, TriggerError

#: A candidate: anything with ``snr``, ``dm``, ``time_s`` and ``sample_index`` (the
#: search's ``Candidate``; record/ does not import search/).
Candidate = Any

__all__ = ["CandidateTriggers", "WAIT_S"]

log = logging.getLogger("voltstream.record.candidate_triggers")

#: Seconds a trigger waits for its window beyond the stream's own time to bring it.
WAIT_S = 2.0
#: How often the waiting triggers are looked at (seconds).
POLL_S = 0.01
#: At the end, the most seconds to wait for the disk before a last trigger is tried.
DRAIN_S = 60.0
#: An answer's status, as the candidate counts name it.
OUTCOMES = {202: "dumped", 410: "refused_gone", 409: "refused_not_yet", 400: "malformed",
            503: "busy"}  # fmt: skip


@dataclass
class _Waiting:
    """A candidate's trigger until it is handed to Dumps."""

    cand: Candidate
    position: float  # its burst's arrival at the top channel, on the reader's axis
    deadline: float | None = None  # set when it first has to wait
    partial: bool = False
    record: dict[str, Any] = field(default_factory=dict)


class CandidateTriggers:
    """``add(candidates)`` (from the search's thread, as they are written); each one with
    S/N >= ``threshold`` is dumped by ``dumps`` once its window has arrived (module
    docstring). ``position(candidate)``: its burst's arrival at ``freq_mhz`` (the
    search's highest channel frequency) on the reader's sample axis, in samples.
    ``close()`` at the stream's end, before ``dumps.close()``."""

    def __init__(
        self,
        dumps: Dumps,
        threshold: float,
        freq_mhz: float,
        position: Callable[[Candidate], float],
    ) -> None:
        self.dumps, self.threshold, self.freq, self.position = dumps, threshold, freq_mhz, position
        self.counts = dict.fromkeys(
            ("candidates", "below_threshold", "triggers", "waited", "expired", "at_end",
             *OUTCOMES.values(), "failed"), 0)  # fmt: skip
        self.triggered: list[dict[str, Any]] = []
        self._waiting: list[_Waiting] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dump-candidates", daemon=True)
        self._thread.start()

    def add(self, cands: list[Candidate]) -> None:
        """Candidates just written: those at or above the threshold wait for their window."""
        keep = [c for c in cands if c.snr >= self.threshold]
        with self._lock:
            self.counts["candidates"] += len(cands)
            self.counts["below_threshold"] += len(cands) - len(keep)
            self.counts["triggers"] += len(keep)
            self._waiting += [_Waiting(c, float(self.position(c))) for c in keep]

    def close(self) -> None:
        """The stream ended: every trigger still waiting is tried now (``at_end``: what
        the ring holds of its window), then the thread ends."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self._attempt(final=False)
        self._attempt(final=True)

    def _attempt(self, final: bool) -> None:
        with self._lock:
            todo = list(self._waiting)
        for w in todo:
            try:
                done = self._try(w, final)
            except Exception as exc:  # a bug must not end the search: counted, logged
                log.exception("candidate dump failed")
                self._finish(w, "failed", {"error": str(exc)})
                done = True
            if done:
                with self._lock:
                    self._waiting.remove(w)

    def _body(self, w: _Waiting) -> bytes | None:
        """The trigger: the burst's DM and its arrival at the top channel in seconds
        since the stream's first sample (None while the ring has no clock)."""
        ring = self.dumps.ring
        whole = math.floor(w.position)
        index = ring.stream_sample(whole)
        clock = ring.clock
        if index is None or clock is None:
            return None
        t = clock.seconds(index) + Fraction(w.position - whole) * clock.tsamp
        body = {"dm": w.cand.dm, "time": float(t), "freq": self.freq, "partial": w.partial}
        return json.dumps(body).encode()

    def _try(self, w: _Waiting, final: bool) -> bool:
        """Hands ``w`` to Dumps if its window is in the ring, or its wait is over; True
        when it was handed (or refused for good)."""
        raw = self._body(w)
        try:
            window = None if raw is None else self.dumps.window(raw)
        except TriggerError as exc:
            self._finish(w, "malformed", {"error": exc.reason})
            return True
        newest = self.dumps.newest()
        arrived = window is not None and newest is not None and window[1] <= newest
        if final:
            deadline = time.monotonic() + DRAIN_S
            while self.dumps.busy() and time.monotonic() < deadline:
                time.sleep(POLL_S)  # the writer drains: the last triggers wait for it
        elif not arrived or self.dumps.busy():
            now = time.monotonic()
            if w.deadline is None:
                behind = 0.0
                if window is not None and newest is not None:
                    behind = float(max(0, window[1] - newest) * self.dumps.ring.fmt.tsamp_exact)
                w.deadline = now + behind + WAIT_S
                self._count("waited")
            if now < w.deadline:
                return False
        if not arrived:
            w.partial = True
            self._count("at_end" if final else "expired")
            raw = self._body(w)
        status, answer = self.dumps.trigger(raw or b"{}")
        self._finish(w, OUTCOMES.get(status, "failed"), answer)
        return True

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _finish(self, w: _Waiting, outcome: str, answer: dict) -> None:
        c = w.cand
        self._count(outcome)
        rec = {"snr": c.snr, "dm": c.dm, "time_s": c.time_s, "sample_index": c.sample_index,
               "outcome": outcome, "dump": answer.get("id"), "path": answer.get("path"),
               "partial": w.partial, "error": answer.get("error")}  # fmt: skip
        with self._lock:
            self.triggered.append(rec)
        how = answer.get("path") or answer.get("error")
        log.info("candidate S/N %.1f DM %.2f at %.6f s: %s (%s)", c.snr, c.dm, c.time_s,
                 outcome, how)  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The report's ``dumps`` section's ``candidates``: the counts, each trigger."""
        with self._lock:
            return {"threshold": self.threshold, **self.counts, "waiting": len(self._waiting),
                    "list": list(self.triggered)}  # fmt: skip
