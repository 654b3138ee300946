"""A cluster node folding on the GPU (cluster/engines.py `GpuRows`) against the NumPy
node (`CpuRows`) and the one-machine fold of the whole band: the same rows, for a node
from the start and for one that starts late (a rerun after a kill)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from test_cluster_node import (
    NCH,
    NSUB,
    MemoryReader,
    assert_rows_are_the_reference,
    band,
    jobs,
    settings,
)  # tests/: on the path
from voltstream.cluster.merge import NodeRow, RowMerger
from voltstream.cluster.node import NodeFold, subband_of
from voltstream.fold.gpu import gpu_available
from voltstream.pipeline.fold import fold_file
from voltstream.sim.signal import synthesize

pytestmark = pytest.mark.gpu
DM, PERIOD = 30.0, 2e-3


def data_of(whole, seconds, seed):
    return synthesize(whole, seconds, signal="pulsar", dm=DM, period_s=PERIOD, duty=0.05,
                       seed=seed)  # fmt: skip


def rows_of(job, x, valid, first=0, piece=5000):
    nf = NodeFold(job)
    out = []
    for a in range(first, x.shape[0], piece):
        nf.feed(x[a : a + piece], valid[a : a + piece], a)
        out += nf.rows()
    return out + nf.finish(), nf


@pytest.mark.parametrize("bw", [64.0, -64.0])
def test_gpu_node_rows_merge_into_the_whole_band_fold(bw):
    assert gpu_available()
    whole = band(bw)
    x = data_of(whole, 0.06, 11)
    valid = np.ones(x.shape[0], bool)
    valid[9000:9300] = False
    s = settings(whole)
    ref = fold_file(MemoryReader(whole, x, valid), s)
    js = [replace(j, device="gpu") for j in jobs(whole, s)]
    merger = RowMerger([subband_of(j) for j in js], 1, 32, lag=100)
    merged = []
    for i, j in enumerate(js):
        rows, nf = rows_of(j, x[:, i * NCH : (i + 1) * NCH], valid)
        assert nf.counters()["samples_lost"] == 300
        for k, *acc in rows:
            merged += merger.add(NodeRow(j.node, k, *acc))
        merged += merger.bye(j.node, rows[-1][0])
    merged += merger.finish()
    assert_rows_are_the_reference(merged, ref, whole, rtol=2e-4, wtol=1e-9)


def test_a_late_gpu_node_sends_the_rows_of_a_cpu_node_that_ran_from_the_start():
    whole = band(64.0)
    x = data_of(whole, 0.05, 12)
    valid = np.ones(x.shape[0], bool)
    job = jobs(whole, settings(whole))[NSUB - 1]
    sub = x[:, (NSUB - 1) * NCH :]
    full, _ = rows_of(job, sub, valid)
    late, nf = rows_of(replace(job, device="gpu"), sub, valid, first=42000)
    assert nf.first_row == 3 and [r[0] for r in late] == [k for k, *_ in full if k >= 3]
    ref = {k: acc for k, *acc in full}
    for k, sums, hits, offered in late:
        np.testing.assert_array_equal(hits, ref[k][1])
        np.testing.assert_array_equal(offered, ref[k][2])
        np.testing.assert_allclose(sums, ref[k][0], rtol=2e-4)


def test_a_live_gpu_node_takes_the_captures_int8_samples_as_they_are():
    """A live node hands its GPU engine the capture's int8 re/im (no conversion on the
    host): its rows are the CPU node's rows of the same samples."""
    from voltstream.formats import make_format
    from voltstream.sim.signal import quantize_int8

    whole = band(64.0)
    job = jobs(whole, settings(whole))[1]
    sub = data_of(whole, 0.04, 13)[:, NCH : 2 * NCH]
    q, _ = quantize_int8(sub)  # int8 (n, nchan, npol, 2), as the capture gives them
    valid = np.ones(q.shape[0], bool)
    valid[5000:5200] = False
    fmt = make_format("ynao", chan_bw_mhz=whole.chan_bw_mhz, freq_mhz=job.obs.freq_mhz)
    live = replace(job, source="127.0.0.1:7148", fmt=fmt)
    cpu, _ = rows_of(live, q, valid)
    gpu, nf = rows_of(replace(live, device="gpu"), q, valid)
    assert nf.fold.dtype == np.int8 and [r[0] for r in gpu] == [r[0] for r in cpu]
    for (_, sums, hits, offered), (_, s2, h2, o2) in zip(gpu, cpu, strict=True):
        np.testing.assert_array_equal(hits, h2)
        np.testing.assert_array_equal(offered, o2)
        np.testing.assert_allclose(sums, s2, rtol=2e-4)
