"""The F-engine's output as another SPEAD implementation sees it: spead2's Python
receiver on loopback (and on output files) decodes our heaps through our descriptors,
and the payloads equal the reference engine run directly on the same samples."""

from __future__ import annotations

import socket
import threading

import numpy as np
import spead2
import spead2.recv

from fengine_local import run_local
from voltstream.fengine import FEngineReference, HeapLayout, OutputHeap
from voltstream.fengine.engines import make_engine
from voltstream.fengine.heaps import (
    encode_descriptor_heap,
    encode_heap,
    encode_stop_heap,
    fengine_descriptors,
    heap_counter,
)
from voltstream.fengine.output import HeapOutput
from voltstream.fengine.settings import FEngineSettings
from voltstream.sim.spead import digitiser_packets, digitiser_samples
from voltstream.testing import Drop, FaultPlan

NCH, TAPS, NSPEC, SPH, BITS, FS = 64, 16, 16, 1024, 10, 1e6
TONE_CH = 20
N_HEAPS = 192  # digitiser heaps per pol: 96 output slots of 2048 samples
GAIN = 1 / 64  # keeps the tone channel below saturation


def fengine_settings(n_substreams: int, bits: int = 8) -> FEngineSettings:
    return FEngineSettings(channels=NCH, taps=TAPS, spectra_per_heap=NSPEC,
                           substreams=n_substreams, output_bits=bits, sample_rate_hz=FS,
                           sample_bits=BITS, samples_per_heap=SPH, chunk_heaps=32)  # fmt: skip


def settings(n_substreams: int, bits: int = 8) -> dict:
    """The engine's keywords: the settings' own."""
    return fengine_settings(n_substreams, bits).engine_kwargs()


def samples() -> np.ndarray:
    return digitiser_samples(
        0,
        N_HEAPS,
        samples_per_heap=SPH,
        bits=BITS,
        sample_rate_hz=FS,
        tone_hz=TONE_CH * FS / (2 * NCH),
        tone_amplitude=60.0,
        noise_rms=8.0,
        seed=5,
    )


