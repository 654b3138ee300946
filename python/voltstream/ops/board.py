"""`RunStatus`: what a running verb shows the outside: its name, start time and
configuration, and a callable that returns its report so far.

The verb's library function calls `watch(report_so_far)` once its capture is open
(the callable is then asked on every scrape, from the HTTP server's thread, so the
numbers are the report's own, never a copy that lags) and again as the run ends
with a callable that returns its final report, so whatever scrapes after the run
reads exactly the report it printed; `finish` freezes it when the verb returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

Report = dict[str, Any]


class RunStatus:
    """The board one verb's run writes and the metrics server reads."""

    def __init__(self, verb: str, config: dict[str, Any] | None = None) -> None:
        self.verb = verb
        self.config = dict(config or {})
        self.start_time = time.time()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._source: Callable[[], Report] | None = None
        self._final: Report | None = None
        self._seconds: float | None = None

    def watch(self, report_so_far: Callable[[], Report]) -> None:
        """The run is live: ``report_so_far()`` returns its report now."""
        with self._lock:
            self._source = report_so_far

    def finish(self) -> None:
        """The verb returned: its report is final (a run hands its final report to
        `watch` as it ends, so this is the dict ``--report`` wrote)."""
        report = self.report()
        with self._lock:
            self._final, self._source = report, None
            self._seconds = time.monotonic() - self._t0

    def report(self) -> Report:
        """The report now: the final one after `finish`, {} before `watch`."""
        with self._lock:
            final, source = self._final, self._source
        if final is not None:
            return final
        return source() if source is not None else {}

    def status(self) -> dict[str, Any]:
        """What /status.json serves: the run and its report now."""
        report = self.report()
        with self._lock:
            finished = self._final is not None
            seconds = self._seconds if finished else time.monotonic() - self._t0
        return {
            "verb": self.verb,
            "start_time": self.start_time,
            "seconds": seconds,
            "finished": finished,
            "config": self.config,
            "report": report,
        }
