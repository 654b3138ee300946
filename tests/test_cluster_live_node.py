"""A live cluster node is the one-host live path with a row sink (cluster/node.py
`NodeRun`, cluster/node_stage.py `NodeStage` on `StageRunner`): one subband in the YNAO
geometry (32 x 4 MHz channels, 2 pols, 8-bit; sent slower than real time over
loopback: the node places samples by packet index, not by clock) folded by a CPU node
gives the rows of the one-machine fold of the same samples, with every counter exact:
packets before the observation's start, a lost capture chunk (the timeline's gap), a
lost packet (presence bits) and a node that starts late (on the FFT grid)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from live_node import PPC, Subband, run_live_node
from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import fold_products
from voltstream.pipeline.fold import fold_file


class Samples:
    """Samples with their validity, as a fold reader (the one-machine fold's input)."""

    def __init__(self, obs, x, valid):
        self.obs, self.x, self.valid = obs, x, valid

    def read_blocks(self, n):
        for a in range(0, self.x.shape[0], n):
            yield self.x[a : a + n], self.valid[a : a + n]


def reference(sb: Subband, first_packet: int, lost_packets: list[int]):
    """The one-machine fold of the subband from packet ``first_packet`` on (sample 0
    there), the lost packets' samples zero and excluded."""
    spp = sb.fmt.samples_per_packet
    x = sb.samples(first_packet).copy()
    valid = np.ones(x.shape[0], bool)
    for p in lost_packets:
        valid[(p - first_packet) * spp : (p - first_packet + 1) * spp] = False
    x[~valid] = 0
    return fold_file(Samples(sb.obs, x, valid), sb.settings)


def assert_rows_equal(rows, ref, tsamp, ks, rtol=1e-9):
    for k in ks:
        sums, hits, offered = rows[k]
        d, w, t = fold_products(sums[None], hits[None], offered[None], tsamp)
        np.testing.assert_allclose(d[0], ref.data[k], rtol=rtol, atol=1e-6 * rtol)
        np.testing.assert_allclose(w[0], ref.weights[k], rtol=1e-12)
        assert t[0] == pytest.approx(ref.tsubint_s[k])


def without(packets: np.ndarray, lost: list[int]) -> np.ndarray:
    return np.delete(packets, lost, axis=0)


def test_a_live_node_folds_its_subband_as_one_machine_does_every_counter_exact():
    sb = Subband(0.03)
    spp, npkt = sb.fmt.samples_per_packet, sb.packets.shape[0]
    start = 3  # the observation starts at packet 3: packets 0-2 come before it
    chunk = list(range(5 * PPC, 6 * PPC))  # capture chunk 5 never arrives: a gap
    lost = [*chunk, 1000]  # and one packet of a chunk that does
    rows, report = run_live_node(sb.job(start_packet=start), without(sb.packets, lost))
    ref = reference(sb, start, lost)

    cap = report["capture"]
    assert cap["totals"]["received"] == npkt - len(lost)
    assert cap["lost"] == len(lost) and cap["totals"]["dropped"] == 0
    assert cap["pipeline"]["gaps"] == 1  # the lost chunk reached the fold as a gap
    assert cap["pipeline"]["samples_fed"] == npkt * spp
    assert cap["pipeline"]["lost_samples"] == len(lost) * spp
    assert report["fold"] == {
        "samples_read": (npkt - start) * spp,
        "samples_lost": len(lost) * spp,
        "samples_dedispersed": report["fold"]["samples_dedispersed"],
        "samples_late": 0,
        "samples_before_start": start * spp,
        "samples_skipped": 0,
        "samples_missing_before_first": 0,
        "rows_skipped": 0,
    }
    assert ref.excluded_samples == len(lost) * spp
    assert report["device"] == "cpu" and report["first_row"] == 0
    assert report["rows_sent"] == ref.nsub == len(rows.rows) and report["send_errors"] == 0
    assert sorted(rows.rows) == list(range(ref.nsub)) and rows.first_rows == [0]
    assert_rows_equal(rows.rows, ref, sb.obs.tsamp_s, range(ref.nsub))


def test_a_late_live_node_starts_on_the_fft_grid_and_counts_what_it_skipped():
    """A node whose first packet comes 2.3 rows in (a restart after a kill): it folds
    from the first multiple of the FFT step after its first sample and sends rows from
    the first one every channel has whole: those equal the rows of the one-machine
    fold that ran from the start."""
    sb = Subband(0.03, seed=6)
    spp, npkt, tsamp = sb.fmt.samples_per_packet, sb.packets.shape[0], sb.obs.tsamp_s
    late = math.ceil(2.3 * sb.settings.tsub_s / tsamp / spp)  # first packet sent
    chunk = list(range((late // PPC + 4) * PPC, (late // PPC + 5) * PPC))
    rows, report = run_live_node(sb.job(), without(sb.packets[late:], [c - late for c in chunk]))
    ref = reference(sb, 0, chunk)

    step = FoldPlan(sb.obs, sb.settings).step
    grid = -(-late * spp // step) * step  # where folding begins
    # Row k is whole once every channel's dedispersed time (sample time less its
    # delay behind the centre) reaches k S: the top channel, its delay most negative.
    delay = dispersion_delay_s(sb.settings.dm, sb.obs.chan_freqs_mhz, sb.obs.freq_mhz)
    lead = max(0.0, float(np.max(-delay)))
    first_row = math.ceil((grid * tsamp + lead) / sb.settings.tsub_s)
    assert report["first_row"] == first_row == rows.first_rows[0] and rows.first_rows == [first_row]
    f = report["fold"]
    assert f["samples_skipped"] == grid - late * spp > 0
    assert f["samples_read"] == npkt * spp - grid
    assert f["samples_lost"] == PPC * spp and report["capture"]["lost"] == PPC
    assert f["samples_before_start"] == f["samples_missing_before_first"] == 0
    assert f["rows_skipped"] > 0  # the partial rows before its first whole one
    assert sorted(rows.rows) == list(range(first_row, ref.nsub))
    assert_rows_equal(rows.rows, ref, tsamp, range(first_row, ref.nsub))


def test_a_block_view_held_past_the_block_does_not_refuse_its_release():
    """A CPU node converts blocks in its Dask task's thread, whose stack Dask's profiler
    samples: a frame it holds keeps a view of a chunk alive after the conversion. Such
    a view must not refuse the chunk's release (it did, as a buffer export: the demo's
    nodes failed with "chunk 5 is still exported"); the samples are the packets'."""
    from loopback import free_bind, sender
    from voltstream.capture.config import CaptureSettings
    from voltstream.capture.run import block_samples, run_capture
    from voltstream.capture.timeline import Block

    sb = Subband(0.005)
    held, got = [], []

    class Holding:
        def take(self, item):
            if isinstance(item, Block):
                held.append(item.array(1, sb.fmt.payload_len))  # as a lingering frame would
                got.append(block_samples(sb.fmt, item)[0])  # released in there

        def poll(self):
            pass

        def finish(self):
            pass

    bind = free_bind()
    report = run_capture(sb.fmt, CaptureSettings.of(bind, packets_per_chunk=PPC), 30,
                         consumer=Holding(), idle_timeout_s=0.5,
                         on_start=sender(bind, sb.packets))  # fmt: skip
    assert report.totals["received"] == sb.packets.shape[0] and len(held) == len(got) > 1
    np.testing.assert_array_equal(np.concatenate(got), sb.q)
