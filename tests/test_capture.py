"""Socket capture through `_core.Capture` on loopback: exact counters, exact chunks."""

import os
import socket
import struct

import numpy as np
import pytest

from capture_spec import capture
from chunks import check_chunks, drain
from voltstream.errors import CaptureError, ConfigError, VoltstreamError
from voltstream.testing import Delay, Drop, Duplicate, FaultPlan, Foreign, Garbage, Truncate

STREAM_KEYS = {
    "stream", "received", "missing", "late", "duplicate", "dropped", "bytes", "invalid",
}  # fmt: skip
TOP_KEYS = {
    "engine",
    "running",
    "streams",
    "totals",
    "packets",
    "malformed",
    "foreign",
    "chunks_emitted",
    "chunks_dropped",
    "resyncs",
    "kernel_drops",
    "rcvbuf",
    "station",
    "host",
    "memory",
    "multicast",
    "threads",
}


class Sender:
    """Sends to a running capture over loopback (delivery is synchronous there)."""

    def __init__(self, cap):
        host, port = cap.address.rsplit(":", 1)
        self.dest = (host, int(port))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.count = 0

    def send(self, payload: bytes):
        self.sock.sendto(payload, self.dest)
        self.count += 1

    def close(self):
        self.sock.close()


def counter_packet(index: int, stream: int, payload: np.ndarray) -> bytes:
    return struct.pack(">QH", index, stream) + payload.tobytes()


def test_stats_dict_has_every_counter_before_and_after_start():
    cap = capture("counter", "127.0.0.1:0", 4, payload_len=16, streams=3)
    st = cap.stats()
    assert set(st) == TOP_KEYS
    assert [s["stream"] for s in st["streams"]] == [0, 1, 2]
    assert all(set(s) == STREAM_KEYS and s["received"] == 0 for s in st["streams"])
    assert set(st["totals"]) == STREAM_KEYS - {"stream"} | {"malformed", "foreign"}
    assert cap.address is None and not st["running"]
    with cap:
        st = cap.stats()
        # auto picks the packet ring where it may open one (root), else the socket
        expected = "packet_ring" if os.geteuid() == 0 else "socket"
        assert st["running"] and st["engine"] == expected
        assert st["rcvbuf"] > 0
    assert not cap.stats()["running"]


