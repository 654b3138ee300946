"""Several GPU workers (pipeline/multi_gpu_fold.py) against the CPU fold and one engine.

On one GPU the path runs as two workers (threads, own streams and engines) on
device 0, with segments shorter than the input so each worker folds several,
and the lead-in of every segment re-read. Fresh random data per test.
"""

from __future__ import annotations

import pytest

from voltstream.fold.gpu import gpu_available
from voltstream.fold.reference import FoldSettings
from voltstream.io.polyco import ConstantPeriod
from voltstream.pipeline.fold import fold_file
from voltstream.pipeline.gpu_file_fold import fold_file_gpu
from voltstream.pipeline.multi_gpu_fold import fold_file_multi_gpu

from .test_kernels import (
    BlocksOnly,
    MemReader,
    compare_archives,
    compare_lost_packet_fold,
    lost_packet_polyco_case,
    random_voltages,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert gpu_available(), "no CUDA device visible to CuPy"
    return cupy


@pytest.mark.parametrize("dm,bw", [(26.833, -8.0), (120.0, 8.0)])
@pytest.mark.parametrize("variant", ["fused", "naive"])
def test_two_workers_raw_reader_match_cpu(cp, dm, bw, variant):
    rng, obs, dd, raw = random_voltages(
        8, bw, dm, lambda dd, rng: 6 * dd.nfft + int(rng.integers(1000, 5000))
    )
    n = len(raw)
    pred = ConstantPeriod(float(rng.uniform(1e-3, 3e-3)), obs.start_mjd, obs.start_sec)
    tsub = n * obs.tsamp_s / 3.7
    cpu = fold_file(MemReader(obs, raw), FoldSettings(dm, pred, 128, tsub, "AA+BB"))
    multi = fold_file_multi_gpu(
        MemReader(obs, raw),
        FoldSettings(dm, pred, 128, tsub, "AA+BB", block_samples=dd.step + 1231),
        gpus=[0],
        workers_per_gpu=2,
        segment_samples=dd.step * 2 + 5,  # rounded up to 3 steps: several segments each
        variant=variant,
    )
    compare_archives(multi, cpu)
    one = fold_file_gpu(
        MemReader(obs, raw), FoldSettings(dm, pred, 128, tsub, "AA+BB"), variant=variant
    )
    compare_archives(multi, one)
    assert "2 workers" in " ".join(multi.history)


@pytest.mark.parametrize("variant", ["fused", "naive"])
def test_two_workers_lost_packets_polyco_match_cpu(cp, variant):
    obs, dm, dd, raw, valid, pred, tsub = lost_packet_polyco_case(nffts=6, nlost=8)
    cpu = fold_file(BlocksOnly(obs, raw, valid), FoldSettings(dm, pred, 256, tsub, "AABBCRCI"))
    multi = fold_file_multi_gpu(
        BlocksOnly(obs, raw, valid),
        FoldSettings(dm, pred, 256, tsub, "AABBCRCI", block_samples=dd.step + 77),
        gpus=1,
        workers_per_gpu=2,
        segment_samples=dd.step * 2,
        variant=variant,
    )
    compare_lost_packet_fold(multi, cpu, valid)


def test_more_workers_than_segments(cp):
    dm = 3.0
    # Two frames: two segments at most.
    _, obs, dd, raw = random_voltages(4, 8.0, dm, lambda dd, _: dd.nfft + dd.step + 17)
    pred = ConstantPeriod(0.0017, obs.start_mjd, obs.start_sec)
    cpu = fold_file(MemReader(obs, raw), FoldSettings(dm, pred, 64, None))
    multi = fold_file_multi_gpu(
        MemReader(obs, raw), FoldSettings(dm, pred, 64, None), gpus=[0], workers_per_gpu=4
    )
    compare_archives(multi, cpu)


def test_every_visible_gpu_matches_cpu(cp):
    """One worker per visible GPU (two on device 0 when it is alone), lost samples too."""
    obs, dm, dd, raw, valid, pred, tsub = lost_packet_polyco_case(nffts=8, nlost=5)
    ndev = cp.cuda.runtime.getDeviceCount()
    gpus = list(range(min(ndev, 4)))
    per_gpu = 2 if ndev == 1 else 1
    lossy = fold_file(BlocksOnly(obs, raw, valid), FoldSettings(dm, pred, 128, tsub, "AA+BB"))
    whole = fold_file(MemReader(obs, raw), FoldSettings(dm, pred, 128, tsub, "AA+BB"))
    for reader, want in ((MemReader(obs, raw), whole), (BlocksOnly(obs, raw, valid), lossy)):
        multi = fold_file_multi_gpu(
            reader,
            FoldSettings(dm, pred, 128, tsub, "AA+BB", block_samples=dd.step + 777),
            gpus=gpus,
            workers_per_gpu=per_gpu,
            segment_samples=dd.step * 2,
        )
        compare_archives(multi, want)
        history = " ".join(multi.history)
        assert f"{len(gpus) * per_gpu} workers" in history
        assert all(f"GPU {g} x{per_gpu}" in history for g in gpus)
