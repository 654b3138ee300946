"""The row merger of issue 16 (voltstream/cluster/merge.py): nodes' subband rows joined
into whole-band rows in frequency and time order, with the completion rules (complete,
lag, deadline), zero weights for a missing node, rejoining, and every bad input counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.cluster.merge import NodeRow, RowMerger, Subband
from voltstream.errors import ConfigError

NPOL, NBIN, NCH = 2, 8, 4
# Four subbands of 4 channels, given out of frequency order; node "d" is a lower
# sideband (its channels run down from 1431 MHz).
SUBBANDS = [
    Subband("c", 1416.0, 1.0, NCH),
    Subband("a", 1400.0, 1.0, NCH),
    Subband("d", 1431.0, -1.0, NCH),
    Subband("b", 1408.0, 1.0, NCH),
]


def whole_band(k: int) -> tuple[np.ndarray, np.ndarray]:
    """A row of the whole band whose every value names its (k, pol, freq, bin)."""
    freqs = np.sort(np.concatenate([s.freqs() for s in SUBBANDS]))
    data = (
        k * 1e6
        + np.arange(NPOL)[:, None, None] * 1e5
        + freqs[None, :, None] * 10
        + np.arange(NBIN)[None, None, :]
    )
    return data, freqs


def node_row(s: Subband, k: int) -> NodeRow:
    """Node ``s``'s part of `whole_band(k)`, in the node's own channel order."""
    data, freqs = whole_band(k)
    idx = [int(np.flatnonzero(freqs == f)[0]) for f in s.freqs()]
    return NodeRow(s.node, k, data[:, idx, :], np.full((s.nchan, NBIN), k + 1),
                   np.full(s.nchan, 10 + k))  # fmt: skip


def merger(**kw) -> RowMerger:
    return RowMerger(SUBBANDS, NPOL, NBIN, **kw)


def test_rows_are_the_whole_band_in_frequency_order_whatever_the_arrival_order():
    m = merger()
    out = []
    for k in (1, 0, 2):  # row 1's parts arrive before row 0's
        for s in reversed(SUBBANDS):
            out += m.add(node_row(s, k))
    assert [r.k for r in out] == [0, 1, 2]
    for r in out:
        data, freqs = whole_band(r.k)
        np.testing.assert_array_equal(r.freqs, freqs)
        np.testing.assert_array_equal(r.sums, data)
        assert np.all(r.hits == r.k + 1) and np.all(r.offered == 10 + r.k)
        assert r.missing == () and r.reason == "complete"
    assert m.counters.rows_written == m.counters.rows_complete == 3


def test_a_missing_node_is_weighted_zero_by_the_lag_rule_and_not_waited_for_again():
    m = merger(lag=2)
    live = [s for s in SUBBANDS if s.node != "b"]
    b = next(s for s in SUBBANDS if s.node == "b")
    out = []
    for k in range(2):
        for s in live:
            out += m.add(node_row(s, k))
    assert out == []  # row 0 waits for b
    out += m.add(node_row(live[0], 2))  # a node is at row 2 = 0 + lag: row 0 is final
    # Row 0 by the lag rule; b is absent from then on, so row 1 (every other part in)
    # is final at once instead of waiting for b again.
    assert [r.k for r in out] == [0, 1]
    assert [r.reason for r in out] == ["lag", "complete"]
    idx = np.isin(out[0].freqs, b.freqs())
    for r in out:
        assert r.missing == ("b",)
        assert np.all(r.offered[idx] == 0) and np.all(r.hits[idx] == 0)
        assert np.all(r.sums[:, idx] == 0)
        assert np.all(r.offered[~idx] == 10 + r.k) and np.all(r.hits[~idx] == r.k + 1)
    assert m.counters.missing_by_node == {"c": 0, "a": 0, "d": 0, "b": 2}
    assert m.counters.rows_complete == 0
    # b comes back with row 2 (a restarted task): waited for again, its weights back.
    out = m.add(node_row(b, 2))
    assert out == []  # row 2 still lacks two nodes
    out = m.add(node_row(live[1], 2)) + m.add(node_row(live[2], 2))
    assert [x.k for x in out] == [2] and out[0].missing == () and out[0].reason == "complete"


def test_hello_rejoins_at_a_boundary_without_waiting_for_rows_before_it():
    m = merger()
    b = next(s for s in SUBBANDS if s.node == "b")
    others = [s for s in SUBBANDS if s.node != "b"]
    for s in others:
        m.add(node_row(s, 0))
    out = m.add(node_row(others[0], 2))  # lag: row 0 final without b, b absent
    assert [r.k for r in out] == [0]
    m.hello("b", 3)  # restarted, its first row will be 3
    out = []
    for s in others[1:]:
        out += m.add(node_row(s, 1))
    out += m.add(node_row(others[0], 1))
    assert [r.k for r in out] == [1] and out[0].missing == ("b",)  # not waited for: k < 3
    for s in others:
        out += m.add(node_row(s, 2)) if s is not others[0] else []
    assert [r.k for r in out] == [1, 2]
    for s in others:
        out += m.add(node_row(s, 3))
    assert [r.k for r in out] == [1, 2]  # row 3 waits for b
    out += m.add(node_row(b, 3))
    assert [r.k for r in out][-1] == 3 and out[-1].missing == ()


def test_the_deadline_closes_a_row_when_every_node_stops():
    now = [0.0]
    m = merger(deadline_s=1.5, clock=lambda: now[0])
    for s in SUBBANDS[:3]:
        m.add(node_row(s, 0))
    now[0] = 1.0
    assert m.tick() == []
    now[0] = 1.6
    out = m.tick()
    assert [r.k for r in out] == [0] and out[0].reason == "deadline"
    assert out[0].missing == (SUBBANDS[3].node,)


def test_late_duplicate_and_malformed_rows_are_counted_never_applied():
    m = merger()
    for s in SUBBANDS:
        m.add(node_row(s, 0))
    assert m.next_k == 1
    assert m.add(node_row(SUBBANDS[0], 0)) == []  # row 0 is written: late
    first = node_row(SUBBANDS[0], 1)
    m.add(first)
    again = node_row(SUBBANDS[0], 1)
    again.sums = again.sums + 1
    m.add(again)  # a rerun's resend: the first copy stands
    bad = [
        NodeRow("nobody", 1, first.sums, first.hits, first.offered),
        NodeRow("a", 1, first.sums[:, :2], first.hits, first.offered),
        NodeRow("a", 1, first.sums, first.hits[:, 1:], first.offered),
        NodeRow("a", 1, first.sums, first.hits, first.offered[:2]),
        NodeRow("a", -1, first.sums, first.hits, first.offered),
    ]
    for row in bad:
        assert m.add(row) == []
    out = []
    for s in SUBBANDS[1:]:
        out += m.add(node_row(s, 1))
    assert [r.k for r in out] == [1]
    np.testing.assert_array_equal(out[0].sums, whole_band(1)[0])
    c = m.counters
    assert (c.late, c.duplicate, c.malformed) == (1, 1, 5)


def test_finish_writes_what_is_pending_with_missing_parts_at_zero_weight():
    m = merger()
    m.add(node_row(SUBBANDS[0], 0))
    m.add(node_row(SUBBANDS[1], 1))
    out = m.finish()
    assert [r.k for r in out] == [0, 1] and {r.reason for r in out} == {"finish"}
    assert len(out[0].missing) == 3 and len(out[1].missing) == 3
    assert m.finish() == []


def test_subband_plans_that_cannot_be_merged_are_refused():
    with pytest.raises(ConfigError, match="once"):
        RowMerger([SUBBANDS[0], SUBBANDS[0]], NPOL, NBIN)
    with pytest.raises(ConfigError, match="share a frequency"):
        RowMerger([Subband("x", 1400.0, 1.0, 4), Subband("y", 1403.0, 1.0, 4)], NPOL, NBIN)
    with pytest.raises(ConfigError, match="lag"):
        RowMerger(SUBBANDS, NPOL, NBIN, lag=0)
