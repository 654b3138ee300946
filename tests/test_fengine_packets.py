"""Output heaps laid out as packets a block at a time (voltstream.fengine.packets): the
bytes equal heap-by-heap encoding, HeapOutput sends and writes a batch exactly as it
does the same heaps, and the buffer pool holds a slow output's engine back, then names
a stalled one."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from loopback import address, udp_receiver
from test_fengine_pipeline import SETTINGS, drain
from voltstream.errors import ConfigError, VoltstreamError
from voltstream.fengine import FEngineReference, HeapLayout, encode_heap, heap_counter
from voltstream.fengine.output import HeapOutput
from voltstream.fengine.packets import PacketBatch, PacketFormat, PacketPool, heap_count


def payloads(layout: HeapLayout, nslots: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (nslots, layout.nchan) + layout.payload_shape[1:]
    return rng.integers(-128, 128, size=shape).astype(layout.payload_dtype)


@pytest.mark.parametrize("bits,nsub,per_packet", [(8, 1, 8192), (8, 4, 64), (4, 2, 32)])
def test_a_packed_block_equals_heap_by_heap_encoding(bits, nsub, per_packet):
    layout = HeapLayout(64, 8, nsub, bits)
    fmt = PacketFormat(layout, per_packet, feng_id=3, n_fengs=4)
    slots = [7, 8, 10]
    p = payloads(layout, len(slots))
    got = fmt.pack(p, slots)
    assert got.shape == fmt.shape(3) and got.nbytes == fmt.nbytes(3)
    c = layout.channels_per_heap
    for i, slot in enumerate(slots):
        ts = slot * layout.samples_per_heap
        for sub in range(nsub):
            heap = PacketBatch(fmt, got, slots).heaps()[i * nsub + sub]
            assert (heap.timestamp, heap.frequency, heap.feng_id) == (ts, sub * c, 3)
            np.testing.assert_array_equal(heap.payload, p[i, sub * c : (sub + 1) * c])
            want = encode_heap(heap, heap_counter(ts, layout.samples_per_heap, 3, 4), per_packet)
            np.testing.assert_array_equal(got[i, sub], want)


def test_a_packet_format_checks_its_packet_size_and_feng_id():
    layout = HeapLayout(64, 8)
    with pytest.raises(ConfigError, match="does not divide"):
        PacketFormat(layout, 300)
    with pytest.raises(ConfigError, match="feng_id"):
        PacketFormat(layout, 64, feng_id=2, n_fengs=2)


def test_output_sends_and_writes_a_batch_exactly_as_the_same_heaps(tmp_path):
    ref = FEngineReference(**dict(SETTINGS, n_substreams=2))
    heaps = ref.process(np.arange(2 * 12 * 2 * 32 * 8, dtype=np.int16).reshape(2, -1) % 97, 0)
    nsub = 2
    slots = sorted({h.timestamp // ref.layout.samples_per_heap for h in heaps})
    assert len(heaps) == nsub * len(slots) >= 8
    block = np.stack(
        [
            np.concatenate([h.payload for h in heaps[i * nsub : (i + 1) * nsub]])
            for i in range(len(slots))
        ]  # fmt: skip
    )
    results = {}
    for kind in ("heaps", "batch"):
        sinks = [udp_receiver(), udp_receiver()]
        out = HeapOutput(
            ref.layout,
            [address(s) for s in sinks],
            packet_payload=128,
            descriptor_interval=3,
            output_file=tmp_path / f"{kind}.spead",
        )
        released = []
        with out:
            if kind == "heaps":
                out.submit(heaps)
            else:
                fmt = out.packet_format(ref.feng_id)
                half = len(slots) // 2
                batches = [
                    PacketBatch(
                        fmt,
                        fmt.pack(block[a:b], slots[a:b]),
                        slots[a:b],
                        lambda a=a, r=released: r.append(a),
                    )  # fmt: skip
                    for a, b in ((0, half), (half, len(slots)))
                ]
                assert heap_count(batches) == len(heaps)
                out.submit(batches)
        results[kind] = (
            (tmp_path / f"{kind}.spead").read_bytes(),
            [drain(s) for s in sinks],
            out.counters,
            released,
        )
        for s in sinks:
            s.close()
    (fa, ua, ca, _), (fb, ub, cb, rel) = results["heaps"], results["batch"]
    assert fa == fb  # the same file, byte for byte
    assert ua == ub and all(len(u) > 0 for u in ua)  # the same datagrams per destination
    ca.send_seconds = cb.send_seconds = 0.0  # the only counter that may differ
    assert ca == cb and cb.heaps_sent == cb.heaps_written == len(heaps)
    assert sorted(rel) == [0, len(slots) // 2]  # both buffers went back, once each


def test_a_full_disk_is_a_clear_error_and_every_buffer_still_goes_back():
    layout = HeapLayout(64, 8)
    out = HeapOutput(layout, [], output_file="/dev/full")
    fmt = out.packet_format()
    submitted, released = [], []
    with pytest.raises(ConfigError, match="/dev/full"):
        with out:
            for k in range(4):
                batch = fmt.pack(payloads(layout, 1), [k])
                submitted.append(k)
                out.submit([PacketBatch(fmt, batch, [k], lambda k=k: released.append(k))])
                time.sleep(0.05)
    assert sorted(released) == submitted and len(submitted) >= 2


def test_the_pool_holds_the_engine_back_then_names_a_stalled_output():
    pool = PacketPool(2, timeout_s=0.3)
    a, give_a = pool.take(100)
    b, give_b = pool.take(50)
    assert a.nbytes >= 100 and b.nbytes >= 50 and a is not b
    threading.Timer(0.1, give_a).start()
    t0 = time.monotonic()
    c, give_c = pool.take(80)  # waits for `a` to come back
    assert time.monotonic() - t0 >= 0.08 and c is a and pool.waits == 1
    give_a()  # a second give-back of the same take changes nothing
    with pytest.raises(VoltstreamError, match="stalled"):
        pool.take(10)
    give_b()
    d, _ = pool.take(400)  # grows a returned buffer that is too small
    assert d.nbytes >= 400
