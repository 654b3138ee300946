"""voltstream.testing: the fault plan the capture tests inject their faults with."""

import struct

import pytest

from voltstream.errors import ConfigError
from voltstream.testing import (
    Delay,
    Drop,
    Duplicate,
    FaultPlan,
    Foreign,
    Garbage,
    Truncate,
)


def numbered(n):
    return [struct.pack(">I", i) for i in range(n)]


def mixed(seed):
    return FaultPlan(seed, drop=0.05, duplicate=0.05, reorder=0.1, window=6, truncate=0.05,
                     garbage=0.05, foreign=0.05, make_foreign=lambda p: p + b"far")  # fmt: skip


def test_a_seed_reproduces_the_run_and_counts_match_the_log():
    f = mixed(7).apply(numbered(2000))
    assert mixed(7).apply(numbered(2000)) == f
    assert mixed(8).apply(numbered(2000)).packets != f.packets
    n = f.injected
    counts = [(Drop, n.dropped), (Duplicate, n.duplicated), (Delay, n.delayed),
              (Truncate, n.truncated), (Garbage, n.garbage), (Foreign, n.foreign)]  # fmt: skip
    for kind, count in counts:
        assert len(f.positions(kind)) == count
        assert 50 <= count < (250 if kind is Delay else 150), (kind, n)
    assert n.packets == 2000 and len(f.packets) == n.delivered
    assert n.delivered == 2000 - n.dropped + n.duplicated + n.foreign
    assert sum(p.endswith(b"far") for p in f.packets) == n.foreign
    assert sum(len(p) == 2 for p in f.packets) == n.truncated  # half of 4 bytes
    assert sum(len(p) == 5 for p in f.packets) == n.garbage  # one longer, random
    assert sorted(f.lost) == sorted(f.positions(Drop, Truncate, Garbage))
    assert n.intact == 2000 - len(f.lost)


def test_delays_stay_inside_the_window_and_lose_nothing():
    f = FaultPlan(3, reorder=0.3, window=5, duplicate=0.1).apply(numbered(1000))
    n = f.injected
    assert n.delayed > 200 and n.duplicated > 50, n
    got = [struct.unpack(">I", p)[0] for p in f.packets]
    assert sorted(set(got)) == list(range(1000))
    assert len(got) == 1000 + n.duplicated
    seen = set()
    for p in got:
        if p not in seen:
            seen.add(p)
            # At most `window` packets sent after a delayed one overtake it.
            assert sum(q > p for q in seen) <= 5, p


def test_scripted_faults_land_where_they_are_placed():
    plan = FaultPlan(at={1: Drop(), 2: Delay(2), 4: Duplicate(), 5: Truncate(-1),
                         6: Foreign(lambda p: b"x"), 7: Garbage(lambda p: b"junk")})  # fmt: skip
    f = plan.apply(numbered(9))
    p = numbered(9)
    assert f.packets == [p[0], p[3], p[4], p[4], p[2], p[5][:-1], p[6], b"x", b"junk", p[8]]
    assert [at for at, _ in f.log] == [1, 2, 4, 5, 6, 7]
    assert f.lost == [1, 5, 7]


def test_random_faults_spare_positions_outside_the_range():
    f = FaultPlan(1, drop=1.0, between=range(2, 5)).apply(numbered(7))
    assert f.packets == [numbered(7)[k] for k in (0, 1, 5, 6)]
    assert f.injected.dropped == 3


@pytest.mark.parametrize(
    "kwargs,says",
    [
        ({"drop": 1.5}, "not a probability"),
        ({"drop": 0.6, "garbage": 0.6}, "add up to"),
        ({"reorder": 0.1}, "window"),
        ({"at": {3: Foreign()}}, "make_foreign"),
    ],
)
def test_bad_plans_are_clear_errors(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        FaultPlan(**kwargs)
