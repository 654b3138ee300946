"""The progress of the long verbs (fold of a file or a stream, replay, simulate to a
file): at a terminal, a bar on stderr (done, rate, time left) redrawn in place; when
stderr is not one (a pipe, a file, journald), a plain log line every
``PLAIN_EVERY_S`` seconds instead, so a log shows a long run advancing without
filling with bar frames. ``--no-progress`` (and ``--no-status``) turn both off."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

Update = Callable[[int], None]

#: Seconds between two plain progress lines (stderr not a terminal).
PLAIN_EVERY_S = 10.0

log = logging.getLogger("voltstream.progress")


def wanted(disabled: bool, stream: TextIO | None = None) -> bool:
    """A bar only at a terminal, and only if not turned off."""
    stream = stream if stream is not None else sys.stderr
    return not disabled and stream.isatty()


def plain_lines(description: str, total: int | None, unit: str,
                every_s: float | None = None) -> Update:  # fmt: skip
    """``update(done)`` that logs one plain line every ``every_s`` seconds (none for
    a run shorter than that): done so far (of the total, when known) and the rate."""
    every_s = PLAIN_EVERY_S if every_s is None else every_s
    t0 = last = time.monotonic()

    def update(done: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < every_s:
            return
        last = now
        rate = done / max(now - t0, 1e-9)
        of = f" of {total} ({100 * done / total:.0f} %)" if total else ""
        log.info("%s: %.0f s, %d%s %s, %.3g %s/s", description, now - t0, done, of, unit,
                 rate, unit)  # fmt: skip

    return update


@contextmanager
def progress_bar(
    description: str, total: int | None, unit: str, enabled: bool, plain: bool | None = None
) -> Iterator[Update]:
    """Yields ``update(done)`` (``done``: units so far, of ``total``); if ``enabled``,
    a bar on stderr while the block runs, or plain lines (:func:`plain_lines`) when
    stderr is not a terminal (``plain``: force either); else ``update`` does nothing."""
    if not enabled:
        yield lambda done: None
        return
    if (not sys.stderr.isatty()) if plain is None else plain:
        yield plain_lines(description, total, unit)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        _rate_column(unit),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(file=sys.stderr), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


def _rate_column(unit: str) -> Any:
    """A column of the rate in units per second, scaled (k, M, G)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            if not speed:
                return Text(f"? {unit}/s", style="progress.data.speed")
            scales = ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
            scale, prefix = next((s for s in scales if speed >= s[0]), scales[-1])
            return Text(f"{speed / scale:.1f} {prefix}{unit}/s", style="progress.data.speed")

    return Rate()
