"""The progress bar of the offline verbs (fold of a file, replay, simulate to a
file): done, rate and time left, on stderr, redrawn in place. Only for a person at
a terminal: off when stderr is not one (a pipe, a file, journald) and with
``--no-progress``, so logs never fill with bar frames."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

Update = Callable[[int], None]


def wanted(disabled: bool, stream: TextIO | None = None) -> bool:
    """A bar only at a terminal, and only if not turned off."""
    stream = stream if stream is not None else sys.stderr
    return not disabled and stream.isatty()


@contextmanager
def progress_bar(description: str, total: int | None, unit: str, enabled: bool) -> Iterator[Update]:
    """Yields ``update(done)`` (``done``: units so far, of ``total``); a bar on stderr
    while the block runs if ``enabled``, else ``update`` does nothing."""
    if not enabled:
        yield lambda done: None
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
