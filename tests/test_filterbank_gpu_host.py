"""CPU checks of the GPU filterbank (search/gpu_filterbank.py): its host side
(search/gpu_steps.py: framing, lost outputs, counters) against the NumPy reference on
the same chunks, and every variant of its kernels compiling with NVRTC (no GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repo_script import load_script
from voltstream.dsp import cuda
from voltstream.observation import Observation
from voltstream.search.filterbank import FilterbankPlan, FilterbankReference, FilterbankSettings
from voltstream.search.gpu_steps import FilterbankSteps
from voltstream.search.kernels import FilterbankTemplate

ROOT = Path(__file__).resolve().parents[1]
OBS = Observation(nchan=4, npol=2, freq_mhz=1400.0, bw_mhz=-4.0, tsamp_s=1e-6)


@pytest.mark.parametrize(
    "m,tsamp,dm",
    [(1, None, None), (8, 32e-6, None), (16, None, 30.0), (4, 12e-6, 5.0), (64, 64e-6, None)],
)
def test_steps_frame_and_flag_outputs_as_the_reference(m, tsamp, dm):
    rng = np.random.default_rng(int(m + (dm or 0)))
    plan = FilterbankPlan(OBS, FilterbankSettings(m, tsamp, "I", 8, dm))
    ref, steps = FilterbankReference(plan), FilterbankSteps(plan)
    carried = 0
    for i in range(8):
        n = int(rng.integers(1, 3 * plan.span + 5000))
        valid = None if i % 3 == 0 else rng.random(n) > 0.001
        if i == 5:
            valid = np.zeros(n, bool)  # a gap
        x = rng.standard_normal((n, 4, 2)) + 1j * rng.standard_normal((n, 4, 2))
        out, ok = ref.feed(x.astype(np.complex64), valid)
        st = steps.step(n, valid)
        assert st.k == out.shape[0] and st.nout == st.k * plan.span
        np.testing.assert_array_equal(st.out_valid, ok)
        assert st.carry_len == carried and 0 <= st.carry_len + st.nsrc - st.nout < plan.span
        assert st.gap == (dm is None and valid is not None and not valid.any())
        carried = st.carry_len + st.nsrc - st.nout
        if dm is not None:
            assert steps.ols_carry == ref.ols._carry.shape[-1] < steps.nfft
            assert st.nsrc == st.nblock * steps.step_len
        else:
            assert (st.nblock, st.nsrc) == (1, n)
    for name in ("samples_in", "lost_in", "samples_out", "lost_out"):
        assert getattr(steps, name) == getattr(ref, name), name
    assert ref.lost_out > 0


def test_max_src_bounds_every_chunk():
    plan = FilterbankPlan(OBS, FilterbankSettings(16, None, "I", 8, 30.0))
    steps = FilterbankSteps(plan)
    for n in (1, 777, 5000, 65536):
        worst = max(steps.blocks(c, n) for c in range(steps.nfft)) * steps.step_len
        assert steps.max_src(n) == worst


def _nvrtc():
    mod = load_script("scripts/check_kernels.py")
    return mod.Nvrtc(mod.find_nvrtc())


@pytest.mark.parametrize("variant", FilterbankTemplate.VARIANTS, ids=str)
def test_every_filterbank_variant_compiles(variant):
    opts = [*cuda.NVRTC_OPTIONS, "--gpu-architecture=compute_90"]
    opts += [f"-D{k}={v}" for k, v in variant]
    ok, log, ptx = _nvrtc().compile(cuda.kernel_source("filterbank.cu"), "filterbank.cu", opts)
    assert ok and ptx > 0, log


def test_a_one_pol_detection_other_than_intensity_is_refused():
    src = cuda.kernel_source("filterbank.cu")
    ok, log, _ = _nvrtc().compile(src, "filterbank.cu", ["-DNPOL=1", "-DMODE=2"])
    assert not ok and "two polarisations" in log
