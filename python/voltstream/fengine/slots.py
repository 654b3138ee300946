"""The GPU F-engine's host side: which heap slots the input completes, and how.

``SlotPlanner`` keeps the engine's time line (first sample still needed, end of the
input, next slot) and the lost samples as intervals per polarisation, and turns them
into many slots' spectrum windows and flags at once, from the ``FEnginePlan`` it is
given. It is pure NumPy, apart from the GPU engine, so that a CPU test
(``tests/test_fengine_plan.py``) holds it to the reference's per-slot planning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voltstream.dsp.delay import DelayModel
from voltstream.errors import ConfigError
from voltstream.fengine.plan import NPOL, FEnginePlan

__all__ = ["PlannedSlots", "SlotPlanner"]


@dataclass(frozen=True)
class PlannedSlots:
    """Slots the input completes: ``slots`` in order, and per polarisation and
    spectrum ``(2, nslots * nspec)`` window starts, residual delay, phase and flag."""

    slots: list[int]
    starts: np.ndarray
    residual_s: np.ndarray
    phase_rad: np.ndarray
    flagged: np.ndarray


class SlotPlanner:
    """The time line of one engine's input; see the module docstring."""

    def __init__(self, plan: FEnginePlan) -> None:
        self.plan = plan
        self.reset()

    def reset(self) -> None:
        """A new time line: the next block may have any time stamp."""
        self.fresh = True  # no block yet: the next one starts the time line
        self.start = 0  # first sample still kept (history the next slots need)
        self.end = 0  # time stamp after the last sample given
        self.slot = 0  # the next heap time slot to plan
        self.invalid = [np.zeros((0, 2), dtype=np.int64) for _ in range(NPOL)]

    def gap_before(self, timestamp: int) -> int:
        """Samples missing between the input so far and a block at ``timestamp`` (0 for
        the first block); a ConfigError if the block overlaps what was given."""
        if self.fresh:
            return 0
        if timestamp < self.end:
            raise ConfigError(
                f"block at timestamp {timestamp} overlaps data already given (up to {self.end}): "
                "feed blocks in time order without overlap"
            )
        return timestamp - self.end

    def add(self, timestamp: int, n: int, ok: np.ndarray | None, step: int = 1) -> None:
        """Takes a block of ``n`` samples at ``timestamp`` (checked by ``gap_before``);
        ``ok`` one flag per ``step`` samples per pol (None: all valid)."""
        self.gap_before(timestamp)
        if self.fresh:
            self.fresh = False
            self.start = self.end = timestamp
            self.slot = self.plan.first_slot(timestamp)
        self._add_invalid(self.end, timestamp, ok, step)
        self.end = timestamp + n

    def _add_invalid(self, end: int, timestamp: int, ok: np.ndarray | None, step: int) -> None:
        """Records the gap and the invalid runs of ``ok`` as sample intervals per pol."""
        for p in range(NPOL):
            runs = [] if end == timestamp else [(end, timestamp)]
            if ok is not None and not ok[p].all():
                edges = np.diff(np.concatenate([[0], (~ok[p]).astype(np.int8), [0]]))
                lo, hi = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
                lo, hi = lo * step + timestamp, hi * step + timestamp
                runs += list(zip(lo.tolist(), hi.tolist(), strict=True))
            if runs:
                self.invalid[p] = np.concatenate([self.invalid[p], np.array(runs, dtype=np.int64)])

    def plan_slots(self, delay_models: Sequence[DelayModel]) -> PlannedSlots | None:
        """Slots from ``slot`` on that the input completes, or None; moves ``slot`` on.

        The same windows and flags as ``FEngineReference._heap``, slot by slot, for
        many slots at once.
        """
        plan = self.plan
        sph, nspec = plan.layout.samples_per_heap, plan.layout.spectra_per_heap
        chunks = []
        first = self.slot
        while True:
            count = max(4, (self.end + plan.max_delay_samples - first * sph) // sph + 2)
            slots = np.arange(first, first + count, dtype=np.int64)
            win = plan.windows(slots, delay_models)
            complete = (
                win.starts.reshape(NPOL, count, nspec).max(axis=(0, 2)) + plan.window_len
            ) <= self.end
            ndone = count if complete.all() else int(np.argmin(complete))
            if ndone:
                keep = slice(0, ndone * nspec)
                chunks.append(
                    (
                        slots[:ndone],
                        win.starts[:, keep],
                        win.residual_s[:, keep],
                        win.phase_rad[:, keep],
                        win.out_of_range[:, keep],
                    )
                )
            if ndone < count:
                break
            first += count
        if not chunks:
            return None
        slots, starts, tau, phi, out_of_range = (
            np.concatenate(c, axis=-1) for c in zip(*chunks, strict=True)
        )
        flagged = out_of_range | (starts < self.start)
        for p in range(NPOL):
            flagged[p] |= self._touches_invalid(p, starts[p])
        self.slot = int(slots[-1]) + 1
        return PlannedSlots(slots.tolist(), starts, tau, phi, flagged)

    def _touches_invalid(self, pol: int, starts: np.ndarray) -> np.ndarray:
        iv = self.invalid[pol]
        if iv.shape[0] == 0:
            return np.zeros(starts.shape, dtype=bool)
        idx = np.searchsorted(iv[:, 1], starts, side="right")  # first run ending after start
        hit = idx < iv.shape[0]
        hit[hit] = iv[idx[hit], 0] < starts[hit] + self.plan.window_len
        return hit

    def trim(self) -> None:
        """Forgets history no later slot needs, as the reference does."""
        self.start = min(max(self.start, self.plan.keep_from(self.slot)), self.end)
        for p in range(NPOL):
            iv = self.invalid[p]
            self.invalid[p] = iv[iv[:, 1] > self.start]
