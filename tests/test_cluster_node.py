"""A cluster node's fold (voltstream/cluster/node.py `NodeFold`) and the merger's rows
(cluster/merger.py): four subbands folded apart and merged equal the fold of the whole
band on one machine, also with lost samples, a late start and a missing node; without
Dask or a network (tests/test_cluster.py runs the real thing)."""

from __future__ import annotations

import numpy as np
import pytest

from voltstream.cluster.job import NodeJob
from voltstream.cluster.merge import NodeRow, RowMerger
from voltstream.cluster.merger import MergePlan, Merger
from voltstream.cluster.node import NodeFold, subband_of
from voltstream.dsp.dedisperse import Dedisperser
from voltstream.fold.reference import FoldSettings, fold_products
from voltstream.io.polyco import ConstantPeriod
from voltstream.io.psrfits import read_psrfits
from voltstream.observation import Observation
from voltstream.pipeline.fold import fold_file
from voltstream.sim.signal import synthesize

NSUB, NCH, DM, PERIOD, NBIN = 4, 8, 30.0, 2e-3, 32
TSUB = 0.01


class MemoryReader:
    def __init__(self, obs, data, valid=None):
        self.obs, self.data, self.valid = obs, data, valid

    def read_blocks(self, nsamp):
        for a in range(0, self.data.shape[0], nsamp):
            v = None if self.valid is None else self.valid[a : a + nsamp]
            yield (self.data[a : a + nsamp], v) if v is not None else self.data[a : a + nsamp]


def band(bw: float) -> Observation:
    return Observation(nchan=NSUB * NCH, npol=2, freq_mhz=1400.0, bw_mhz=bw,
                       tsamp_s=NSUB * NCH / abs(bw) * 1e-6, start_mjd=60500,
                       start_sec=100.0)  # fmt: skip


def settings(whole: Observation) -> FoldSettings:
    nfft = Dedisperser(DM, whole.chan_freqs_mhz, whole.chan_bw_mhz).nfft
    predictor = ConstantPeriod(PERIOD, whole.start_mjd, whole.start_sec)
    return FoldSettings(DM, predictor, NBIN, TSUB, nfft=nfft, block_samples=4096)


def jobs(whole: Observation, s: FoldSettings) -> list[NodeJob]:
    out = []
    freqs = whole.chan_freqs_mhz
    for i in range(NSUB):
        f = freqs[i * NCH : (i + 1) * NCH]
        sub = Observation(NCH, 2, float(f.mean()), whole.chan_bw_mhz * NCH, whole.tsamp_s,
                          whole.start_mjd, whole.start_sec)  # fmt: skip
        out.append(NodeJob(f"node{i}", "x.dada", sub, s, tuple(freqs), whole.freq_mhz, 1.0))
    return out


def fold_nodes(whole, s, data, valid, skip=None, late=None, piece=3000):
    """The nodes fed their channels piece by piece, side by side, as live nodes are;
    rows merged as the merger does."""
    js = jobs(whole, s)
    merger = RowMerger([subband_of(j) for j in js], 1, NBIN, lag=100)
    folds = [NodeFold(j) for j in js]
    merged = []
    for a in range(0, data.shape[0], piece):
        for i, (j, nf) in enumerate(zip(js, folds, strict=True)):
            first = late if (late is not None and i == NSUB - 1) else 0
            if i == skip or a + piece <= first:
                continue
            b = max(a, first)
            x = data[b : a + piece, i * NCH : (i + 1) * NCH]
            nf.feed(x, valid[b : a + piece], b)
            for k, *acc in nf.rows():
                merged += merger.add(NodeRow(j.node, k, *acc))
    for i, (j, nf) in enumerate(zip(js, folds, strict=True)):
        for k, *acc in nf.finish() if i != skip else []:
            merged += merger.add(NodeRow(j.node, k, *acc))
        merged += merger.bye(j.node, k) if i != skip else []
    merged += merger.finish()
    return merged, merger


def assert_rows_are_the_reference(merged, ref, whole, rtol, wtol):
    """Every merged row is the one-machine fold's (also used by the GPU nodes' test)."""
    assert [r.k for r in merged] == list(range(ref.nsub))
    # The merger's channels ascend; the one-node fold's follow the band's sign.
    order = np.argsort(whole.chan_freqs_mhz)
    for r in merged:
        d, w, t = fold_products(r.sums[None], r.hits[None], r.offered[None], whole.tsamp_s)
        np.testing.assert_allclose(d[0], ref.data[r.k][:, order], rtol=rtol, atol=1e-6 * rtol)
        np.testing.assert_allclose(w[0], ref.weights[r.k][order], rtol=wtol)
        assert t[0] == pytest.approx(ref.tsubint_s[r.k])


