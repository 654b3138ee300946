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


def far(p):
    return p + b"far"


def mixed(seed):
    rates = {Drop(): 0.05, Duplicate(6): 0.05, Delay(6): 0.1, Truncate(): 0.05,
             Garbage(): 0.05, Foreign(far): 0.05}  # fmt: skip
    return FaultPlan(seed, rates=rates)


def test_a_seed_reproduces_the_run_and_counts_match_the_log():
    f = mixed(7).apply(numbered(2000))
    assert mixed(7).apply(numbered(2000)) == f
    assert mixed(8).apply(numbered(2000)).packets != f.packets
    kinds = (Drop, Duplicate, Delay, Truncate, Garbage, Foreign)
    for kind in kinds:
        assert 50 <= f.count(kind) < (250 if kind is Delay else 150), (kind, f.log)
    assert f.seen == 2000 and len(f.log) == sum(f.count(k) for k in kinds)
    assert len(f.packets) == 2000 - f.count(Drop) + f.count(Duplicate) + f.count(Foreign)
    assert sum(p.endswith(b"far") for p in f.packets) == f.count(Foreign)
    assert sum(len(p) == 2 for p in f.packets) == f.count(Truncate)  # half of 4 bytes
    assert sum(len(p) == 5 for p in f.packets) == f.count(Garbage)  # one longer, random
    assert f.lost == f.positions(Drop, Truncate, Garbage)
    assert f.intact == 2000 - len(f.lost)


def test_delays_stay_inside_the_window_and_lose_nothing():
    f = FaultPlan(3, rates={Delay(5): 0.3, Duplicate(5): 0.1}).apply(numbered(1000))
    assert f.count(Delay) > 200 and f.count(Duplicate) > 50, f.log
    got = [struct.unpack(">I", p)[0] for p in f.packets]
    assert sorted(set(got)) == list(range(1000))
    assert len(got) == 1000 + f.count(Duplicate)
    seen = set()
    for p in got:
        if p not in seen:
            seen.add(p)
            # At most 5 packets sent after a delayed one overtake it.
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
    f = FaultPlan(1, rates={Drop(): 1.0}, between=range(2, 5)).apply(numbered(7))
    assert f.packets == [numbered(7)[k] for k in (0, 1, 5, 6)]
    assert f.count(Drop) == 3


@pytest.mark.parametrize(
    "kwargs,says",
    [
        ({"rates": {Drop(): 1.5}}, "not a probability"),
        ({"rates": {Drop(): 0.6, Garbage(): 0.6}}, "add up to"),
        ({"rates": {Delay(0): 0.1}}, "at least 1"),
        ({"at": {3: Foreign()}}, "Foreign.make"),
        ({"rates": {Foreign(): 0.1}}, "Foreign.make"),
    ],
)
def test_bad_plans_are_clear_errors(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        FaultPlan(**kwargs)


def test_rows_are_one_array_for_the_paced_sender():
    f = FaultPlan(at={1: Drop(), 2: Duplicate()}).apply(numbered(4))
    rows = f.rows()
    assert rows.dtype.name == "uint8" and rows.shape == (4, 4)
    assert [r.tobytes() for r in rows] == [numbered(4)[k] for k in (0, 2, 2, 3)]
    with pytest.raises(ConfigError, match="one by one"):
        FaultPlan(at={0: Truncate()}).apply(numbered(2)).rows()
