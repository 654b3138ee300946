"""The single-pulse search of a stream of filterbank rows (`voltstream search
--listen`, docs/search.md "Live search"): pipeline/search.py's gulps, run as the
rows arrive, and the detection latency of every candidate.

**Gulps.** The same plan as a file's (pipeline/search.py): own parts of ``gulp``
arrival times, each read with ``margin`` (half the widest boxcar, + 1) before and
after and the sweep D after, its giants kept when their best boxcar is centred in
its own part, clustered across gulps, a cluster written once no later gulp can add
to it. A file knows its length; a stream does not, so gulp k runs as soon as the
rows up to its own part's end + margin + D have arrived, and the rows are kept
from the next gulp's first read sample less one gulp (the history the last gulp
may need). At the end the arrival times left (fewer than a gulp) are searched once,
read back as far as a whole gulp when the history holds it so that the noise
statistics are measured on as many samples as a full gulp's.

**Latency.** ``arrival(sample)`` (the caller's: the wall time at which the filterbank
sample's last input sample was received, ``ArrivalLog``) is asked for the burst's
last sample: its arrival time at the top of the band plus its delay at the lowest
frequency at the candidate's DM plus half its boxcar. The latency is the wall
time just after its candidate line was written and flushed less that. Latencies
are kept per candidate (in the report) and as p50 / p99.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from voltstream.pipeline.search import _finished, _shift, search_engine
from voltstream.search.candidates import Candidate, Giants
from voltstream.search.single_pulse import MIN_SUMS, SearchSettings, delay_table, dm_trials

__all__ = ["ArrivalLog", "StreamSearch", "StreamSearchReport"]


class ArrivalLog:
    """When each stretch of the input stream was received: ``add(seconds_end, wall)``
    per chunk the capture hands over (its end on the stream's clock, seconds since
    the first sample, and ``time.monotonic()`` then); ``at(seconds)`` the wall time
    the sample at ``seconds`` was received (that of the first chunk reaching past
    it). Written by the capture's thread, read by the search's."""

    def __init__(self) -> None:
        self._ends: list[float] = []
        self._walls: list[float] = []
        self._lock = threading.Lock()

    def add(self, seconds_end: float, wall: float) -> None:
        with self._lock:
            self._ends.append(seconds_end)
            self._walls.append(wall)

    def at(self, seconds: float) -> float | None:
        with self._lock:
            if not self._ends or seconds >= self._ends[-1]:
                return None  # not received yet
            k = int(np.searchsorted(self._ends, seconds, side="right"))
            return self._walls[k]


@dataclass
class StreamSearchReport:
    """What the stream's search did and found (`search --listen`'s report section)."""

    nchans: int
    tsamp_s: float
    dm_min: float
    dm_max: float
    dm_trials: int
    max_delay_samples: int
    boxcar_max: int
    threshold: float
    gulp_samples: int
    overlap_samples: int
    device: str = "cpu"
    samples: int = 0  # filterbank samples fed
    lost_samples: int = 0
    searched_samples: int = 0  # arrival times searched
    gulps: int = 0
    giants: int = 0
    n_trials: int = 0
    expected_false_alarms: float = 0.0
    search_seconds: float = 0.0  # the engine's time, all gulps
    seconds_behind_max: float = 0.0  # the most the search lagged the stream
    latencies: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)  # strongest first

    def latency_percentiles(self) -> dict[str, float | None]:
        lat = [x["latency_s"] for x in list(self.latencies) if x["latency_s"] is not None]
        if not lat:
            return {"latency_p50_s": None, "latency_p99_s": None, "latency_max_s": None}
        return {
            "latency_p50_s": float(np.percentile(lat, 50)),
            "latency_p99_s": float(np.percentile(lat, 99)),
            "latency_max_s": float(max(lat)),
        }

    def counters(self) -> dict[str, Any]:
        """The numbers alone (the live metrics' section)."""
        out = {k: v for k, v in self.__dict__.items()
               if k not in ("latencies", "candidates", "device")}  # fmt: skip
        out["n_candidates"] = len(self.latencies)  # each one's latency is kept as it is written
        out.update(self.latency_percentiles())
        return out

    def as_dict(self) -> dict[str, Any]:
        out = self.counters()
        out["device"] = self.device
        out["n_candidates"] = len(self.candidates)
        out["latencies"] = list(self.latencies)
        out["top_candidates"] = [c.__dict__ for c in self.candidates[:10]]
        return out


class StreamSearch:
    """Feeds filterbank rows (``feed(rows (k, nchan), valid (k,))``) into gulp
    searches as they complete (module docstring); ``finish()`` at the stream's end.
    ``on_candidates(list)`` is given each batch of finished candidates (it writes
    them); ``arrival(sample)``: the wall time filterbank sample ``sample`` was
    received (None: no latencies)."""

    def __init__(
        self,
        freqs_mhz: np.ndarray,
        tsamp_s: float,
        settings: SearchSettings,
        gulp_samples: int,
        device: str = "cpu",
        on_candidates: Callable[[list[Candidate]], None] | None = None,
        arrival: Callable[[int], float | None] | None = None,
    ) -> None:
        settings.check()
        self.freqs = np.asarray(freqs_mhz, dtype=np.float64)
        self.tsamp = float(tsamp_s)
        st = settings
        self.dms = dm_trials(st.dm_min, st.dm_max, self.freqs, tsamp_s, st.dm_tol,
                             st.pulse_width_s)  # fmt: skip
        self.sweep = int(delay_table(self.dms[-1:], self.freqs, tsamp_s, self.freqs.max()).max())
        self.gulp = max(int(gulp_samples), MIN_SUMS)
        boxcar = 1 << int(math.log2(min(st.boxcar_max, self.gulp // MIN_SUMS)))
        self.settings = replace(st, boxcar_max=boxcar)
        self.margin = boxcar // 2 + 1
        # Each candidate's lowest-frequency delay: where its burst ends in the band.
        self._low_delay = delay_table(self.dms, self.freqs[[int(np.argmin(self.freqs))]],
                                      tsamp_s, self.freqs.max())[:, 0]  # fmt: skip
        self.engine = search_engine(device, self.freqs, tsamp_s, self.settings)
        if self.engine.name == "gpu":
            self.warm_up()
        self.on_candidates, self.arrival = on_candidates, arrival
        self._sep = {"time_sep": st.time_sep, "dm_sep": st.dm_sep, "filter_sep": st.filter_sep}
        self._rows: list[np.ndarray] = []
        self._valid: list[np.ndarray] = []
        self._buf_start = 0  # sample index of the buffer's first row
        self._buf_len = 0
        self._own_lo = 0  # the next gulp's own part starts here
        self._pending = Giants.empty()
        self.report = StreamSearchReport(
            nchans=len(self.freqs), tsamp_s=self.tsamp, dm_min=st.dm_min,
            dm_max=float(self.dms[-1]), dm_trials=len(self.dms), max_delay_samples=self.sweep,
            boxcar_max=boxcar, threshold=st.threshold, gulp_samples=self.gulp,
            overlap_samples=self.sweep + 2 * self.margin, device=self.engine.name,
        )  # fmt: skip

    def warm_up(self) -> None:
        """Searches two gulps of noise, one with a lost sample, before any data: the GPU
        engine's first gulp compiles CuPy's kernels (sums, selections, compaction),
        seconds that would otherwise fall on the first real gulp and delay every
        candidate until the search caught up (measured: 6 s behind on an H200)."""
        shape = (self.gulp + 2 * self.margin + self.sweep, len(self.freqs))
        noise = np.random.default_rng(0).standard_normal(shape, dtype=np.float32) ** 2
        ok = np.ones(shape[0], bool)
        ok[shape[0] // 2] = False
        for mask in (None, ok):
            self.engine.search(noise, mask)

    # --- rows in --------------------------------------------------------------------

    def feed(self, rows: np.ndarray, valid: np.ndarray | None = None) -> list[Candidate]:
        """Takes the next rows; runs every gulp they complete; the candidates written."""
        rows = np.asarray(rows, dtype=np.float32)
        ok = np.ones(len(rows), bool) if valid is None else np.asarray(valid, bool)
        if rows.ndim != 2 or rows.shape[1] != len(self.freqs) or ok.shape != rows.shape[:1]:
            raise ValueError(f"rows {rows.shape} / valid {ok.shape} for {len(self.freqs)} "
                             "channels")  # fmt: skip
        self._rows.append(rows)
        self._valid.append(ok)
        self._buf_len += len(rows)
        self.report.samples += len(rows)
        self.report.lost_samples += int(np.count_nonzero(~ok))
        out: list[Candidate] = []
        while self._end >= self._own_lo + self.gulp + self.margin + self.sweep:
            out += self._run(self._own_lo, self._own_lo + self.gulp,
                             self._own_lo - self.margin, final=False)  # fmt: skip
        return out

    def finish(self) -> list[Candidate]:
        """The stream ended: searches the arrival times left, writes every cluster."""
        searchable = self._end - self.sweep
        out: list[Candidate] = []
        if searchable > self._own_lo:
            lo = max(self._buf_start, min(self._own_lo - self.margin,
                                          searchable - self.gulp - self.margin))  # fmt: skip
            if self._end - max(lo, 0) - self.sweep >= MIN_SUMS:
                out += self._run(self._own_lo, searchable, lo, final=True)
        if len(self._pending):  # the last clusters (none when no gulp ever ran)
            _, done = _finished(self._pending, self.dms, self.tsamp, None, self._sep)
            self._pending = Giants.empty()
            out += self._emit(done)
        self.report.candidates.sort(key=lambda c: -c.snr)
        return out

    @property
    def _end(self) -> int:
        return self._buf_start + self._buf_len

    def _block(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        data = np.concatenate(self._rows) if len(self._rows) > 1 else self._rows[0]
        ok = np.concatenate(self._valid) if len(self._valid) > 1 else self._valid[0]
        self._rows, self._valid = [data], [ok]
        a, b = lo - self._buf_start, hi - self._buf_start
        return data[a:b], ok[a:b]

    def _drop_before(self, sample: int) -> None:
        k = sample - self._buf_start
        if k <= 0:
            return
        data, ok = self._block(self._buf_start, self._end)
        self._rows, self._valid = [data[k:].copy()], [ok[k:].copy()]
        self._buf_start, self._buf_len = sample, self._buf_len - k

    # --- one gulp ---------------------------------------------------------------------

    def _run(self, own_lo: int, own_hi: int, lo: int, final: bool) -> list[Candidate]:
        lo = max(lo, self._buf_start, 0)
        hi = self._end if final else own_hi + self.margin + self.sweep
        block, ok = self._block(lo, hi)
        t0 = time.monotonic()
        res = self.engine.search(block, None if ok.all() else ok)
        rep = self.report
        rep.search_seconds += time.monotonic() - t0
        rep.gulps += 1
        rep.n_trials += res.n_trials
        rep.expected_false_alarms += res.expected_false_alarms()
        rep.searched_samples += own_hi - own_lo
        g = _shift(res.giants, lo)
        centre = g.peak + (1 << g.filter_index) // 2
        g = g.take(np.flatnonzero((centre >= own_lo) & (centre < own_hi)))
        rep.giants += len(g)
        self._pending = Giants.concat([self._pending, g])
        next_read = None if final else own_hi - self.margin
        self._pending, done = _finished(self._pending, self.dms, self.tsamp, next_read, self._sep)
        self._own_lo = own_hi
        if not final:  # keep a gulp of history before the next read (for the last gulp)
            self._drop_before(next_read - self.gulp)  # type: ignore[operator]
        if self.arrival is not None and self._end > 0:
            newest = self.arrival(self._end - 1)
            if newest is not None:
                rep.seconds_behind_max = max(rep.seconds_behind_max, time.monotonic() - newest)
        return self._emit(done)

    def _emit(self, done: list[Candidate]) -> list[Candidate]:
        if not done:
            return []
        if self.on_candidates is not None:
            self.on_candidates(done)
        now = time.monotonic()
        for c in done:
            last = self.burst_end_sample(c)
            got = None if self.arrival is None else self.arrival(last)
            self.report.latencies.append({
                "time_s": c.time_s, "dm": c.dm, "snr": c.snr, "sample_index": c.sample_index,
                "last_sample": last, "latency_s": None if got is None else now - got,
            })  # fmt: skip
        self.report.candidates += done
        return done

    def burst_end_sample(self, c: Candidate) -> int:
        """The filterbank sample holding the end of candidate ``c``'s burst: its arrival
        at the top of the band + its delay at the lowest frequency + half its boxcar."""
        return int(c.sample_index + self._low_delay[c.dm_index] + c.width_samples // 2)