class Receiver:
    """A spead2 stream on a socket of ours; collects decoded data heaps until stop."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.stream = spead2.recv.Stream(
            spead2.ThreadPool(),
            spead2.recv.StreamConfig(max_heaps=8),
            spead2.recv.RingStreamConfig(heaps=64),
        )
        self.stream.add_udp_reader(self.sock)
        self.heaps: list[dict] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.heaps = decode_stream(self.stream)

    def join(self, timeout: float = 10.0) -> list[dict]:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.stream.stop()
            self.thread.join(5)
        self.sock.close()
        return self.heaps


def decode_stream(stream) -> list[dict]:
    ig = spead2.ItemGroup()
    out = []
    for heap in stream:
        updated = ig.update(heap)
        if "feng_raw" in updated:
            out.append(
                {
                    "timestamp": ig["timestamp"].value,
                    "feng_id": ig["feng_id"].value,
                    "frequency": ig["frequency"].value,
                    "raw": np.array(ig["feng_raw"].value),
                }
            )
    return out


def run_loopback(packets: np.ndarray, n_substreams: int):
    """Sends ``packets`` to run_fengine (CPU engine) and receives its output with spead2."""
    engine = make_engine("cpu", **settings(n_substreams))
    engine.set_gains(GAIN)
    receivers = [Receiver() for _ in range(n_substreams)]
    output = HeapOutput(engine.layout, [r.address for r in receivers], rate_gbps=0.5)
    report = run_local(engine, output, [packets], fengine_settings(n_substreams), rate=0.2,
                       duration_s=30, idle_timeout_s=0.5)  # fmt: skip
    return report, [r.join() for r in receivers]


def reference_heaps(x: np.ndarray, n_substreams: int, valid=None):
    ref = FEngineReference(**settings(n_substreams))
    ref.set_gains(GAIN)
    return ref.process(x, 0, valid), ref.counters


def test_spead2_decodes_payloads_equal_to_the_reference_and_the_tone_is_in_its_channel():
    x = samples()
    report, got = run_loopback(digitiser_packets(x, 0, samples_per_heap=SPH, bits=BITS), 2)
    expected, counters = reference_heaps(x, 2)
    assert len(expected) == counters.heaps_made > 100
    assert report.engine["heaps_made"] == counters.heaps_made
    assert report.engine["heaps_skipped"] == 0 and report.engine["flagged_spectra"] == 0
    assert report.output["heaps_sent"] == len(expected)
    assert report.output["descriptor_heaps_sent"] == 2 and report.output["stop_heaps_sent"] == 2
    assert report.capture["streams"][0]["received"] == N_HEAPS
    assert report.capture["streams"][1]["received"] == N_HEAPS
    assert report.heaps_paired == N_HEAPS
    # Each destination got its substream: the right `frequency`, all time slots in order.
    by_key = {(h.timestamp, h.frequency): h for h in expected}
    for sub, heaps in enumerate(got):
        assert len(heaps) == len(expected) // 2
        assert {h["frequency"] for h in heaps} == {sub * NCH // 2}
        assert all(h["feng_id"] == 0 for h in heaps)
        stamps = [h["timestamp"] for h in heaps]
        assert stamps == sorted(stamps)
        for h in heaps:
            ref = by_key[(h["timestamp"], h["frequency"])]
            assert h["raw"].dtype == np.int8 and h["raw"].shape == (NCH // 2, NSPEC, 2, 2)
            np.testing.assert_array_equal(h["raw"], ref.payload)
    # The tone: channel TONE_CH (in substream 0) carries most of the power, both pols.
    power = np.zeros((NCH, 2))
    for sub, heaps in enumerate(got):
        for h in heaps:
            v = h["raw"].astype(float)
            power[sub * NCH // 2 : (sub + 1) * NCH // 2] += (v**2).sum(axis=(1, 3))
    assert np.all(np.argmax(power, axis=0) == TONE_CH)
    assert np.all(power[TONE_CH] > 50 * np.median(power, axis=0))
    sat = report.engine["saturated"]
    assert sat == [0, 0]


def test_a_dropped_packet_loses_exactly_the_heaps_touching_it():
    x = samples()
    packets = digitiser_packets(x, 0, samples_per_heap=SPH, bits=BITS)
    dropped_heap = 100
    sent = FaultPlan(at={2 * dropped_heap + 1: Drop()}).apply(packets)  # pol 1, heap 100
    report, got = run_loopback(sent.rows(), 1)
    valid = np.ones(x.shape[1], dtype=bool)
    valid[dropped_heap * SPH : (dropped_heap + 1) * SPH] = False
    expected, counters = reference_heaps(x, 1, valid)
    # The 1024 lost samples touch the 2048-sample windows of 23 spectra in two slots.
    assert counters.heaps_skipped == 2 and counters.flagged_spectra == 23
    assert report.engine["heaps_skipped"] == counters.heaps_skipped
    assert report.engine["flagged_spectra"] == counters.flagged_spectra
    assert report.engine["heaps_made"] == counters.heaps_made
    assert report.capture["streams"][1]["missing"] == 1
    assert report.capture["streams"][0]["missing"] == 0
    assert report.heaps_unpaired == [1, 0]
    received = [h["timestamp"] for h in got[0]]
    assert received == [h.timestamp for h in expected]
    slot = 2 * NCH * NSPEC
    lost = dropped_heap * SPH
    touching = {s * slot for s in range((lost - TAPS * 2 * NCH) // slot, (lost + SPH) // slot + 1)}
    missing_slots = set(range(received[0], received[-1] + slot, slot)) - set(received)
    assert missing_slots == touching and len(missing_slots) == 2
    for h, ref in zip(got[0], expected, strict=True):
        np.testing.assert_array_equal(h["raw"], ref.payload)


def test_output_file_is_read_by_spead2(tmp_path):
    x = samples()[:, : 40 * SPH]
    heaps, _ = reference_heaps(x, 4)
    layout = HeapLayout(NCH, NSPEC, 4)
    path = tmp_path / "feng.spead"
    out = HeapOutput(layout, (), output_file=path, packet_payload=256)
    with out:
        out.submit(heaps)
    assert out.counters.heaps_written == len(heaps) > 0
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
    stream.add_buffer_reader(path.read_bytes())
    got = decode_stream(stream)
    assert [(h["timestamp"], h["frequency"]) for h in got] == [
        (h.timestamp, h.frequency) for h in heaps
    ]
    for g, h in zip(got, heaps, strict=True):
        np.testing.assert_array_equal(g["raw"], h.payload)


def test_four_bit_heaps_and_descriptors_decode_in_spead2():
    layout = HeapLayout(16, 4, 2, bits=4)
    rng = np.random.default_rng(3)
    payload = rng.integers(0, 256, layout.payload_shape, dtype=np.uint8)
    heap = OutputHeap(timestamp=5 * 128, frequency=8, feng_id=2, payload=payload, substream=1)
    cnt = heap_counter(heap.timestamp, layout.samples_per_heap, 2, 3)
    buf = b"".join(
        [
            encode_descriptor_heap(fengine_descriptors(layout)).tobytes(),
            encode_heap(heap, cnt, packet_payload=32).tobytes(),
            encode_stop_heap().tobytes(),
        ]
    )
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig())
    stream.add_buffer_reader(buf)
    ig = spead2.ItemGroup()
    heaps = list(stream)
    assert len(heaps) == 2  # the stop heap ends the stream without being a heap
    assert ig.update(heaps[0]) == {}
    ig.update(heaps[1])
    assert heaps[1].cnt == cnt
    assert ig["timestamp"].value == 640 and ig["feng_id"].value == 2
    assert ig["frequency"].value == 8
    assert ig["feng_raw"].dtype == np.uint8 and ig["feng_raw"].shape == (8, 4, 2)
    np.testing.assert_array_equal(ig["feng_raw"].value, payload)
    assert ig["feng_raw"].id == 0x4300 and ig["timestamp"].id == 0x1600