def test_counter_capture_counts_every_kind_of_packet_and_delivers_exact_chunks():
    rng = np.random.default_rng(20240611)
    ppc, nstreams, plen, nidx = 8, 2, 96, 80
    data = rng.integers(0, 256, (nidx, nstreams, plen), dtype=np.uint8)
    # Packet (i, s) is sent at 2 i + s, then reordered by at most 16 packets (8 indices,
    # inside the window of 3 chunks); index 0 stays first since the first packet fixes
    # where counting starts.
    faults = {2 * i + s: Drop() for i, s in [(13, 1), (40, 0), (41, 0)]}
    faults |= {
        2 * 5: Duplicate(100),  # the copy comes 50 indices on, chunk 0 long flushed: late
        2 * 70 + 1: Duplicate(),
        2 * 75: Foreign(lambda p: p[:8] + struct.pack(">H", 7) + p[10:]),  # no stream 7
        2 * 60: Truncate(50),  # cut short: malformed
        2 * 61: Garbage(lambda p: p + b"extra"),  # too long: malformed
        2 * 62 + 1: Garbage(lambda p: b"\x01" * (plen + 10 + 200)),  # beyond the buffer
    }
    plan = FaultPlan(20240611, rates={Delay(16): 0.3}, at=faults, between=range(2, 2 * nidx))
    sent = plan.apply(counter_packet(i, s, data[i, s]) for i in range(nidx) for s in (0, 1))
    gap = {(at // 2, at % 2) for at in sent.lost}
    assert len(gap) == 6 and sent.count(Delay) > 20
    cap = capture(
        "counter", "127.0.0.1:0", ppc, nchunks=32, window=3, payload_len=plen, streams=nstreams
    )
    with cap:
        tx = Sender(cap)
        for p in sent.packets:
            tx.send(p)
        tx.close()
        cap.stop()
        st = cap.stats()
        chunks = drain(cap)

    assert st["kernel_drops"] == 0
    assert st["packets"] == tx.count == len(sent.packets)
    s0, s1 = st["streams"]
    for s, st_s in enumerate((s0, s1)):
        ngap = sum(1 for g in gap if g[1] == s)
        assert (st_s["received"], st_s["missing"]) == (nidx - ngap, ngap), s
        assert st_s["bytes"] == st_s["received"] * plen
    assert (s0["late"], s1["late"], s0["duplicate"], s1["duplicate"]) == (1, 0, 0, 1)
    assert (st["foreign"], st["malformed"]) == (1, 3)
    assert s0["dropped"] == s1["dropped"] == st["chunks_dropped"] == 0
    assert st["chunks_emitted"] == nidx // ppc == len(chunks)

    check_chunks(chunks, data, gap, ppc)


def test_chunks_are_dropped_whole_when_the_consumer_holds_them_all():
    rng = np.random.default_rng(5)
    ppc, plen = 4, 32
    cap = capture("counter", "127.0.0.1:0", ppc, nchunks=3, window=2, payload_len=plen)
    with cap:
        tx = Sender(cap)
        for i in range(6 * ppc):
            tx.send(counter_packet(i, 0, rng.integers(0, 256, plen, dtype=np.uint8)))
        tx.close()
        cap.stop()
        st = cap.stats()
        chunks = drain(cap)
    s0 = st["streams"][0]
    # Three chunks fit the pool; the other three find no free chunk.
    assert (st["chunks_emitted"], st["chunks_dropped"]) == (3, 3)
    assert (s0["received"], s0["dropped"], s0["missing"]) == (3 * ppc, 3 * ppc, 0)
    assert [c.chunk_id for c in chunks] == [0, 1, 2]


def test_time_stamp_jump_resynchronises_instead_of_counting_missing():
    rng = np.random.default_rng(11)
    ppc, plen = 4, 24
    cap = capture("counter", "127.0.0.1:0", ppc, payload_len=plen, resync_chunks=16)
    with cap:
        tx = Sender(cap)
        for i in [*range(8), *range(10**12, 10**12 + 8)]:
            tx.send(counter_packet(i, 0, rng.integers(0, 256, plen, dtype=np.uint8)))
        tx.close()
        cap.stop()
        st = cap.stats()
        ids = [c.chunk_id for c in drain(cap)]
    assert st["resyncs"] == 1
    assert st["streams"][0]["missing"] == 0 and st["streams"][0]["received"] == 16
    assert ids == [0, 1, 10**12 // ppc, 10**12 // ppc + 1]


def ynao_frame(seq: int, subband: int, data: np.ndarray, version: int = 1) -> bytes:
    header = struct.pack(">QIIIBBH", seq, 60500, 3600, 16_000 * seq, version, subband, 32)
    return header + data.tobytes()


def test_ynao_capture_is_byte_exact_and_rejects_other_subbands():
    rng = np.random.default_rng(99)
    ppc, n = 4, 12
    data = rng.integers(0, 256, (n, 8192), dtype=np.uint8)
    cap = capture("ynao", "127.0.0.1:0", ppc, subband=3)
    assert (cap.payload_len, cap.packet_len, cap.nstreams) == (8192, 8216, 1)
    with cap:
        tx = Sender(cap)
        for i in range(n):
            tx.send(ynao_frame(1000 + i, 3, data[i]))
        tx.send(ynao_frame(1000 + n, 4, data[0]))  # another subband: foreign
        tx.send(ynao_frame(1000 + n, 3, data[0])[:8000])  # truncated: malformed
        tx.close()
        cap.stop()
        st = cap.stats()
        chunks = drain(cap)
    assert (st["foreign"], st["malformed"], st["streams"][0]["received"]) == (1, 1, n)
    assert st["streams"][0]["missing"] == 0
    got = np.concatenate([np.frombuffer(c, np.uint8).reshape(ppc, 8192) for c in chunks])
    assert [c.first_index for c in chunks] == [1000, 1004, 1008]
    np.testing.assert_array_equal(got, data)


def test_port_in_use_is_a_capture_error_naming_the_address():
    with capture("counter", "127.0.0.1:0", 4, payload_len=8) as first:
        second = capture("counter", first.address, 4, payload_len=8)
        with pytest.raises(CaptureError, match="another capture") as err:
            second.start()
        assert first.address in str(err.value)
        assert isinstance(err.value, VoltstreamError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"format": "mark5b"}, "unknown capture format"),
        ({"format": "spead"}, "digitiser_ids"),
        ({"format": "codif", "codif_threads": [0]}, "codif_frame_len"),
        ({"format": "layout"}, "layout="),
        ({"format": "layout", "layout": {"packet_len": 64}}, "index"),
        ({"format": "vdif"}, "vdif_threads"),
        ({"format": "counter"}, "payload_len"),
        ({"format": "ynao", "nchunks": 2, "window": 2}, "nchunks"),
        ({"format": "ynao", "window": 0}, "window"),
        ({"format": "ynao", "bind": "no-port-here"}, None),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs, match):
    args = {"format": "ynao", "bind": "127.0.0.1:0", "packets_per_chunk": 4} | kwargs
    if match is None:
        with pytest.raises(ConfigError, match="(host|ipv4):port"):
            capture(**args).start()
    else:
        with pytest.raises(ConfigError, match=match):
            capture(**args)


def test_release_is_refused_while_exported_and_access_after_release_fails():
    rng = np.random.default_rng(3)
    # Window 2: chunk 0 leaves it when chunk 2 opens, before the capture stops.
    with capture("counter", "127.0.0.1:0", 2, payload_len=16, window=2) as cap:
        tx = Sender(cap)
        for i in range(6):
            tx.send(counter_packet(i, 0, rng.integers(0, 256, 16, dtype=np.uint8)))
        tx.close()
        ch = cap.next_chunk(5.0)
        assert ch is not None
        view = np.frombuffer(ch, np.uint8)
        with pytest.raises(CaptureError, match="still exported"):
            ch.release()
        del view
        ch.release()
        assert ch.released
        with pytest.raises(CaptureError, match="released"):
            _ = ch.present
        with pytest.raises(CaptureError, match="released"):
            memoryview(ch)
        with pytest.raises(CaptureError, match="not started"):
            capture("counter", "127.0.0.1:0", 2, payload_len=16).next_chunk(0.0)
