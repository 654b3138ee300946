"""The single-pulse search of a filterbank file, gulp by gulp (`voltstream search`,
docs/search.md "Single-pulse search").

A file is searched in gulps so that a long one never sits in memory. The searchable
times (arrivals at the top of the band) are ``[0, nsamp - D)``, D the largest delay
across the band at the highest DM trial: later arrivals have no lowest channel in the
file. They are cut into *own parts* of ``gulp`` samples (the last takes the
remainder when that is under half a gulp). Gulp g reads its own part widened by
``margin`` = half the widest boxcar before and after, plus D after, so every boxcar
centred in its own part lies in what it searched; consecutive gulps therefore overlap
by D plus the widest boxcar.

Each gulp keeps the *giants* (search/candidates.py) whose best boxcar is centred in
its own part, so each is counted once; a burst at a gulp's edge is seen by both,
and its giants go to whichever owns each. Giants are clustered across gulps: after
each gulp the clusters that can no longer grow (every member ends before anything
the next gulp can find, less the clustering's time separation) become candidates;
the others wait for the next gulp's giants.

A SIGPROC file carries no flags: `voltstream filterbank` writes a lost 8-bit sample
as code 128 in every channel, so with 8 bits and 8 channels or more a time sample
whose every channel holds 128 is taken as lost and masked (noise gives that with
probability ~30^-nchan). 32-bit files: no mask (a lost sample holds each channel's
running mean, which the search's normalisation makes ~0 anyway).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.io.sigproc import SigprocFile
from voltstream.search.candidates import Candidate, Giants, cluster, cluster_labels
from voltstream.search.single_pulse import (
    MIN_SUMS,
    SearchResult,
    SearchSettings,
    delay_table,
    dm_trials,
    search_filterbank,
)

__all__ = ["ReferenceEngine", "SearchReport", "gulp_plan", "search_engine", "search_file"]

log = logging.getLogger("voltstream.pipeline.search")

#: The default gulp's float64 working copy is kept under this many bytes.
GULP_BYTES = 1 << 28


@dataclass
class SearchReport:
    """What a file's search did and found (printed, and `--report`'s JSON)."""

    path: str
    nsamp: int
    nchans: int
    tsamp_s: float
    dm_min: float
    dm_max: float
    dm_trials: int
    max_delay_samples: int  # the sweep across the band at the highest trial
    boxcar_max: int  # samples
    threshold: float
    gulps: int = 0
    gulp_samples: int = 0  # each gulp's own part (the last may be longer)
    overlap_samples: int = 0  # read by two consecutive gulps
    searched_samples: int = 0  # arrival times searched: nsamp less the sweep
    lost_samples: int = 0
    n_trials: int = 0  # (trial, boxcar, sample) S/N values computed, all gulps
    giants: int = 0
    expected_false_alarms: float = 0.0  # Gaussian noise, S/N values above threshold
    seconds: float = 0.0
    device: str = "cpu"
    candidates: list[Candidate] = field(default_factory=list)  # strongest first

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "candidates"}
        out["n_candidates"] = len(self.candidates)
        out["top_candidates"] = [c.__dict__ for c in self.candidates[:10]]
        return out

    def summary_lines(self, top: int = 5) -> list[str]:
        lines = [
            f"search: {self.path}: {self.nsamp} samples x {self.nchans} channels, "
            f"tsamp {self.tsamp_s * 1e6:g} us; {self.gulps} gulp(s) of {self.gulp_samples} "
            f"samples overlapping by {self.overlap_samples}; {self.searched_samples} "
            f"arrival times searched ({self.lost_samples} lost samples masked)",
            f"search: {self.dm_trials} DM trials {self.dm_min:g}..{self.dm_max:g}, boxcars "
            f"1..{self.boxcar_max} samples, threshold {self.threshold:g}: "
            f"{self.giants} giants, {len(self.candidates)} candidate(s) "
            f"(Gaussian noise: {self.expected_false_alarms:.3g} S/N values above the "
            f"threshold expected) in {self.seconds:.1f} s",
        ]
        for c in self.candidates[:top]:
            lines.append(
                f"search:   S/N {c.snr:6.2f}  DM {c.dm:9.3f}  t {c.time_s:.6f} s "
                f"(sample {c.sample_index})  width {c.width_samples} samples  "
                f"members {c.members}"
            )
        return lines


class ReferenceEngine:
    """The NumPy reference as a search engine: what every engine has, ``name`` and
    ``search(data, mask, first_sample) -> SearchResult`` for one gulp of this band
    and sampling time (search/gpu_single_pulse.py ``GpuSinglePulse`` is the GPU's)."""

    name = "cpu"

    def __init__(self, freqs_mhz: np.ndarray, tsamp_s: float, settings: SearchSettings) -> None:
        self.freqs, self.tsamp, self.settings = np.asarray(freqs_mhz), tsamp_s, settings

    def search(
        self, data: np.ndarray, mask: np.ndarray | None = None, first_sample: int = 0
    ) -> SearchResult:
        return search_filterbank(data, self.freqs, self.tsamp, mask, self.settings,
                                 first_sample=first_sample)  # fmt: skip


def search_engine(
    device: str, freqs_mhz: np.ndarray, tsamp_s: float, settings: SearchSettings
) -> Any:
    """The engine of ``device`` ("cpu" or "gpu", as ``resolve_device`` gives it)."""
    if device == "gpu":
        from voltstream.search.gpu_single_pulse import GpuSinglePulse

        return GpuSinglePulse(freqs_mhz, tsamp_s, settings)
    return ReferenceEngine(freqs_mhz, tsamp_s, settings)


def gulp_plan(
    searchable: int, gulp: int, margin: int, sweep: int, nsamp: int
) -> list[tuple[int, int, int, int]]:
    """(own_lo, own_hi, read_lo, read_hi) of each gulp (module docstring)."""
    if searchable < 1:
        return []
    gulp = max(1, gulp)
    edges = list(range(0, searchable, gulp)) + [searchable]
    if len(edges) > 2 and edges[-1] - edges[-2] < gulp / 2:
        del edges[-2]  # a short remainder joins the last gulp
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        out.append((lo, hi, max(0, lo - margin), min(nsamp, hi + margin + sweep)))
    return out


def _shift(g: Giants, by: int) -> Giants:
    return Giants(g.snr, g.peak + by, g.begin + by, g.end + by, g.dm_index, g.filter_index)


def _lost(block: np.ndarray, nbits: int) -> np.ndarray | None:
    """Valid samples (module docstring): None when none is lost."""
    if nbits != 8 or block.shape[1] < 8:
        return None
    valid = ~np.all(block == 128, axis=1)
    return None if valid.all() else valid


def search_file(
    fil: SigprocFile,
    settings: SearchSettings,
    gulp_s: float | None = None,
    on_candidates: Callable[[list[Candidate]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    device: str = "cpu",
) -> SearchReport:
    """Searches ``fil`` gulp by gulp (module docstring); ``on_candidates`` is given each
    batch of finished candidates as they come (to write them), ``progress`` the
    samples each gulp owned; ``device``: the engine each gulp runs on (cpu: the NumPy
    reference, gpu: search/gpu_single_pulse.py), made once."""
    t0 = time.monotonic()
    settings.check()
    freqs, tsamp = fil.freqs_mhz, fil.tsamp_s
    dms = dm_trials(settings.dm_min, settings.dm_max, freqs, tsamp, settings.dm_tol,
                    settings.pulse_width_s)  # fmt: skip
    sweep = int(delay_table(dms[-1:], freqs, tsamp, float(freqs.max())).max())
    searchable = fil.nsamp - sweep
    if searchable < MIN_SUMS:
        raise ConfigError(
            f"{fil.path}: {fil.nsamp} samples ({fil.nsamp * tsamp:g} s) leave "
            f"{max(searchable, 0)} arrival times after the sweep across the band at DM "
            f"{dms[-1]:g} ({sweep} samples): lower --dm-max"
        )
    if gulp_s is None:  # the float64 working copy under GULP_BYTES, at least the overlap
        gulp = max(GULP_BYTES // (8 * fil.nchans) - sweep - settings.boxcar_max, 2 * sweep)
    else:
        gulp = int(round(gulp_s / tsamp))
        if gulp < MIN_SUMS:
            raise ConfigError(f"--gulp {gulp_s:g} s is {gulp} samples of {tsamp:g} s: give at "
                              f"least {MIN_SUMS * tsamp:g} s")  # fmt: skip
    gulp = min(gulp, searchable)
    # Every gulp searches every boxcar: the widest has MIN_SUMS sums in a gulp's own part.
    boxcar = 1 << int(math.log2(min(settings.boxcar_max, gulp // MIN_SUMS)))
    settings = replace(settings, boxcar_max=boxcar)
    margin = boxcar // 2 + 1
    plan = gulp_plan(searchable, gulp, margin, sweep, fil.nsamp)
    engine = search_engine(device, freqs, tsamp, settings)
    rep = SearchReport(
        path=str(fil.path), nsamp=fil.nsamp, nchans=fil.nchans, tsamp_s=tsamp,
        dm_min=settings.dm_min, dm_max=float(dms[-1]), dm_trials=len(dms),
        max_delay_samples=sweep, boxcar_max=boxcar, threshold=settings.threshold,
        gulps=len(plan), gulp_samples=min(gulp, searchable),
        overlap_samples=sweep + 2 * margin if len(plan) > 1 else 0,
        searched_samples=searchable, device=device,
    )  # fmt: skip
    sep = {"time_sep": settings.time_sep, "dm_sep": settings.dm_sep,
           "filter_sep": settings.filter_sep}  # fmt: skip
    pending = Giants.empty()
    found: list[Candidate] = []
    for k, (own_lo, own_hi, lo, hi) in enumerate(plan):
        block = np.asarray(fil.data[lo:hi], dtype=np.float32)
        valid = _lost(block, fil.nbits)
        if valid is not None:
            # Each sample counted once: by the gulp whose own part holds it.
            at = np.arange(lo, hi)
            rep.lost_samples += int(np.sum(~valid & (at >= own_lo) & (
                (at < own_hi) if k < len(plan) - 1 else True)))  # fmt: skip
        res = engine.search(block, valid)
        rep.n_trials += res.n_trials
        rep.expected_false_alarms += res.expected_false_alarms()
        g = _shift(res.giants, lo)
        centre = g.peak + (1 << g.filter_index) // 2
        g = g.take(np.flatnonzero((centre >= own_lo) & (centre < own_hi)))
        rep.giants += len(g)
        pending = Giants.concat([pending, g])
        # Clusters that end before the next gulp's first read sample (less the time
        # separation) cannot gain members: candidates now.
        nxt = plan[k + 1][2] if k + 1 < len(plan) else None
        pending, done = _finished(pending, dms, tsamp, nxt, sep)
        found += done
        if on_candidates is not None and done:
            on_candidates(done)
        if progress is not None:
            progress(own_hi - own_lo)
        log.debug("search: gulp %d/%d [%d, %d): %d giants", k + 1, len(plan), own_lo,
                  own_hi, len(g))  # fmt: skip
    found.sort(key=lambda c: -c.snr)
    rep.candidates = found
    rep.seconds = time.monotonic() - t0
    return rep


def _finished(
    g: Giants, dms: np.ndarray, tsamp: float, next_read: int | None, sep: dict[str, int]
) -> tuple[Giants, list[Candidate]]:
    """(the giants still waiting, the candidates of the clusters that are finished)."""
    if len(g) == 0:
        return g, []
    if next_read is None:
        return Giants.empty(), cluster(g, dms, tsamp, **sep)
    ncl, label = cluster_labels(g, **sep)
    last = np.full(ncl, np.iinfo(np.int64).min)
    np.maximum.at(last, label, g.end)
    done = (last + sep["time_sep"] < next_read)[label]
    return g.take(np.flatnonzero(~done)), cluster(g.take(np.flatnonzero(done)), dms, tsamp,
                                                   **sep)  # fmt: skip
