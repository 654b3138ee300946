"""The merger of a cluster observation: a Dask actor that takes every node's rows,
joins them (merge.py `RowMerger`) and writes one PSRFITS archive, whole on disk
after every row (io/psrfits_append.py).

Nodes call `Merger.put` straight on the actor's worker (no hop through the
scheduler); the driver calls `tick` (the deadline rule), `status` (live counters per
node) and `finish`. An actor runs its methods one at a time, so nothing here needs a
lock. Every row written is timed: ``merge_latency_s`` is from the arrival of the part
that made the row final (or, for the benchmark, the node's last packet of it) to the
fsync that put it on disk.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.cluster.merge import MergedRow, NodeRow, RowMerger, Subband
from voltstream.dsp.detect import npol_out
from voltstream.fold.reference import FoldSettings, fold_products, folding_periods
from voltstream.observation import FoldedArchive, Observation

log = logging.getLogger("voltstream.cluster.merger")


@dataclass(frozen=True)
class MergePlan:
    """What the merger writes: ``band`` is the whole band as the archive holds it
    (channels in ascending frequency, the order `RowMerger` puts them in), its start
    the observation's."""

    subbands: tuple[Subband, ...]
    band: Observation
    settings: FoldSettings
    output: str
    lag: int = 2
    deadline_s: float | None = None
    history: tuple[str, ...] = ()
    coherent_nfft: int | None = None
    coherent_discard: tuple[int, int] | None = None  # (head, tail), the band's plan's
    par_text: str | None = None


@dataclass
class NodeStatus:
    """What the merger knows of one node: its newest counters (sent with each row),
    rows taken, and the rows it was missing from, as ranges."""

    rows: int = 0
    last_row: int | None = None
    last_seen: float | None = None
    hellos: list = field(default_factory=list)  # (k, wall time) of each (re)start
    worker: str | None = None  # the Dask worker of the newest hello
    departures: int = 0  # times the driver saw its worker leave (a kill, a lost host)
    counters: dict = field(default_factory=dict)
    earlier: list = field(default_factory=list)  # the last counters of each run before
    missing: list = field(default_factory=list)  # [first, last] row ranges


