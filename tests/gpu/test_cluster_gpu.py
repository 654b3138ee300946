"""A cluster node folding on the GPU (cluster/engines.py `GpuRows`) against the NumPy
node (`CpuRows`) and the one-machine fold of the whole band: the same rows, for a node
from the start and for one that starts late (a rerun after a kill); and a live GPU node
(the one-host live path: capture chunks through `StageRunner` to the GPU as they lie)
against a live CPU node given the same packets over loopback."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from live_node import PPC, Subband, run_live_node  # tests/: on the path
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


def test_a_live_gpu_node_takes_host_int8_samples_as_the_cpu_node():
    """Host int8 TFP samples of one YNAO stream are the capture chunk's own bytes: a live
    GPU node (a packed engine, as the one-host live fold's) folds them as the CPU node
    does (the cluster bench's one-node ceiling feeds it so)."""
    sb = Subband(0.02)
    valid = np.ones(sb.q.shape[0], bool)
    valid[5000:5200] = False
    cpu, _ = rows_of(sb.job(), sb.q, valid)
    gpu, nf = rows_of(sb.job(device="gpu"), sb.q, valid, piece=4096)
    assert nf.fold.live and [r[0] for r in gpu] == [r[0] for r in cpu]
    assert_same_rows(dict((k, acc) for k, *acc in gpu), dict((k, acc) for k, *acc in cpu))


def assert_same_rows(gpu: dict, cpu: dict) -> None:
    assert sorted(gpu) == sorted(cpu) and gpu
    for k, (sums, hits, offered) in gpu.items():
        np.testing.assert_array_equal(hits, cpu[k][1])
        np.testing.assert_array_equal(offered, cpu[k][2])
        np.testing.assert_allclose(sums, cpu[k][0], rtol=2e-4)


def test_a_live_gpu_node_folds_the_capture_chunks_as_the_cpu_node_does():
    """The same packets (three before the start, a lost capture chunk, a lost packet)
    to a CPU node and to a GPU node, which copies the capture's chunks to the GPU as
    they lie (StageRunner, page-locked pool): the same rows and fold counters."""
    sb = Subband(0.03)
    lost = [*range(5 * PPC, 6 * PPC), 1000]
    packets = np.delete(sb.packets, lost, axis=0)
    cpu_rows, cpu = run_live_node(sb.job(start_packet=3), packets)
    gpu_rows, gpu = run_live_node(sb.job(start_packet=3, device="gpu"), packets)
    assert gpu["device"] == "gpu" and cpu["device"] == "cpu"
    p = gpu["capture"]["pipeline"]
    assert p["registered_bytes"] > 0 and p["registration_warning"] is None
    assert p["gaps"] == 1 and p["lost_samples"] == len(lost) * 64
    same = {k for k in cpu["fold"] if k not in ("samples_dedispersed", "samples_late")}
    assert {k: gpu["fold"][k] for k in same} == {k: cpu["fold"][k] for k in same}
    assert gpu["capture"]["lost"] == cpu["capture"]["lost"] == len(lost)
    assert gpu["rows_sent"] == cpu["rows_sent"] > 0
    assert_same_rows(gpu_rows.rows, cpu_rows.rows)


def test_a_late_live_gpu_node_starts_inside_a_packet_on_the_fft_grid():
    """A GPU node whose first packet comes 2.3 rows in begins on the FFT grid, inside a
    capture packet (feed_block's byte offset): the CPU node's rows from its first."""
    sb = Subband(0.03, seed=6)
    late = int(np.ceil(2.3 * sb.settings.tsub_s / sb.obs.tsamp_s / 64))
    packets = sb.packets[late:]
    cpu_rows, cpu = run_live_node(sb.job(), packets)
    gpu_rows, gpu = run_live_node(sb.job(device="gpu"), packets)
    assert gpu["first_row"] == cpu["first_row"] > 0
    assert gpu["fold"]["samples_skipped"] == cpu["fold"]["samples_skipped"]
    assert gpu["fold"]["samples_skipped"] % 64  # the grid falls inside a packet
    assert_same_rows(gpu_rows.rows, cpu_rows.rows)
