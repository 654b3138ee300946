"""Packet-ring engine (AF_PACKET TPACKET_V3) through `_core.Capture`: exact counters on
loopback, GSO frames split into datagrams, the pause gate, and every engine (socket, packet
ring, AF_XDP) over a veth pair between two network namespaces that the test creates and
removes."""

import json
import os
import pickle
import socket
import struct
import textwrap
import time

import numpy as np
import pytest

from capture_spec import capture
from chunks import check_chunks, drain
from netns import receiver, run_in, stop_receiver, veth_pair
from veth_capture import SAVE_CHUNKS
from veth_capture import check_chunks as check_saved_chunks
from voltstream import _core
from voltstream.errors import ConfigError, VoltstreamError
from voltstream.testing import Drop, Duplicate, FaultPlan, Foreign, Garbage, Truncate

ENGINES = ["socket", "packet_ring"]


def counter_packet(index: int, stream: int, payload: np.ndarray) -> bytes:
    return struct.pack(">QH", index, stream) + payload.tobytes()


def dest(cap):
    host, port = cap.address.rsplit(":", 1)
    return host, int(port)


def test_packet_ring_counts_every_kind_of_packet_exactly_on_loopback():
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    ppc, nstreams, plen, nidx = 8, 2, 200, 64
    data = rng.integers(0, 256, (nidx, nstreams, plen), dtype=np.uint8)
    drops = {(int(rng.integers(1, 30)), 1), (45, 0)}
    half = nidx // 2

    def faulted(indices, faults):
        """The packets of ``indices`` (both streams), with ``faults`` at (i, s)."""
        at = {2 * (i - indices[0]) + s: f for (i, s), f in faults.items()}
        at |= {2 * (i - indices[0]) + s: Drop() for i, s in drops if i in indices}
        rows = [counter_packet(i, s, data[i, s]) for i in indices for s in range(nstreams)]
        return FaultPlan(at=at).apply(rows)

    # Indices 0..31 one datagram at a time: every kind of bad packet.
    first = faulted(range(half), {
        (3, 0): Duplicate(50),  # the copy comes 25 indices on, behind the window: late
        (10, 0): Foreign(lambda p: p[:8] + struct.pack(">H", 5) + p[10:]),  # stream 5
        (20, 0): Truncate(40),  # short: malformed
        (21, 0): Garbage(lambda p: b"\x07" * (plen + 10 + 100)),  # beyond max_packet
    })  # fmt: skip
    # Indices 32..63 through the GSO sender, all of one length.
    second = faulted(range(half, nidx), {(50, 1): Duplicate()})
    gap = {(at // 2, at % 2) for at in first.lost}
    gap |= {(half + at // 2, at % 2) for at in second.lost}
    assert len(gap) == 4
    cap = capture(
        "counter",
        "127.0.0.1:0",
        ppc,
        nchunks=32,
        window=3,
        payload_len=plen,
        streams=nstreams,
        engine="packet_ring",
    )
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    with cap:
        assert cap.stats()["engine"] == "packet_ring"
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        to = dest(cap)
        # One datagram at a time, with a copy to another port each.
        for p in first.packets:
            tx.sendto(p, to)
            tx.sendto(p, other.getsockname())
        # The ring sees super-frames and must split them back into the datagrams.
        rows = second.packets
        r = _core.Sender(cap.address).send(np.frombuffer(b"".join(rows), np.uint8), plen + 10, 0)
        assert r["packets"] == len(rows)
        tx.close()
        cap.stop()
        st = cap.stats()
        chunks = drain(cap)
    other.close()

    assert st["kernel_drops"] == 0
    assert st["packets"] == len(first.packets) + len(second.packets)
    for s, sts in enumerate(st["streams"]):
        ngap = sum(1 for g in gap if g[1] == s)
        assert (sts["received"], sts["missing"]) == (nidx - ngap, ngap), s
        assert sts["bytes"] == sts["received"] * plen
    s0, s1 = st["streams"]
    assert (s0["late"], s1["late"], s0["duplicate"], s1["duplicate"]) == (1, 0, 0, 1)
    assert (st["foreign"], st["malformed"]) == (1, 2)
    assert st["chunks_emitted"] == nidx // ppc == len(chunks)
    check_chunks(chunks, data, gap, ppc)


@pytest.mark.parametrize("engine", ENGINES)
def test_paused_capture_reads_nothing_until_resumed(engine):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    ppc, plen, n = 4, 64, 200
    data = rng.integers(0, 256, (n, 1, plen), dtype=np.uint8)
    cap = capture("counter", "127.0.0.1:0", ppc, nchunks=64, payload_len=plen, engine=engine)
    cap.start(paused=True)
    try:
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(n):
            tx.sendto(counter_packet(i, 0, data[i, 0]), dest(cap))
        tx.close()
        time.sleep(0.05)
        assert cap.stats()["packets"] == 0 and cap.stats()["engine"] == engine
        cap.resume()
        deadline = time.monotonic() + 5
        while cap.stats()["packets"] < n and time.monotonic() < deadline:
            time.sleep(0.005)
        assert cap.stats()["packets"] == n
    finally:
        cap.stop()
    st = cap.stats()
    assert (st["streams"][0]["received"], st["kernel_drops"]) == (n, 0)
    check_chunks(drain(cap), data, set(), ppc)


def test_engine_choice_and_errors():
    with pytest.raises(ConfigError, match="unknown capture engine"):
        capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="rdma")
    cap = capture("counter", "127.0.0.1:0", 4, payload_len=8)
    assert cap.stats()["engine"] == "auto"
    with cap:
        assert cap.stats()["engine"] in ENGINES
    bad = capture(
        "counter", "127.0.0.1:0", 4, payload_len=8, engine="packet_ring", interface="vs-nope0"
    )
    with pytest.raises(VoltstreamError, match="vs-nope0"):
        bad.start()
    with pytest.raises(VoltstreamError, match="power of two"):
        capture(
            "counter", "127.0.0.1:0", 4, payload_len=8, engine="packet_ring", ring_block_size=5000
        ).start()


RECEIVER = (
    textwrap.dedent(
        """
    import json, sys
    import numpy as np
    from voltstream import _core
    engine, bind, ppc, plen, streams, out = sys.argv[1:7]
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": int(plen), "streams": int(streams)},
        "network": {"bind": bind},
        "engine": {"kind": engine},
        "chunks": {"packets_per_chunk": int(ppc), "nchunks": 64, "window": 3},
    })
    cap.start()
    print(cap.address, flush=True)
    sys.stdin.readline()
    cap.stop()
    """
    )
    + SAVE_CHUNKS
    + "print(json.dumps(cap.stats()), flush=True)\n"
)


SENDER = textwrap.dedent(
    """
    import pickle, socket, sys, time
    host, port, path = sys.argv[1:4]
    port = int(port)
    with open(path, "rb") as f:
        packets = pickle.load(f)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"arp warm-up, to a port nobody captures", (host, port + 1))
    time.sleep(0.2)
    for k, p in enumerate(packets):
        s.sendto(p, (host, port))
        if k % 100 == 99:
            time.sleep(0.005)
    s.sendto(packets[4], (host, port + 1))  # another port: never seen
    """
)


@pytest.fixture
def veth():
    """Two namespaces (sender, receiver) joined by a veth with a 9000-byte MTU, so the
    host's interfaces and routes are never touched; deleting the namespaces deletes
    the veth."""
    yield from veth_pair("vs", 200, mtu=9000)


@pytest.mark.netns
@pytest.mark.parametrize("engine", [*ENGINES, "xdp"])
def test_both_engines_capture_exactly_over_a_veth_between_namespaces(engine, veth, tmp_path):
    seed, nidx, plen, ppc = int.from_bytes(os.urandom(4), "little"), 400, 1000, 16
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    rows = [counter_packet(i, s, data[i, s]) for i in range(nidx) for s in (0, 1)]
    # Packet (i, s) is at 2 i + s.
    faults = {2 * i + s: Drop() for i, s in [(7, 1), (100, 0), (101, 0), (333, 1)]}
    faults |= {
        2 * 1 + 1: Duplicate(2 * nidx),  # the copy comes last, behind the window: late
        2 * (nidx - 1): Duplicate(),
        2 * (nidx - 2): Foreign(lambda p: p[:8] + struct.pack(">H", 9) + p[10:]),  # stream 9
        2 * (nidx - 3): Truncate(5),  # malformed
    }
    sent = FaultPlan(at=faults).apply(rows)
    gap = {(at // 2, at % 2) for at in sent.lost}
    packets = tmp_path / "packets.pickle"
    packets.write_bytes(pickle.dumps(sent.packets))
    rx_if, bind = veth["rx_if"], f"{veth['rx']}:7148"
    out = tmp_path / "chunks.npz"
    with receiver(veth["rx_ns"], RECEIVER, engine, bind, str(ppc), str(plen), "2", str(out)) as rx:
        addr = rx.stdout.readline().strip()
        assert addr == bind, rx.stderr.read() if not addr else addr
        run_in(veth["tx_ns"], SENDER, veth["rx"], "7148", str(packets), timeout=30)
        time.sleep(0.05)
        st = json.loads(stop_receiver(rx))
    assert st["engine"] == engine
    assert st["kernel_drops"] == 0
    if engine == "xdp":
        # Native mode on the veth (a multi-buffer program, for the 9000-byte MTU);
        # every frame of the flow was seen by the program and none was dropped.
        x = st["xdp"]
        assert (x["interface"], x["mode"], x["multi_buffer"]) == (rx_if, "native", True)
        assert x["matched"] == st["packets"] and x["no_socket"] == x["cut"] == 0
    s0, s1 = st["streams"]
    assert (s0["received"], s1["received"]) == (nidx - 3, nidx - 2)
    assert (s0["missing"], s1["missing"]) == (3, 2)
    assert (s0["duplicate"], s1["late"], st["foreign"], st["malformed"]) == (1, 1, 1, 1)
    assert st["packets"] == len(sent.packets) == 2 * nidx - 4 + 3
    check_saved_chunks(out, seed, nidx, plen, ppc, gap)