class Merger:
    """The actor; see the module docstring."""

    def __init__(self, plan: MergePlan, resume: bool = False) -> None:
        s = plan.settings
        self.plan = plan
        self.npol = npol_out(s.pol_mode)
        self.rows = RowMerger(plan.subbands, self.npol, s.nbin, lag=plan.lag,
                              deadline_s=plan.deadline_s)  # fmt: skip
        if not np.allclose(self.rows.freqs, plan.band.chan_freqs_mhz):
            raise ValueError("the subbands do not tile the band's channels in frequency order")
        self.nodes = {sb.node: NodeStatus() for sb in plan.subbands}
        self.archive: Any = None
        self.latencies: list[float] = []
        self.written_at: dict[int, float] = {}  # row -> Unix time it was on disk
        self.reasons: dict[str, int] = {}
        self.started = time.time()
        self._ready: set[str] = set()
        if resume and Path(plan.output).exists():
            self._resume()

    def _resume(self) -> None:
        """A merger started again (its worker was killed): the rows on disk stay, new
        rows go after them; the nodes resend the rows they still hold."""
        from voltstream.io.psrfits_append import AppendingArchive

        self.archive = AppendingArchive.reopen(self.plan.output)
        self.rows.next_k = self.archive.nrows
        log.warning("merger: resuming %s after row %d", self.plan.output, self.archive.nrows - 1)

    def ready(self, node: str) -> None:
        """The node is capturing (its socket bound) or reading: the driver starts a
        demo's sender once every node is."""
        self._ready.add(node)

    def hello(self, node: str, k: int, worker: str | None = None) -> None:
        """A node (re)started on ``worker`` (its Dask address); its rows begin at ``k``."""
        self.rows.hello(node, int(k))
        st = self.nodes.get(node)
        if st is not None:
            if st.hellos and st.counters:  # a rerun: keep what the run before counted
                st.earlier.append(st.counters)
                st.counters = {}
            st.hellos.append((int(k), time.time()))
            st.worker = worker

    def put(
        self,
        node: str,
        k: int,
        sums: np.ndarray,
        hits: np.ndarray,
        offered: np.ndarray,
        counters: dict | None = None,
    ) -> int:
        """One node's row ``k``; returns the rows written so far."""
        arrived = time.time()
        st = self.nodes.get(node)
        if st is not None:
            st.rows += 1
            st.last_row = int(k) if st.last_row is None else max(st.last_row, int(k))
            st.last_seen = arrived
            if counters:
                st.counters = counters
        self._write(self.rows.add(NodeRow(node, k, sums, hits, offered)), arrived)
        return self.rows.counters.rows_written

    def gone(self, node: str, worker: str | None = None) -> int:
        """The driver saw the node's worker (``worker``: its address) leave the
        cluster: not waited for, unless the node has already said hello from a new
        worker (a nanny's restart can be quicker than the driver's look)."""
        st = self.nodes.get(node)
        if st is not None and worker is not None and st.worker not in (None, worker):
            return self.rows.counters.rows_written
        if st is not None:
            st.departures += 1
        self._write(self.rows.gone(node), None)
        return self.rows.counters.rows_written

    def bye(self, node: str, last_k: int) -> int:
        """The node's part ended after row ``last_k``."""
        self._write(self.rows.bye(node, int(last_k)), None)
        return self.rows.counters.rows_written

    def tick(self) -> int:
        """Rows whose deadline passed; returns the rows written so far."""
        self._write(self.rows.tick(), None)
        return self.rows.counters.rows_written

    def finish(self) -> dict:
        """The observation ended: every pending row written; the merge report."""
        self._write(self.rows.finish(), None)
        return self.status()

    def status(self) -> dict:
        c = self.rows.counters
        lat = np.asarray(self.latencies or [np.nan])
        tsub = self.plan.settings.tsub_s or 0.0
        return {
            "output": self.plan.output,
            "ready": sorted(self._ready),
            "rows_written": c.rows_written,
            "rows_complete": c.rows_complete,
            "rows_by_rule": dict(self.reasons),
            "rows_at": dict(self.written_at),
            "late": c.late,
            "duplicate": c.duplicate,
            "malformed": c.malformed,
            "merge_latency_s": {
                "p50": float(np.nanpercentile(lat, 50)),
                "max": float(np.nanmax(lat)) if self.latencies else float("nan"),
            },
            "nodes": {
                n: {
                    "rows_received": st.rows,
                    "last_row": st.last_row,
                    "rows_missing": c.missing_by_node.get(n, 0),
                    "seconds_lost": c.missing_by_node.get(n, 0) * tsub,
                    "missing_rows": [list(r) for r in st.missing],
                    "restarts": st.departures,
                    "first_rows": [k for k, _ in st.hellos],
                    "counters": st.counters,
                    "earlier_runs": st.earlier,
                }
                for n, st in self.nodes.items()
            },
        }

    def _write(self, merged: list[MergedRow], arrived: float | None) -> None:
        for row in merged:
            self._write_row(row)
            self.written_at[row.k] = time.time()
            if len(self.written_at) > 4096:  # a long observation: the newest rows
                del self.written_at[min(self.written_at)]
            if arrived is not None:
                self.latencies.append(time.time() - arrived)
            self.reasons[row.reason] = self.reasons.get(row.reason, 0) + 1
            for n in row.missing:
                ranges = self.nodes[n].missing
                if ranges and ranges[-1][1] == row.k - 1:
                    ranges[-1][1] = row.k
                else:
                    ranges.append([row.k, row.k])
            if row.missing:
                log.warning("merger: row %d written without %s (%s rule): weight 0 there",
                            row.k, ", ".join(row.missing), row.reason)  # fmt: skip

    def _write_row(self, row: MergedRow) -> None:
        from voltstream.io.psrfits_append import AppendingArchive

        p, s = self.plan, self.plan.settings
        data, weights, tsubint = fold_products(
            row.sums[None], row.hits[None], row.offered[None], p.band.tsamp_s
        )
        offs = row.k * (s.tsub_s or 0.0) + tsubint / 2
        period = folding_periods(s.predictor, p.band.start_mjd, p.band.start_sec, offs)
        if self.archive is None:
            first = FoldedArchive(
                obs=p.band, data=data, weights=weights, tsubint_s=tsubint, offs_sub_s=offs,
                period_s=period, dm=s.dm, pol_type=s.pol_mode,
                polyco_text=getattr(s.predictor, "text", None), history=list(p.history),
                par_text=p.par_text, coherent_nfft=p.coherent_nfft,
                coherent_discard=p.coherent_discard,
            )  # fmt: skip
            self.archive = AppendingArchive(p.output, first)
        else:
            self.archive.append(data[0], weights[0], tsubint[0], offs[0], period[0])
