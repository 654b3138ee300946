"""The multi-GPU segment plan (pipeline/multi_gpu_fold.plan_segments), on the CPU.

Checked against what one overlap-save stream makes: the segments' outputs tile
[0, nout) exactly, each segment's input is its outputs plus the lead-in, and
frames of a segment coincide with the single stream's frames.
"""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.dsp.dedisperse import Dedisperser, StreamingOverlapSave
from voltstream.errors import ConfigError
from voltstream.pipeline.multi_gpu_fold import plan_segments


def single_stream_outputs(nsamp, head, tail, step):
    return max(0, (nsamp - head - tail) // step) * step


@pytest.mark.parametrize("seed", range(40))
def test_segments_tile_the_single_stream_outputs(seed):
    rng = np.random.default_rng(seed)
    step = int(rng.integers(1, 500))
    head, tail = int(rng.integers(0, 300)), int(rng.integers(0, 300))
    nsamp = int(rng.integers(0, 20000))
    nworkers = int(rng.integers(1, 7))
    seg_len = None if seed % 3 == 0 else int(rng.integers(1, 5000))
    segs = plan_segments(nsamp, head, tail, step, nworkers, seg_len)
    nout = single_stream_outputs(nsamp, head, tail, step)
    covered = np.zeros(nout, dtype=np.int64)
    for k, s in enumerate(segs):
        assert s.index == k and s.worker == k % nworkers
        assert s.out_start % step == 0 and s.out_stop > s.out_start
        assert s.in_start == s.out_start and s.in_stop == s.out_stop + head + tail
        assert 0 <= s.in_start and s.in_stop <= nsamp
        # A stream fed exactly this input makes exactly these outputs.
        assert (s.in_stop - s.in_start - head - tail) // step * step == s.out_stop - s.out_start
        covered[s.out_start : s.out_stop] += 1
        if k < len(segs) - 1:
            assert (s.out_stop - s.out_start) % step == 0
    assert np.all(covered == 1), "a gap or an overlap in the outputs"
    if nout == 0:
        assert segs == []
    if seg_len is None and segs:
        assert len(segs) <= nworkers


def test_segments_round_up_to_the_step():
    segs = plan_segments(10_000, 30, 20, 100, 3, 250)
    assert [s.out_stop - s.out_start for s in segs[:-1]] == [300] * (len(segs) - 1)
    assert segs[-1].out_stop == (10_000 - 50) // 100 * 100


def test_segment_outputs_equal_the_single_stream():
    """Overlap-save on each segment's input gives the single stream's samples."""
    rng = np.random.default_rng()
    dd = Dedisperser(0.5, [1400.0, 1404.0], 4.0, nfft=512)
    nsamp = 5 * dd.nfft + int(rng.integers(0, 400))
    x = rng.standard_normal((2, 1, nsamp)) + 1j * rng.standard_normal((2, 1, nsamp))
    whole, _ = StreamingOverlapSave(dd.response, dd.discard_head, dd.discard_tail).process(x)
    segs = plan_segments(nsamp, dd.discard_head, dd.discard_tail, dd.step, 2, dd.step + 1)
    assert len(segs) > 2
    parts = []
    for s in segs:
        ols = StreamingOverlapSave(dd.response, dd.discard_head, dd.discard_tail)
        y, _ = ols.process(x[..., s.in_start : s.in_stop])
        assert y.shape[-1] == s.out_stop - s.out_start
        parts.append(y)
    np.testing.assert_array_equal(np.concatenate(parts, axis=-1), whole)


@pytest.mark.parametrize(
    "args",
    [
        (100, 1, 1, 0, 1, None),
        (100, -1, 1, 5, 1, None),
        (100, 1, 1, 5, 0, None),
        (100, 1, 1, 5, 1, 0),
    ],
)
def test_bad_plans_are_refused(args):
    with pytest.raises(ConfigError):
        plan_segments(*args)
