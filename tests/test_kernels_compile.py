"""CPU checks of the GPU path: every kernel compiles with NVRTC (no GPU needed),
and the host-side overlap-save/validity arithmetic of fold/gpu.py matches the
NumPy reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repo_script import load_script
from voltstream.dsp import cuda
from voltstream.dsp.dedisperse import Dedisperser, StreamingOverlapSave
from voltstream.fold import kernels as fold_kernels
from voltstream.fold.gpu import gpu_available, output_valid
from voltstream.fold.gpu_ingest import ValidCarry, gpu_chunk_samples
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.observation import Observation

ROOT = Path(__file__).resolve().parents[1]


def _check_script():
    return load_script("scripts/check_kernels.py")


def test_there_are_kernels():
    names = {p.name for p in cuda.kernel_sources()}
    assert {"unpack.cu", "chirp.cu", "fold.cu"} <= names


@pytest.mark.parametrize("path", cuda.kernel_sources(), ids=lambda p: p.name)
def test_kernel_compiles_with_nvrtc(path):
    ck = _check_script()
    nvrtc = ck.Nvrtc(ck.find_nvrtc())
    ok, log, ptx = nvrtc.compile(
        cuda.kernel_source(path.name),
        path.name,
        [*cuda.NVRTC_OPTIONS, "--gpu-architecture=compute_90"],
    )
    assert ok, log
    assert ptx > 0


@pytest.mark.parametrize(
    "defines",
    [{"SAMPLE_KIND": k} for k in range(5)]
    + [{"NPOL": 1, "MODE": 0}]
    + [{"NPOL": 2, "MODE": m} for m in range(4)],
)
def test_every_variant_compiles(defines):
    ck = _check_script()
    nvrtc = ck.Nvrtc(ck.find_nvrtc())
    name = "unpack.cu" if "SAMPLE_KIND" in defines else "fold.cu"
    opts = [*cuda.NVRTC_OPTIONS, "--gpu-architecture=compute_90"]
    opts += [f"-D{k}={v}" for k, v in defines.items()]
    ok, log, _ = nvrtc.compile(cuda.kernel_source(name), name, opts)
    assert ok, log


def test_broken_kernel_fails_compile():
    ck = _check_script()
    nvrtc = ck.Nvrtc(ck.find_nvrtc())
    ok, log, _ = nvrtc.compile('extern "C" __global__ void k() { nope; }', "bad.cu", [])
    assert not ok and "nope" in log


def test_check_script_fails_without_kernels(monkeypatch, capsys):
    ck = _check_script()
    monkeypatch.setattr(ck, "kernel_sources", lambda: [])
    assert ck.main([]) == 1
    assert ck.main.__module__ == "check_kernels"


def test_gpu_available_is_false_without_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert gpu_available() is False


@pytest.mark.parametrize("dm,chunk", [(26.833, 5000), (3.0, 777), (150.0, 100000)])
def test_plan_blocks_and_validity_match_reference(dm, chunk):
    rng = np.random.default_rng()
    obs = Observation(nchan=4, npol=1, freq_mhz=1400.0, bw_mhz=-4.0, tsamp_s=1e-6)
    plan = FoldPlan(obs, FoldSettings(dm, None, 2, None))
    chunk = gpu_chunk_samples(plan, chunk)
    dd = Dedisperser(dm, obs.chan_freqs_mhz, obs.chan_bw_mhz)
    ref = StreamingOverlapSave(np.ones((1, dd.nfft)), dd.discard_head, dd.discard_tail)
    vc = ValidCarry(plan.overlap)
    carry_len = 0
    for _ in range(6):
        n = int(rng.integers(1, 2 * chunk))
        valid = rng.random(n) > 0.002
        x = rng.standard_normal((1, 1, n))
        out, ref_valid = ref.process(x, valid)
        nblock = plan.blocks(carry_len, n)
        assert nblock * plan.step == out.shape[-1]
        got = vc.step(valid, n, nblock * plan.step)
        want = ref_valid if not ref_valid.all() else None
        if want is None:
            assert got is None or got.all()
        else:
            np.testing.assert_array_equal(got, want)
        carry_len = carry_len + n - nblock * plan.step
        assert carry_len == ref._carry.shape[-1] < plan.nfft
    assert plan.max_blocks(chunk) >= plan.blocks(plan.nfft - 1, chunk)


def test_output_valid_rule():
    v = np.ones(20, dtype=bool)
    v[7] = False
    got = output_valid(v, 10, 3)
    # output k needs inputs k..k+3: outputs 4..7 touch sample 7.
    np.testing.assert_array_equal(np.nonzero(~got)[0], [4, 5, 6, 7])


def test_templates_reject_bad_parameters():
    with pytest.raises(Exception, match="unpack reads"):
        fold_kernels.UnpackTemplate(np.uint8, 2)
    with pytest.raises(Exception, match="2 polarisations"):
        fold_kernels.FoldTemplate(1, "IQUV")
