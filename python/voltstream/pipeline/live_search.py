"""Live single-pulse search (`voltstream search --listen`, docs/search.md "Live
search"): capture -> filterbank -> gulp search, in one process, candidate lines
written as they are found.

The reader is a `LiveReader` (pipeline/live.py) whose ``on_chunk`` records when each
chunk was handed over (``ArrivalLog``); its blocks go through a filterbank engine
(``feed(block, valid) -> (samples (k, 1, nchan), valid (k,))``: the NumPy
``FilterbankReference`` by default, any other such as a GPU one by ``engine=``)
and its rows into a `StreamSearch`. With ``filterbank_path`` the rows are also
written as a file (pipeline/filterbank.py ``make_filterbank``, the engine wrapped
so that each row is searched as it is written).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.io.baseband import reader_blocks
from voltstream.pipeline.stream_search import ArrivalLog, StreamSearch
from voltstream.search.candidates import Candidate
from voltstream.search.filterbank import FilterbankPlan, FilterbankReference
from voltstream.search.single_pulse import SearchSettings

__all__ = [
    "CandidateFile",
    "SearchTee",
    "arrival_of",
    "make_stream_search",
    "on_chunk_recorder",
    "search_rows",
]


class CandidateFile:
    """Candidate lines appended and flushed as each batch comes (heimdall's columns,
    search/candidates.py), so a reader of the file sees a candidate at once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "w")  # noqa: SIM115 - closed by close()
        self.lines = 0

    def write(self, cands: list[Candidate]) -> None:
        for c in sorted(cands, key=lambda c: (c.sample_index, -c.snr)):
            self._f.write(c.line() + "\n")
        self._f.flush()
        self.lines += len(cands)

    def close(self) -> None:
        self._f.close()


def arrival_of(plan: FilterbankPlan, log: ArrivalLog) -> Callable[[int], float | None]:
    """Filterbank sample n -> the wall time its last input sample was received: input
    sample ``first_input + (n + 1) span - 1`` of the plan, on the stream's clock."""
    tsamp_in = plan.obs.tsamp_s

    def at(n: int) -> float | None:
        last = plan.first_input + (n + 1) * plan.span - 1
        return log.at((last + 0.5) * tsamp_in)

    return at


def on_chunk_recorder(log: ArrivalLog, tsamp_s: float) -> Callable[[int], None]:
    """LiveReader's ``on_chunk``: each chunk's end on the stream's clock, and now."""
    state = {"samples": 0}

    def on_chunk(nsamp: int) -> None:
        state["samples"] += nsamp
        log.add(state["samples"] * tsamp_s, time.monotonic())

    return on_chunk


def _no_rows(engine: Any) -> tuple[np.ndarray, np.ndarray]:
    plan = engine.plan
    return np.zeros((0, plan.npol_out, plan.nchan_out), np.float32), np.zeros(0, bool)


class SearchTee:
    """A filterbank engine that also hands each block's rows to a `StreamSearch`
    (``make_filterbank(engine=SearchTee(...))`` writes and searches the same rows)."""

    def __init__(self, engine: Any, search: StreamSearch) -> None:
        self.engine, self.search = engine, search

    def feed(self, block: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return self._rows(*self.engine.feed(block, valid))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """What the engine still held (a GPU engine returns rows a block late): searched
        and written like the rest."""
        done = getattr(self.engine, "finish", None)
        return self._rows(*done()) if callable(done) else self._rows(*_no_rows(self.engine))

    def _rows(self, x: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(x):
            self.search.feed(x[:, 0, :], ok)
        return x, ok

    def __getattr__(self, name: str) -> Any:  # samples_in, lost_out ...: the engine's
        return getattr(self.engine, name)


def make_stream_search(
    plan: FilterbankPlan,
    settings: SearchSettings,
    gulp_s: float,
    candidates: CandidateFile | None,
    device: str = "cpu",
    arrivals: ArrivalLog | None = None,
    then: Callable[[list[Candidate]], None] | None = None,
) -> StreamSearch:
    """The `StreamSearch` of ``plan``'s rows (its engine made now, before any data):
    candidates to ``candidates``, then to ``then`` (the voltage dumps, which only queue
    them: a candidate's latency ends after both), latencies from ``arrivals``."""
    if plan.npol_out != 1:
        raise ConfigError("the search takes total intensity: --pol I")
    gulp = max(1, int(round(gulp_s / plan.tsamp_s)))
    calls = [f for f in (None if candidates is None else candidates.write, then) if f]

    def found(cands: list[Candidate]) -> None:
        for f in calls:
            f(cands)

    return StreamSearch(
        plan.chan_freqs_mhz, plan.tsamp_s, settings, gulp, device, found if calls else None,
        None if arrivals is None else arrival_of(plan, arrivals),
    )  # fmt: skip


def search_rows(
    reader: Any,
    plan: FilterbankPlan,
    search: StreamSearch,
    *,
    engine: Any = None,
    writer: Any = None,
    progress: Callable[[int], None] | None = None,
) -> Any:
    """Runs ``reader`` through the filterbank ``engine`` (None: the NumPy reference;
    anything with ``feed(block, valid) -> (samples, valid)`` and ``samples_in``, such
    as a GPU filterbank) into ``search`` until it ends, then finishes the search; with
    ``writer`` the rows are written too (``make_filterbank``). Returns the filterbank
    engine. ``search.report`` holds the counts, candidates and latencies (a metrics
    thread may read them as they change: plain numbers, lists copied before use)."""
    fb = engine if engine is not None else FilterbankReference(plan)
    tee = SearchTee(fb, search)
    if writer is not None:
        from voltstream.pipeline.filterbank import make_filterbank

        make_filterbank(reader, plan, writer, progress, tee)
    else:
        for block, valid in reader_blocks(reader, plan.block_samples()):
            tee.feed(block, valid)
            if progress is not None:
                progress(fb.samples_in)
        tee.finish()
    search.finish()
    return fb
