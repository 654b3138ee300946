"""One archive row per sub-integration from N nodes' subbands (issue 16, groundwork).

Each node folds its own subband and sends sub-integration k, the packets whose time
stamps fall in ``[t0 + k S, t0 + (k + 1) S)``: the same k means the same samples on
every node, whatever the wall clocks say. `RowMerger` joins them into rows of the
whole band, channels in frequency order (never arrival order), rows strictly in k
order, and decides when a row is final (docs/research/dask-scale-out.md, section 7):

- **complete**: every node not known to be absent has sent row k (a node is absent
  from the first final row it missed, or once the driver says it is `gone`, until it
  sends a row or says `hello`; a node that said `bye` after row L is not waited for
  after L);
- **lag**: some node has sent row ``k + lag`` (default 2): the data says row k's
  stragglers are gone, with no wall clock (replays at any speed work);
- **deadline**: ``deadline_s`` after row k's first part arrived (a backstop for when
  every node stops; `tick`).

A node missing from a final row has no samples in it (hits and samples offered zero, so
weight 0 on its channels, DAT_WTS),
is named in the row and counted, and is not waited for again until it sends a row or
says `hello` (a restarted node rejoins at a sub-integration boundary). Rows for a k
already written are counted late and dropped; a second copy of a node's row (a
restarted task resends) is counted duplicate and ignored; a row of the wrong shape or
from an unknown node is counted and dropped. Nothing here raises on a node's input.

No Dask and no files here: the Dask actor that receives the rows and writes the
archive is cluster/merger.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from voltstream.errors import ConfigError


@dataclass(frozen=True)
class Subband:
    """One node's channels: ``nchan`` channels from ``freq_mhz`` (centre of its
    first channel) in steps of ``chan_bw_mhz`` (negative: a lower sideband)."""

    node: str
    freq_mhz: float
    chan_bw_mhz: float
    nchan: int

    def freqs(self) -> np.ndarray:
        return self.freq_mhz + self.chan_bw_mhz * np.arange(self.nchan)


@dataclass
class NodeRow:
    """Sub-integration ``k`` of one node as its folder added it up (fold/reference.py
    `Folder.take_rows`), the node's own channel order: ``sums`` (npol, nchan, nbin),
    ``hits`` (nchan, nbin) and ``offered`` (nchan,). Sums, not profiles: the weights
    and the sub-integration's length depend on every node's channels
    (`fold_products`), so they are made once the row is whole."""

    node: str
    k: int
    sums: np.ndarray
    hits: np.ndarray
    offered: np.ndarray


@dataclass
class MergedRow:
    """Row ``k`` of the whole band, channels in ascending frequency (``freqs``): the
    nodes' sums, hits and samples offered side by side, zero on a missing node's."""

    k: int
    sums: np.ndarray  # (npol, nchan, nbin)
    hits: np.ndarray  # (nchan, nbin)
    offered: np.ndarray  # (nchan,)
    freqs: np.ndarray
    missing: tuple[str, ...]
    reason: str  # complete | lag | deadline | finish


@dataclass
class MergeCounters:
    rows_written: int = 0
    rows_complete: int = 0
    late: int = 0  # node rows for a row already written
    duplicate: int = 0
    malformed: int = 0  # wrong shape, non-finite k, or an unknown node
    missing_by_node: dict[str, int] = field(default_factory=dict)


class RowMerger:
    """Joins node rows into whole-band rows; see the module docstring."""

    def __init__(
        self,
        subbands: Sequence[Subband],
        npol: int,
        nbin: int,
        lag: int = 2,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [s.node for s in subbands]
        if not subbands or len(set(names)) != len(names):
            raise ConfigError("give every node's subband once (node names must differ)")
        if lag < 1:
            raise ConfigError(f"lag must be at least 1 row, got {lag}")
        self.subbands = {s.node: s for s in subbands}
        self.npol, self.nbin, self.lag = npol, nbin, lag
        self.deadline_s, self.clock = deadline_s, clock
        freqs = np.concatenate([s.freqs() for s in subbands])
        order = np.argsort(freqs, kind="stable")
        if np.any(np.diff(freqs[order]) == 0):
            raise ConfigError("two nodes' channels share a frequency; check the subbands")
        self.freqs = freqs[order]
        # Where each node's channel j goes in the whole band.
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        self._index: dict[str, np.ndarray] = {}
        start = 0
        for s in subbands:
            self._index[s.node] = place[start : start + s.nchan]
            start += s.nchan
        self.nchan = int(freqs.size)
        self.next_k = 0
        self._pending: dict[int, dict[str, NodeRow]] = {}
        self._first_arrival: dict[int, float] = {}
        self._newest: dict[str, int] = {}  # the highest k each node has sent
        self._absent: set[str] = set()
        self._resume: dict[str, int] = {}  # a rejoined node's first row
        self._ended: dict[str, int] = {}  # a node's last row, once it said bye
        self.counters = MergeCounters(missing_by_node={n: 0 for n in names})

    def add(self, row: NodeRow) -> list[MergedRow]:
        """Takes one node row; returns the rows that became final, in k order."""
        sub = self.subbands.get(row.node)
        shape = (self.npol, sub.nchan, self.nbin) if sub else None
        ok = (
            sub is not None
            and isinstance(row.k, (int, np.integer))
            and row.k >= 0
            and np.shape(row.sums) == shape
            and np.shape(row.hits) == (sub.nchan, self.nbin)
            and np.shape(row.offered) == (sub.nchan,)
        )
        if not ok:
            self.counters.malformed += 1
            return []
        k = int(row.k)
        if k < self.next_k:
            self.counters.late += 1
            return []
        parts = self._pending.setdefault(k, {})
        if row.node in parts:
            self.counters.duplicate += 1
            return []
        parts[row.node] = row
        self._first_arrival.setdefault(k, self.clock())
        self._newest[row.node] = max(k, self._newest.get(row.node, -1))
        self._absent.discard(row.node)
        return self._ready(self.clock())

    def hello(self, node: str, k: int) -> None:
        """A (re)started node will send rows from ``k`` on: wait for it from there."""
        if node in self.subbands:
            self._absent.discard(node)
            self._ended.pop(node, None)
            self._resume[node] = k

    def gone(self, node: str) -> list[MergedRow]:
        """The node's worker left the cluster (the scheduler saw it die): not waited
        for until it says `hello` again. Returns the rows that became final."""
        if node in self.subbands:
            self._absent.add(node)
            self._resume.pop(node, None)
        return self._ready(self.clock())

    def bye(self, node: str, last_k: int) -> list[MergedRow]:
        """The node ended its part after row ``last_k`` (its stream stopped): rows
        after it do not wait for it. Returns the rows that became final."""
        if node in self.subbands:
            self._ended[node] = last_k
        return self._ready(self.clock())

    def tick(self) -> list[MergedRow]:
        """Rows whose deadline passed (call it now and then when nothing arrives)."""
        return self._ready(self.clock())

    def finish(self) -> list[MergedRow]:
        """Every row still pending, missing parts at weight 0 (the observation ended)."""
        out = []
        last = max(self._pending, default=self.next_k - 1)
        while self.next_k <= last:
            out.append(self._write(self.next_k, "finish"))
        return out

    def _ready(self, now: float) -> list[MergedRow]:
        out = []
        while True:
            k = self.next_k
            parts = self._pending.get(k, {})
            expected = {
                n
                for n in self.subbands
                if n not in self._absent
                and self._resume.get(n, 0) <= k
                and self._ended.get(n, k) >= k
            }
            if expected <= set(parts) and (parts or k <= max(self._ended.values(), default=-1)):
                out.append(self._write(k, "complete"))
            elif max(self._newest.values(), default=-1) >= k + self.lag:
                out.append(self._write(k, "lag"))
            elif (
                self.deadline_s is not None
                and k in self._first_arrival
                and now - self._first_arrival[k] >= self.deadline_s
            ):
                out.append(self._write(k, "deadline"))
            else:
                return out

    def _write(self, k: int, reason: str) -> MergedRow:
        parts = self._pending.pop(k, {})
        self._first_arrival.pop(k, None)
        sums = np.zeros((self.npol, self.nchan, self.nbin), dtype=np.float64)
        hits = np.zeros((self.nchan, self.nbin), dtype=np.int64)
        offered = np.zeros(self.nchan, dtype=np.int64)
        for node, row in parts.items():
            idx = self._index[node]
            sums[:, idx, :] = row.sums
            hits[idx] = row.hits
            offered[idx] = row.offered
        # A node past its bye had no samples there (its channels' dispersion delay
        # ends them earlier): not missing, its channels simply empty.
        missing = tuple(n for n in self.subbands if n not in parts and self._ended.get(n, k) >= k)
        for n in missing:
            self.counters.missing_by_node[n] += 1
            if self._resume.get(n, 0) <= k:  # not a rejoining node's early row
                self._absent.add(n)
        self.counters.rows_written += 1
        self.counters.rows_complete += not missing
        self.next_k = k + 1
        return MergedRow(k, sums, hits, offered, self.freqs, missing, reason)
