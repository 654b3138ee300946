"""The live F-engine on the GPU (run_fengine with GpuFEngine): digitiser heaps over
loopback are copied straight from the capture's page-locked pool (both polarisations'
rows of a chunk in one pitched copy) and released on the copy's event; the output heaps
equal the reference engine's on the same samples, with a lost heap flagged and its
heap slots skipped in both."""

from __future__ import annotations

import numpy as np
import pytest

from test_fengine_pipeline import BITS, NCH, NSPEC, SETTINGS, SPH, run_local, sim
from voltstream.fengine import FEngineReference, HeapLayout, decode_packets
from voltstream.fengine.engines import make_engine
from voltstream.fengine.heaps import decode_output_heap
from voltstream.fengine.output import HeapOutput, read_packet_file

from .test_fengine_gpu import quantised_close

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("lose", [False, True])
def test_live_gpu_fengine_equals_the_reference(tmp_path, lose):
    x, pk = sim(0, 160)
    valid = np.ones(x.shape[1], dtype=bool)
    if lose:
        pk = np.ascontiguousarray(np.delete(pk, [2 * 70 + 1], axis=0))  # pol 1, heap 70
        valid[70 * SPH : 71 * SPH] = False
    eng = make_engine("gpu", sample_bits=BITS, **SETTINGS)
    out = HeapOutput(eng.layout, [], output_file=tmp_path / "g.spead")
    report = run_local(eng, out, [pk])
    assert report.blocks > 2 and report.capture["totals"]["missing"] == int(lose)
    ref = FEngineReference(**SETTINGS)
    expected = ref.process(x, 0, valid)
    assert report.engine["heaps_skipped"] == ref.counters.heaps_skipped
    assert (ref.counters.heaps_skipped > 0) == lose
    got = decode_packets(read_packet_file(tmp_path / "g.spead")[1:-1])
    heaps = [decode_output_heap(d, HeapLayout(NCH, NSPEC)) for d in got]
    assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
    for h, e in zip(heaps, expected, strict=True):
        quantised_close(h.payload, e.payload, 8)