@pytest.mark.parametrize("bw", [64.0, -64.0])
def test_four_nodes_merged_equal_the_whole_band_folded_on_one_machine(bw):
    whole = band(bw)
    data = synthesize(whole, 0.06, signal="pulsar", dm=DM, period_s=PERIOD, duty=0.05, seed=3)
    valid = np.ones(data.shape[0], bool)
    valid[7000:7400] = False  # lost packets: excluded the same way everywhere
    s = settings(whole)
    ref = fold_file(MemoryReader(whole, data, valid), s)
    merged, merger = fold_nodes(whole, s, data, valid)
    assert all(r.missing == () for r in merged)
    assert_rows_are_the_reference(merged, ref, whole, rtol=1e-9, wtol=1e-12)


def test_a_missing_node_is_zero_weight_and_a_late_node_sends_only_whole_rows():
    whole = band(64.0)
    data = synthesize(whole, 0.05, signal="pulsar", dm=DM, period_s=PERIOD, duty=0.05, seed=4)
    valid = np.ones(data.shape[0], bool)
    s = settings(whole)
    ref = fold_file(MemoryReader(whole, data, valid), s)
    late = int(0.021 / whole.tsamp_s)  # node3 starts 21 ms in: rows 0-2 are not whole
    merged, merger = fold_nodes(whole, s, data, valid, skip=1, late=late)
    assert merger.counters.missing_by_node["node1"] == ref.nsub
    for r in merged:
        d, w, _ = fold_products(r.sums[None], r.hits[None], r.offered[None], whole.tsamp_s)
        assert np.all(w[0][NCH : 2 * NCH] == 0)  # node1: never there
        if r.k >= 3:  # node3 from its first whole row on: exactly the whole band's
            np.testing.assert_allclose(d[0][:, 3 * NCH :], ref.data[r.k][:, 3 * NCH :], rtol=1e-9)
            np.testing.assert_allclose(w[0][3 * NCH :], ref.weights[r.k][3 * NCH :], rtol=1e-12)
        else:
            assert np.all(w[0][3 * NCH :] == 0) and "node3" in r.missing


def test_the_merger_writes_an_archive_that_reads_back_as_the_rows(tmp_path):
    whole = band(64.0)
    data = synthesize(whole, 0.04, signal="pulsar", dm=DM, period_s=PERIOD, duty=0.05, seed=5)
    valid = np.ones(data.shape[0], bool)
    s = settings(whole)
    ref = fold_file(MemoryReader(whole, data, valid), s)
    js = jobs(whole, s)
    out = tmp_path / "merged.fits"
    m = Merger(MergePlan(tuple(subband_of(j) for j in js), whole, s, str(out)))
    rows = []
    for i, j in enumerate(js):
        nf = NodeFold(j)
        nf.feed(data[:, i * NCH : (i + 1) * NCH], valid, 0)
        rows.append(nf.finish())
    for k in range(ref.nsub):  # row by row, as live nodes send them
        for j, node_rows in zip(js, rows, strict=True):
            if k < len(node_rows):
                m.put(j.node, *node_rows[k], {"rows": k})
    for j, node_rows in zip(js, rows, strict=True):
        m.bye(j.node, node_rows[-1][0])
    report = m.finish()
    assert report["rows_written"] == report["rows_complete"] == ref.nsub
    got = read_psrfits(out)
    assert got.nsub == ref.nsub
    np.testing.assert_allclose(got.weights, ref.weights, rtol=1e-6)
    np.testing.assert_allclose(got.offs_sub_s, ref.offs_sub_s, rtol=1e-9)
    # PSRFITS holds int16 with a scale and offset per profile: equal to that precision.
    span = ref.data.max(axis=-1, keepdims=True) - ref.data.min(axis=-1, keepdims=True)
    assert np.all(np.abs(got.data - ref.data) <= span / 30000 + 1e-9)
    assert report["nodes"]["node2"]["counters"] == {"rows": ref.nsub - 1}
