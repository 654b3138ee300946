"""How long a stage takes per item, as a histogram the report can carry: fixed buckets
(10 us .. 1 s) and a running sum, counted by the stage's own thread. Plain numbers, so
the pipeline needs no metrics library; voltstream.ops exposes them as Prometheus
histograms (``voltstream_stage_seconds``)."""

from __future__ import annotations

from bisect import bisect_left

#: Upper bounds of the buckets, seconds: a chunk's Python cost is tens of microseconds
#: when all is well and a chunk's duration (milliseconds) when it is not.
BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)


class StageTimes:
    """Durations of one stage: counts per bucket (the last: above 1 s), sum, count."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds

    def as_dict(self) -> dict:
        """``le``: cumulative counts at each bound (Prometheus' buckets), ``count``,
        ``sum`` in seconds."""
        cumulative, total = [], 0
        for bound, n in zip(BUCKETS, self.counts, strict=False):
            total += n
            cumulative.append([bound, total])
        return {"le": cumulative, "count": sum(self.counts), "sum": self.sum}
