"""The F-engine plan (``fengine/plan.py``) and the engines that are given it.

Both engines compose one ``FEnginePlan`` rather than each working out the windows
and slots: so the plan is checked here against values computed from first principles
(not by the plan's code), and each engine's planning is checked to follow the plan
it holds. The GPU engine's host planning (``SlotPlanner``) is pure NumPy and is held
to the reference on the CPU; its kernels are compared in tests/gpu.
"""

import math

import numpy as np
import pytest

from voltstream.dsp.delay import DelayModel
from voltstream.errors import ConfigError
from voltstream.fengine.plan import FEnginePlan, SpectrumWindows
from voltstream.fengine.reference import FEngineReference, FEngineState
from voltstream.fengine.slots import SlotPlanner

FS = 1e6
NCHAN, TAPS, SPH = 8, 4, 6  # 16 samples a spectrum, 96 a heap slot, 64-sample windows


def make_plan(**kw):
    return FEnginePlan.make(NCHAN, TAPS, SPH, sample_rate_hz=FS, **kw)


def test_the_plan_matches_first_principles():
    plan = make_plan(max_delay_samples=40, n_substreams=2)
    step = 2 * NCHAN  # critically sampled: one spectrum per 2 * nchan real samples
    assert (plan.step, plan.window_len) == (step, TAPS * step)
    assert plan.layout.samples_per_heap == SPH * step
    np.testing.assert_allclose(plan.chan_freqs_hz, [k * FS / step for k in range(NCHAN)])
    # Hann-windowed sinc, written out term by term, unit energy.
    L = TAPS * step
    w = [
        (0.5 - 0.5 * math.cos(2 * math.pi * (n + 0.5) / L))
        * (1.0 if n == (L - 1) / 2 else np.sinc((n - (L - 1) / 2) / step))
        for n in range(L)
    ]
    w = np.array(w) / math.sqrt(sum(x * x for x in w))
    np.testing.assert_allclose(plan.weights, w, rtol=1e-12, atol=1e-15)
    # The first slot: the smallest whose every spectrum may be delayed by 40 samples.
    for ts in (0, 1, 55, 56, 57, 96 * 7 - 40, 96 * 7 - 39, 10**12 + 3):
        want = next(s for s in range(ts // 96, ts // 96 + 3) if s * 96 - 40 >= ts)
        assert plan.first_slot(ts) == want, ts
    assert plan.keep_from(5) == 5 * 96 - 40
    np.testing.assert_array_equal(
        plan.spectrum_times(np.array([3, 9])),
        [3 * 96 + k * step for k in range(SPH)] + [9 * 96 + k * step for k in range(SPH)],
    )


def test_the_plans_windows_follow_each_polarisations_delay():
    plan = make_plan(max_delay_samples=30)
    # pol 0: 12.4 samples (coarse 12); pol 1: 30.5 samples then growing past 30.
    models = [DelayModel(12.4 / FS, phase_rad=0.5), DelayModel(30.5 / FS, delay_rate=0.01)]
    win = plan.windows(np.array([2, 3]), models)
    assert isinstance(win, SpectrumWindows) and win.starts.shape == (2, 2 * SPH)
    for i, slot_k in enumerate((s, k) for s in (2, 3) for k in range(SPH)):
        t = slot_k[0] * 96 + slot_k[1] * 16
        for p, (d0, rate) in enumerate(((12.4, 0.0), (30.5, 0.01))):
            delay = d0 + rate * t  # samples
            coarse = math.floor(delay + 0.5)
            assert win.starts[p, i] == t - coarse
            assert win.residual_s[p, i] == pytest.approx((delay - coarse) / FS, abs=1e-15)
            assert win.out_of_range[p, i] == (coarse > 30)
    np.testing.assert_allclose(win.phase_rad[0], 0.5)
    assert win.out_of_range[1].any() and not win.out_of_range[0].any()


def test_a_plan_is_validated():
    with pytest.raises(ConfigError, match="max_delay_samples"):
        make_plan(max_delay_samples=-1)
    with pytest.raises(ConfigError, match="sample_rate_hz"):
        FEnginePlan.make(NCHAN, TAPS, SPH, sample_rate_hz=0)
    with pytest.raises(ConfigError, match="one delay model per polarisation"):
        make_plan().windows(np.array([0]), [DelayModel()])
    with pytest.raises(ConfigError, match="not both"):
        FEngineReference(NCHAN, TAPS, SPH, plan=make_plan())
    with pytest.raises(ConfigError, match="or a plan"):
        FEngineReference(NCHAN, TAPS)


class ShiftedPlan(FEnginePlan):
    """A plan with a bug: every window one spectrum late. Engines given it must follow
    it (so a wrong plan shows in their output, where the first-principles test sees it)."""

    def windows(self, slots, delay_models):
        w = super().windows(slots, delay_models)
        return SpectrumWindows(w.starts + self.step, w.residual_s, w.phase_rad, w.out_of_range)


def shifted(plan):
    return ShiftedPlan(*(getattr(plan, f) for f in plan.__dataclass_fields__))


def blocks(rng, n=6, size=160):
    """Blocks with a gap and lost samples, so flags and skipped heaps happen."""
    t = 1000
    for i in range(n):
        x = rng.integers(-2000, 2000, (2, size)).astype(np.float64)
        ok = np.ones((2, size), dtype=bool)
        if i == 2:
            ok[1, 40:45] = False
        yield x, t, ok
        t += size + (32 if i == 3 else 0)


def run_reference(plan, models):
    ref = FEngineReference(plan=plan)
    assert ref.plan is plan
    for p, m in enumerate(models):
        ref.set_delay_model(p, m)
    heaps = []
    for x, t, ok in blocks(np.random.default_rng(7)):
        heaps += ref.process(x, t, ok)
    return ref, heaps


def run_planner(plan, models):
    """The GPU engine's host side, fed as GpuFEngine._submit feeds it."""
    slots = SlotPlanner(plan)
    sent, spectra, flagged, starts = [], 0, 0, []
    for x, t, ok in blocks(np.random.default_rng(7)):
        slots.add(t, x.shape[1], ok)
        planned = slots.plan_slots(models)
        if planned is not None:
            bad = planned.flagged.any(axis=0).reshape(len(planned.slots), SPH)
            spectra += bad.size
            flagged += int(bad.sum())
            sent += [s for s, b in zip(planned.slots, bad, strict=True) if not b.any()]
            starts.append(planned.starts)
        slots.trim()
    return sent, spectra, flagged, np.concatenate(starts, axis=1)


MODELS = [DelayModel(3.2 / FS, delay_rate=0.004), DelayModel(11.7 / FS, phase_rad=1.0)]


@pytest.mark.parametrize("bug", [False, True])
def test_the_gpu_host_planning_follows_the_plan_as_the_reference_does(bug):
    plan = make_plan(max_delay_samples=24)
    if bug:
        plan = shifted(plan)
    ref, heaps = run_reference(plan, MODELS)
    sent, spectra, flagged, _ = run_planner(plan, MODELS)
    assert ref.counters.spectra == spectra > 0
    assert ref.counters.flagged_spectra == flagged > 0
    assert sorted({h.timestamp for h in heaps}) == [s * 96 for s in sent]
    assert ref.counters.heaps_made == len(sent) > 0


def test_each_engine_computes_what_its_plan_says():
    """The same input through a right and a wrong plan: the reference's heaps (and the
    GPU planner's slots) differ, so neither engine plans on its own behind the plan."""
    right = make_plan(max_delay_samples=24)
    wrong = shifted(right)
    _, good = run_reference(right, MODELS)
    _, bad = run_reference(wrong, MODELS)
    assert [h.timestamp for h in good] and [h.timestamp for h in bad]
    same = {h.timestamp for h in good} & {h.timestamp for h in bad}
    pairs = [
        (g, b)
        for g in good
        for b in bad
        if g.timestamp == b.timestamp in same and g.substream == b.substream
    ]
    assert pairs and all(not np.array_equal(g.payload, b.payload) for g, b in pairs)
    starts = run_planner(right, MODELS)[3]
    np.testing.assert_array_equal(run_planner(wrong, MODELS)[3], starts + right.step)


def test_the_engines_hold_a_plan_and_do_not_plan_themselves():
    """Composition, not inheritance: the plan is an object both engines are given
    (``plan``); no engine class, nor the GPU engine's host planner, defines what the
    plan computes."""
    from voltstream.fengine.gpu import GpuFEngine  # imports without a GPU

    assert not issubclass(FEngineState, FEnginePlan)
    planning = {"first_slot", "keep_from", "windows", "spectrum_times", "weights"}
    for cls in (GpuFEngine, FEngineReference, FEngineState, SlotPlanner):
        assert not planning & set(vars(cls)), cls
    ref = FEngineReference(NCHAN, TAPS, SPH, sample_rate_hz=FS)
    assert isinstance(ref.plan, FEnginePlan) and ref.layout is ref.plan.layout
