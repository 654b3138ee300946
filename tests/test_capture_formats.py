"""Every capture format end to end through `_core.Capture` on loopback: packets made
by the NumPy packetizers, placed by the Rust locators, checked byte for byte."""

from __future__ import annotations

import struct

import numpy as np

from capture_spec import capture
from chunks import collect
from loopback import send
from voltstream.sim.spead import packetize_spead_dig


def test_spead_digitiser_heaps_two_streams():
    rng = np.random.default_rng(11)
    spp, bits = 256, 10
    cap = capture(
        "spead", "127.0.0.1:0", 4, digitiser_ids=[7, 9], samples_per_heap=spp, sample_bits=bits
    )
    cap.start()
    sent = {}
    for stream, dig in enumerate((7, 9)):
        samples = rng.integers(-512, 512, 6 * spp)
        pkts = packetize_spead_dig(
            samples, bits=bits, samples_per_heap=spp, timestamp=40 * spp, digitiser_id=dig
        )
        send(cap.address, pkts)
        heap = spp * bits // 8
        for k, p in enumerate(pkts):
            sent[(stream, 40 + k)] = bytes(p[-heap:])
    foreign = packetize_spead_dig(
        rng.integers(-512, 512, spp),
        bits=bits,
        samples_per_heap=spp,
        timestamp=46 * spp,
        digitiser_id=3,
    )
    send(cap.address, foreign)
    got, st = collect(cap)
    assert got == sent
    assert st["totals"]["received"] == 12 and st["foreign"] == 1 and st["malformed"] == 0


def test_layout_format_describes_a_new_design_without_code():
    """A made-up FPGA packet: magic u16 LE, stream u8, pad, u32 LE counter, payload."""
    rng = np.random.default_rng(12)
    layout = {
        "packet_len": 8 + 64,
        "index": {"offset": 4, "bytes": 4, "endian": "little"},
        "stream": {"offset": 2, "bytes": 1},
        "stream_ids": [5, 6],
        "checks": [{"offset": 0, "bytes": 2, "endian": "little", "value": 0xBEEF}],
        "payload_offset": 8,
        "payload_len": 64,
    }
    cap = capture("layout", "127.0.0.1:0", 8, layout=layout)
    cap.start()
    sent, packets = {}, []
    for i in range(20):
        for s, sid in enumerate((5, 6)):
            payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
            packets.append(struct.pack("<HBxI", 0xBEEF, sid, 1000 + i) + payload)
            sent[(s, 1000 + i)] = payload
    packets.append(struct.pack("<HBxI", 0xDEAD, 5, 1020) + bytes(64))  # fails its check
    packets.append(struct.pack("<HBxI", 0xBEEF, 4, 1020) + bytes(64))  # unknown stream
    packets.append(struct.pack("<HBxI", 0xBEEF, 5, 1020) + bytes(10))  # truncated
    send(cap.address, packets)
    got, st = collect(cap)
    assert got == sent
    assert st["totals"]["received"] == 40
    assert st["malformed"] == 2 and st["foreign"] == 1
