"""The filterbank's quantiser (search/quantise.py) against its own definition, written
out here in float64: code = clip(rint((x - mean) / scale) + 128, 0, 255), scale =
std / 16, the statistics moving halfway to each row's own; lost samples at 128. It
computes in the samples' float32 (fast enough for the live consumer thread): a code
may differ by one from the float64 one where the two round a near-tie apart (12 of
65 536 here, the same before the float32 work array: the statistics' own float32
sums)."""

import numpy as np
import pytest

from voltstream.search.quantise import RunningQuantiser


def _reference_rows(rows_list, valid_list):
    mean = var = None
    out = []
    for rows, valid in zip(rows_list, valid_list, strict=True):
        x = rows[valid].astype(np.float64)
        m, v = x.mean(axis=0), x.var(axis=0)
        mean, var = (m, v) if mean is None else (mean + (m - mean) / 2, var + (v - var) / 2)
        scale = np.sqrt(var) / 16
        codes = np.rint((rows.astype(np.float64) - mean) / scale) + 128
        codes[~valid] = 128
        clipped = int(((codes < 0) | (codes > 255)).sum())
        out.append((np.clip(codes, 0, 255).astype(np.uint8), scale, mean - 128 * scale, clipped))
    return out


def test_codes_scales_and_offsets_follow_the_float64_definition():
    rng = np.random.default_rng(5)
    rows_list, valid_list = [], []
    for k in range(4):
        rows = (rng.standard_normal((512, 2, 64)) * (2 + k) + 40).astype(np.float32)
        rows[7, 0, 3] = 1e4  # clipped high
        rows[9, 1, 5] = -1e4  # clipped low
        valid = rng.random(512) > 0.1
        rows_list.append(rows)
        valid_list.append(valid)
    q = RunningQuantiser(2, 64)
    got = [q.row(r, v) for r, v in zip(rows_list, valid_list, strict=True)]
    want = _reference_rows(rows_list, valid_list)
    clipped = 0
    for (data, scale, offset), (codes, wscale, woffset, wclipped), valid in zip(
        got, want, valid_list, strict=True
    ):
        assert data.dtype == np.uint8 and data.shape == codes.shape
        diff = np.abs(data.astype(int) - codes.astype(int))
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff > 0).sum()
        assert (data[~valid] == 128).all()
        np.testing.assert_allclose(scale, wscale, rtol=1e-5)
        np.testing.assert_allclose(offset, woffset, rtol=1e-5)
        clipped += wclipped
    assert q.clipped == clipped >= 8  # the two planted outliers in each of four rows


@pytest.mark.parametrize("all_valid", [True, False])
def test_float32_rows_keep_their_samples_and_lost_ones_get_the_mean(all_valid):
    rng = np.random.default_rng(6)
    rows = rng.standard_normal((64, 1, 8)).astype(np.float32) + 3
    valid = np.ones(64, bool) if all_valid else rng.random(64) > 0.3
    q = RunningQuantiser(1, 8, nbits=32)
    data, scale, offset = q.row(rows, valid)
    np.testing.assert_array_equal(data[valid], rows[valid])
    mean = rows[valid].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(data[~valid], np.broadcast_to(mean, data[~valid].shape), rtol=1e-6)
    assert (scale == 1).all() and (offset == 0).all()
