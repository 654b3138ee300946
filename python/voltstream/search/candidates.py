"""Single-pulse candidates: giants (one detection per DM trial and boxcar), their
friends-of-friends clusters, and heimdall's candidate lines.

A *giant* is a run of boxcar outputs above the threshold in one (DM trial, boxcar)
time series, samples closer than ``time_sep`` boxcar widths joined, kept as its
highest S/N with the range of samples its boxcars cover. Giants are clustered as
heimdall does (Barsdell et al. 2012; heimdall's Pipeline/label_candidate_clusters.cu):
two giants are friends when their DM trial indices differ by at most ``dm_sep``,
their boxcar filter indices by at most ``filter_sep``, and their sample ranges
overlap or lie within ``time_sep`` samples of each other; a cluster is a connected
set of friends (friends of friends), reported as its highest-S/N member with the
number of members and the first and last sample any member covers.

Candidate lines, one per cluster, are heimdall's ``.cand`` columns in its order
(heimdall's Pipeline/pipeline.cu writes them tab-separated, no header):

    snr  sample_index  time_s  boxcar_filter  dm_index  dm  members  first_sample  last_sample

``boxcar_filter`` is the filter index: the boxcar is 2**boxcar_filter samples long;
``sample_index`` the centre of the best boxcar in the dedispersed series (samples of
the filterbank, at the highest channel frequency), ``time_s`` = sample_index * tsamp.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

__all__ = [
    "COLUMNS",
    "Candidate",
    "Giants",
    "cluster",
    "cluster_labels",
    "read_candidates",
    "write_candidates",
]

COLUMNS = (
    "snr", "sample_index", "time_s", "boxcar_filter", "dm_index", "dm",
    "members", "first_sample", "last_sample",
)  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    """One cluster of giants: its best member, as a candidate line says it."""

    snr: float
    sample_index: int  # centre of the best boxcar, dedispersed series sample
    time_s: float
    boxcar_filter: int  # the boxcar is 2**boxcar_filter samples
    dm_index: int
    dm: float
    members: int
    first_sample: int
    last_sample: int

    @property
    def width_samples(self) -> int:
        return 1 << self.boxcar_filter

    def line(self) -> str:
        return (
            f"{self.snr:.6g}\t{self.sample_index}\t{self.time_s:.9f}\t{self.boxcar_filter}\t"
            f"{self.dm_index}\t{self.dm:.6g}\t{self.members}\t{self.first_sample}\t"
            f"{self.last_sample}"
        )


@dataclass
class Giants:
    """Detections, one per run above the threshold in a (DM trial, boxcar) series:
    parallel int64/float64 arrays."""

    snr: np.ndarray
    peak: np.ndarray  # first sample of the best boxcar
    begin: np.ndarray  # first sample any above-threshold boxcar of the run covers
    end: np.ndarray  # last sample covered (inclusive)
    dm_index: np.ndarray
    filter_index: np.ndarray

    @classmethod
    def empty(cls) -> Giants:
        i = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0), i, i, i, i, i)

    def __len__(self) -> int:
        return len(self.snr)

    @classmethod
    def concat(cls, parts: list[Giants]) -> Giants:
        if not parts:
            return cls.empty()
        names = ("snr", "peak", "begin", "end", "dm_index", "filter_index")
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in names))

    def take(self, idx: np.ndarray) -> Giants:
        return Giants(
            self.snr[idx], self.peak[idx], self.begin[idx], self.end[idx],
            self.dm_index[idx], self.filter_index[idx],
        )  # fmt: skip


def find_giants(
    snr: np.ndarray, threshold: float, filter_index: int, dm_offset: int, time_sep: int
) -> Giants:
    """The giants of S/N series ``snr`` (ndm, n): boxcars of 2**filter_index samples,
    the series' sample t the boxcar starting at t, rows DM trials from ``dm_offset``.
    Above-threshold samples of a row closer than ``time_sep`` boxcar widths are one
    giant."""
    width = 1 << filter_index
    rows, ts = np.nonzero(snr > threshold)  # row-major: sorted by row, then time
    if len(rows) == 0:
        return Giants.empty()
    vals = snr[rows, ts]
    gap = max(1, time_sep * width)
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (rows[1:] != rows[:-1]) | (ts[1:] - ts[:-1] > gap)
    starts = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    best = np.maximum.reduceat(vals, starts)
    # The first sample of each run reaching its maximum.
    at_best = np.flatnonzero(vals == best[run])
    _, first = np.unique(run[at_best], return_index=True)
    peak_at = at_best[first]
    last = np.append(starts[1:], len(rows)) - 1
    return Giants(
        snr=best.astype(np.float64),
        peak=ts[peak_at].astype(np.int64),
        begin=ts[starts].astype(np.int64),
        end=ts[last].astype(np.int64) + width - 1,
        dm_index=rows[starts].astype(np.int64) + dm_offset,
        filter_index=np.full(len(starts), filter_index, dtype=np.int64),
    )


def _friend_pairs(
    g: Giants, time_sep: int, dm_sep: int, filter_sep: int, block: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) of friends. Giants sorted by ``begin``: a block's friends
    among later giants all begin before the block's last end + time_sep, so each
    block is compared with that slice only (all pairs where all overlap in time)."""
    order = np.argsort(g.begin, kind="stable")
    b, e = g.begin[order], g.end[order]
    d, f = g.dm_index[order], g.filter_index[order]
    rows, cols = [], []
    for i0 in range(0, len(order), block):
        i1 = min(len(order), i0 + block)
        hi = int(np.searchsorted(b, e[i0:i1].max() + time_sep, side="right"))
        sl, sr = slice(i0, i1), slice(i0, hi)
        near = (
            (b[sl, None] <= e[None, sr] + time_sep)
            & (b[None, sr] <= e[sl, None] + time_sep)
            & (np.abs(d[sl, None] - d[None, sr]) <= dm_sep)
            & (np.abs(f[sl, None] - f[None, sr]) <= filter_sep)
        )
        r, c = np.nonzero(near)
        rows.append(order[r + i0])
        cols.append(order[c + i0])
    return np.concatenate(rows), np.concatenate(cols)


