"""The live F-engine on the GPU (run_fengine with GpuFEngine): digitiser heaps over
loopback are copied straight from the capture's page-locked pool (both polarisations'
rows of a chunk in one pitched copy) and released on the copy's event; the output heaps
equal the reference engine's on the same samples, with a lost heap flagged and its
heap slots skipped in both. Two antennas in one process (fengine/antennas.py) share
the GPU, each engine on its own streams: each antenna's heaps equal the reference on
its own samples."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from test_fengine_pipeline import BITS, FENGINE, NCH, NSPEC, SETTINGS, SPH, run_local, sim
from voltstream import _core
from voltstream.capture.config import CaptureSettings
from voltstream.fengine import FEngineReference, HeapLayout, decode_packets
from voltstream.fengine.antennas import Antenna, run_antennas, split_settings
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


def two_antennas(tmp_path, device: str, heaps: int = 320, threads: int = 1):
    """Two antennas live in one process on ``device``, each sent its own signal (a
    tone and seed of its own; antenna 1 loses pol 0's heap 90), each captured by
    ``threads`` threads (taking turns by chunk when more than one): the report and,
    per antenna, its heaps as written and the reference's on its samples."""
    signals = [dict(tone_hz=1e5, seed=3), dict(tone_hz=2.5e5, seed=11)]
    inputs = [sim(0, heaps, **sig) for sig in signals]
    (x1, pk1), valid1 = inputs[1], np.ones(inputs[1][0].shape[1], dtype=bool)
    inputs[1] = (x1, np.ascontiguousarray(np.delete(pk1, [2 * 90], axis=0)))
    valid1[90 * SPH : 91 * SPH] = False
    valids = [None, valid1]
    antennas = []
    files = [str(tmp_path / f"a{k}.spead") for k in range(2)]
    for s in split_settings(FENGINE, 2, outputs=files):  # F-engines 0 and 1 of 2
        eng = make_engine(device, sample_bits=BITS, **s.engine_kwargs())
        cap = CaptureSettings.of("127.0.0.1:0", threads=threads, spread="chunks",
                                 engine="packet_ring" if threads > 1 else "auto")  # fmt: skip
        antennas.append(Antenna(cap, s, eng, s.heap_output()))
    senders = []

    def on_start(k: int, addr: str) -> None:  # each antenna's packets once it listens
        def go(pk=inputs[k][1]):
            _core.Sender(addr).send(pk, pk.shape[1], 0.3)

        senders.append(threading.Thread(target=go, daemon=True))
        senders[-1].start()

    report = run_antennas(antennas, duration_s=30, idle_timeout_s=1.0, on_start=on_start)
    for t in senders:
        t.join(5)
    got, want = [], []
    for k in range(2):
        ref = FEngineReference(**dict(SETTINGS, feng_id=k))
        want.append(ref.process(inputs[k][0], 0, valids[k]))
        packets = decode_packets(read_packet_file(tmp_path / f"a{k}.spead")[1:-1])
        got.append([decode_output_heap(d, HeapLayout(NCH, NSPEC)) for d in packets])
    return report, got, want


def check_two_antennas(report, got, want, device: str = "gpu") -> None:
    """Each antenna's heaps equal its reference; antenna 1's lost heap is its own."""
    assert [r.device for r in report.antennas] == [device, device]
    assert [r.capture["totals"]["missing"] for r in report.antennas] == [0, 1]
    assert report.totals()["lost"] == 1 and report.totals()["antennas_silent"] == 0
    for k, (heaps, expected) in enumerate(zip(got, want, strict=True)):
        assert report.antennas[k].blocks > 2
        assert report.antennas[k].engine["heaps_made"] == len(expected) > 0
        assert [h.timestamp for h in heaps] == [h.timestamp for h in expected]
        assert {h.feng_id for h in heaps} == {k}
        for h, e in zip(heaps, expected, strict=True):
            quantised_close(h.payload, e.payload, 8)
    assert (
        report.antennas[1].engine["heaps_skipped"] > 0 == report.antennas[0].engine["heaps_skipped"]
    )


def test_two_live_gpu_antennas_in_one_process_each_equal_their_reference(tmp_path):
    check_two_antennas(*two_antennas(tmp_path, "gpu"))


def test_two_live_gpu_antennas_on_two_capture_threads_each(tmp_path):
    """`fengine --threads 4` over two antennas: each antenna's chunks alternate between
    its two capture threads (issue 26: an antenna above one core); the heaps still
    equal the reference, straight from both threads' page-locked pools."""
    report, got, want = two_antennas(tmp_path, "gpu", threads=2)
    check_two_antennas(report, got, want)
    for r in report.antennas:
        assert [t["packets"] > 0 for t in r.capture["threads"]] == [True, True]
