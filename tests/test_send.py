"""The paced sender, through the bindings, on loopback."""

import socket
import threading

import numpy as np
import pytest

from voltstream import _core
from voltstream.errors import CaptureError, ConfigError
from voltstream.sim.packetize import YNAO_FRAME_LEN, depacketize_ynao, packetize_ynao


def _receiver():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind(("127.0.0.1", 0))
    s.settimeout(2.0)
    return s


@pytest.mark.parametrize("rate_gbps", [0.5, 0.0])
def test_sender_delivers_every_packet(rate_gbps):
    rng = np.random.default_rng(11)
    n = 200
    x = rng.integers(-128, 128, (n * 64, 32, 2)) + 1j * rng.integers(-128, 128, (n * 64, 32, 2))
    pk = packetize_ynao(x, start_sequence=1000)
    rx = _receiver()
    got = []

    def recv():
        try:
            for _ in range(n):
                got.append(rx.recv(65536))
        except TimeoutError:
            pass

    t = threading.Thread(target=recv)
    t.start()
    tx = _core.Sender(f"127.0.0.1:{rx.getsockname()[1]}")
    stats = tx.send(pk, YNAO_FRAME_LEN, rate_gbps)
    t.join(timeout=5)
    rx.close()
    assert stats["packets"] == n and stats["bytes"] == pk.nbytes
    if rate_gbps:
        # Pacing: the run cannot be faster than the rate allows (last burst excepted).
        assert stats["seconds"] >= 0.9 * pk.nbytes * 8 / (rate_gbps * 1e9)
        assert stats["rate_gbps"] <= rate_gbps * 1.1
    assert len(got) == n
    arr = np.frombuffer(b"".join(got), dtype=np.uint8).reshape(n, YNAO_FRAME_LEN)
    h, back = depacketize_ynao(arr)
    np.testing.assert_array_equal(h["sequence"], 1000 + np.arange(n))
    np.testing.assert_array_equal(back, x)


def test_sender_errors():
    with pytest.raises(ConfigError, match="HOST:PORT"):
        _core.Sender("nohost")
    rx = _receiver()
    tx = _core.Sender(f"127.0.0.1:{rx.getsockname()[1]}")
    assert tx.dest == f"127.0.0.1:{rx.getsockname()[1]}"
    buf = np.arange(100, dtype=np.uint8)
    with pytest.raises(ConfigError, match="whole number"):
        tx.send(buf, 30, 0.0)
    with pytest.raises(ConfigError, match="rate"):
        tx.send(buf, 10, -1.0)
    with pytest.raises(ConfigError, match="contiguous"):
        tx.send(np.arange(200, dtype=np.uint8)[::2], 10, 0.0)
    rx.close()
    # Nobody listens any more: loopback answers with port unreachable. A refusal is
    # counted and the burst sent again (a receiver rebinding its port); a few bursts
    # refused in a row are a receiver that is not there: then the send fails.
    refused = 0
    with pytest.raises(CaptureError, match="refused"):
        for _ in range(50):
            refused = tx.send(buf, 10, 0.0)["refused"]
    assert refused > 0
