"""SIGINT and SIGTERM end a run the same way: the first asks the run to stop, the
second ends the process at once.

A run loop that can stop cleanly (capture, record, fold --listen, fengine, replay,
simulate) polls ``Shutdown.event``: set, it finishes the chunk in hand, closes its
files and returns its report as if its duration had ended. The loops poll at least
every 0.2 s, so a stop starts within that; finishing (the last chunk, the archive,
the report) is what takes the rest of ``STOP_BOUND_S``. A verb that polls nothing
(an offline fold, inspect, demo) gets a KeyboardInterrupt instead, as Ctrl-C always
gave it, and cli.main ends it with 128 + the signal number.

A second signal means the operator (or systemd, after TimeoutStopSec) will not
wait: the process ends with ``os._exit(128 + signal)`` (130 for SIGINT, 143 for
SIGTERM, the shell's convention), without unwinding, because unwinding is what is
already taking too long.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

#: What docs/operations.md promises: from the first signal to the exit, at most this.
STOP_BOUND_S = 5.0

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

log = logging.getLogger("voltstream.service")


class Shutdown:
    """The process's one stop request. ``install()`` takes SIGINT and SIGTERM (main
    thread only: Python runs handlers there); ``event`` is what run loops poll,
    ``watch()`` says that the running verb polls it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.watched = False
        self._previous: dict[int, Any] = {}

    def watch(self) -> threading.Event:
        """The event a run loop polls; from now on a first signal sets it instead of
        raising KeyboardInterrupt."""
        self.watched = True
        return self.event

    @property
    def signal_name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # a library caller's thread: its own signal handling stays
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.event.is_set():
            # Written with os.write: the logging lock may be held by the code this
            # handler interrupted, and nothing may stand between us and the exit.
            os.write(2, f"voltstream: second signal ({name}): exiting now\n".encode())
            os._exit(128 + signum)
        self.signum = signum
        self.event.set()
        if not self.watched:
            raise KeyboardInterrupt
        log.warning(
            "voltstream: %s: stopping: finishing the current chunk, closing files, writing "
            "the report (at most %.0f s; a second signal exits at once)",
            name,
            STOP_BOUND_S,
        )