def cluster_labels(
    g: Giants, *, time_sep: int = 3, dm_sep: int = 200, filter_sep: int = 3
) -> tuple[int, np.ndarray]:
    """The number of friends-of-friends clusters of ``g`` and each giant's cluster."""
    n = len(g)
    if n == 0:
        return 0, np.zeros(0, dtype=np.int64)
    rows, cols = _friend_pairs(g, time_sep, dm_sep, filter_sep)
    graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n, n))
    ncl, label = connected_components(graph, directed=False)
    return int(ncl), label


def cluster(
    g: Giants,
    dms: np.ndarray,
    tsamp_s: float,
    *,
    time_sep: int = 3,
    dm_sep: int = 200,
    filter_sep: int = 3,
    first_sample: int = 0,
) -> list[Candidate]:
    """Friends-of-friends clusters of ``g`` as candidates, strongest first. The
    separations are heimdall's defaults (-cand_sep_time 3, -cand_sep_dm_trial 200,
    -cand_sep_filter 3); ``first_sample``: the index of the series' first sample in
    the whole observation (added to every sample index)."""
    n = len(g)
    if n == 0:
        return []
    ncl, label = cluster_labels(g, time_sep=time_sep, dm_sep=dm_sep, filter_sep=filter_sep)
    # The best member of each cluster: highest S/N, ties to the earliest giant.
    order = np.lexsort((np.arange(n), -g.snr, label))
    lead = order[np.flatnonzero(np.r_[True, label[order][1:] != label[order][:-1]])]
    members = np.bincount(label, minlength=ncl)
    first = np.full(ncl, np.iinfo(np.int64).max)
    last = np.full(ncl, np.iinfo(np.int64).min)
    np.minimum.at(first, label, g.begin)
    np.maximum.at(last, label, g.end)
    out = []
    for i in lead:
        k = label[i]
        w = 1 << int(g.filter_index[i])
        sample = first_sample + int(g.peak[i]) + w // 2
        out.append(
            Candidate(
                snr=float(g.snr[i]),
                sample_index=sample,
                time_s=sample * tsamp_s,
                boxcar_filter=int(g.filter_index[i]),
                dm_index=int(g.dm_index[i]),
                dm=float(dms[g.dm_index[i]]),
                members=int(members[k]),
                first_sample=first_sample + int(first[k]),
                last_sample=first_sample + int(last[k]),
            )
        )
    out.sort(key=lambda c: -c.snr)
    return out


def write_candidates(path: str | os.PathLike, cands: list[Candidate], append: bool = False) -> None:
    """Writes heimdall-style candidate lines (module docstring), in time order."""
    with open(path, "a" if append else "w") as fh:
        for c in sorted(cands, key=lambda c: (c.sample_index, -c.snr)):
            fh.write(c.line() + "\n")


def read_candidates(path: str | os.PathLike) -> list[Candidate]:
    """Candidate lines back (ours or heimdall's: extra columns, such as its beam, are
    ignored)."""
    out = []
    with open(path) as fh:
        for line in fh:
            f = line.split()
            if not f or f[0].startswith("#"):
                continue
            out.append(
                Candidate(
                    float(f[0]),
                    int(f[1]),
                    float(f[2]),
                    int(f[3]),
                    int(f[4]),
                    float(f[5]),
                    int(f[6]),
                    int(f[7]),
                    int(f[8]),
                )  # fmt: skip
            )
    return out


def gaussian_tail(threshold: float) -> float:
    """P(x > threshold) for a unit normal: one trial's false-alarm probability."""
    return 0.5 * math.erfc(threshold / math.sqrt(2.0))
