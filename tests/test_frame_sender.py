"""_core.FrameSender over loopback: headers, one stamp per frame, the pattern
payload, pacing, skip and reverse, and argument errors."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from loopback import address, udp_receiver
from voltstream import _core
from voltstream.errors import ConfigError

MUL = 0x9E3779B97F4A7C15


def parse(b: bytes, payload_len: int) -> tuple[int, int, int, int]:
    """Checks one packet; returns (frame, k, P, t_send_ns)."""
    assert len(b) == 32 + payload_len
    magic, k, p, index, t_send, frame = struct.unpack_from("<IHHQQQ", b)
    assert magic == 0x564C4154
    assert index == frame * p + k
    words = np.frombuffer(b, dtype="<u8", offset=32)
    j = np.arange(k * payload_len // 8, (k + 1) * payload_len // 8, dtype=np.uint64)
    want = np.uint64(frame) ^ (j * np.uint64(MUL))  # array arithmetic wraps like u64
    assert np.array_equal(words, want)
    return frame, k, p, t_send


def test_frames_are_stamped_paced_and_patterned():
    rx = udp_receiver()
    tx = _core.FrameSender(address(rx), 4, 128)
    assert (tx.packets_per_frame, tx.payload_len, tx.packet_len) == (4, 128, 160)
    before = time.monotonic_ns()
    st = tx.send_frames(7, 8, 1000.0)
    got = [parse(rx.recv(2048), 128) for _ in range(32)]
    after = time.monotonic_ns()
    assert (st["frames"], st["packets"], st["bytes"]) == (8, 32, 32 * 160)
    assert [(f, k) for f, k, _, _ in got] == [(7 + i // 4, i % 4) for i in range(32)]
    stamps = [t for _, k, _, t in got if k == 0]
    assert all(t == stamps[i // 4] for i, (_, _, _, t) in enumerate(got))
    assert before <= stamps[0] == st["t_first_send_ns"] and stamps[-1] <= after
    # Frame i is due 1 ms * i after the call began.
    assert all(t >= before + 1_000_000 * i for i, t in enumerate(stamps))


def test_skip_and_reverse():
    rx = udp_receiver()
    tx = _core.FrameSender(address(rx), 3, 8)
    st = tx.send_frames(0, 4, 0.0, skip=(2, 0), reverse=True)
    assert st["packets"] == 10
    got = [parse(rx.recv(2048), 8)[:2] for _ in range(10)]
    assert got == [(0, 2), (0, 1), (1, 2), (1, 1), (1, 0), (2, 2), (2, 1), (3, 2), (3, 1), (3, 0)]


@pytest.mark.parametrize(
    "args",
    [(0, 64), (4, 12), (4097, 8)],
)
def test_bad_frames_are_config_errors(args):
    rx = udp_receiver()
    with pytest.raises(ConfigError, match="packets per frame|multiple of 8"):
        _core.FrameSender(address(rx), *args)


def test_bad_sends_are_config_errors():
    rx = udp_receiver()
    tx = _core.FrameSender(address(rx), 4, 8)
    with pytest.raises(ConfigError, match="skip"):
        tx.send_frames(0, 1, 0.0, skip=(2, 4))
    with pytest.raises(ConfigError, match="rate"):
        tx.send_frames(0, 1, -5.0)
