"""The exit status of a run, alike for every verb (cli.main applies it):

- 0: the run did what it was asked; a stop on the first SIGINT/SIGTERM is such an
  end (the data up to the stop is complete and accounted for);
- 1: data loss above ``--max-loss FRACTION`` (only when it is given: by default a
  lossy run still exits 0, its losses in the report);
- 2: bad input or configuration (a ConfigError and the other VoltstreamErrors);
- 3: a receiving run (capture, fold --listen) that got none of its stream: nothing
  arrived, or only packets that were not its format (malformed, foreign). One line
  says which and what to check (service/outcomes.py); no output file is left as
  if it were a recording. A run stopped by a signal before any data came exits 0
  with the line as a warning;
- 128 + N: ended by signal N without a clean stop (a second signal, or a verb
  that cannot stop cleanly): 130 for SIGINT, 143 for SIGTERM.

The loss of a run is counted on packets: lost = missing + late + dropped + the
kernel's drops (the capture report's ``lost``); expected = received + missing (every
slot of the packet timeline). A recording also loses whole chunks no disk took:
its fraction is the larger of the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OK = 0
LOSS = 1
BAD_INPUT = 2
NO_DATA = 3

log = logging.getLogger("voltstream.service")


@dataclass(frozen=True)
class Loss:
    """What a run lost of what it should have received (packets, or chunks)."""

    lost: int
    expected: int

    @property
    def fraction(self) -> float:
        if self.expected <= 0:
            return 0.0
        return min(1.0, self.lost / self.expected)


def capture_loss(stats: Mapping[str, Any]) -> Loss:
    """The loss in a capture engine's counters (``_core.Capture.stats()``)."""
    lost = received = missing = 0
    for s in stats.get("streams", []):
        missing += int(s.get("missing", 0))
        received += int(s.get("received", 0))
        lost += int(s.get("missing", 0)) + int(s.get("late", 0)) + int(s.get("dropped", 0))
    lost += int(stats.get("kernel_drops", 0) or 0)
    return Loss(lost, max(received + missing, lost))


def record_loss(report: Mapping[str, Any]) -> Loss:
    """A recording's loss: packets the capture lost, or chunks the disks did not take,
    whichever is the larger part."""
    packets = capture_loss(report.get("capture", {}))
    rec = report.get("record", {})
    unwritten = int(rec.get("chunks_unwritten", 0)) + int(rec.get("chunks_lost", 0))
    chunks = Loss(unwritten, int(rec.get("chunks_written", 0)) + unwritten)
    return max(packets, chunks, key=lambda loss: loss.fraction)


def exit_status(result: int | Loss, max_loss: float | None, verb: str) -> int:
    """A verb's result as the process's exit status: an int is already one; a run's
    Loss is 0, or 1 when ``max_loss`` is given and the lost fraction exceeds it."""
    if isinstance(result, int):
        return result
    if max_loss is None or result.fraction <= max_loss:
        return OK
    log.error(
        "voltstream %s: lost %.4g %% of the data (%d of %d), above --max-loss %.4g %%",
        verb,
        100 * result.fraction,
        result.lost,
        result.expected,
        100 * max_loss,
    )
    return LOSS
