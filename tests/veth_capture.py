"""Counter-format capture over a veth pair, shared by the kernel-bypass engines' tests
(AF_XDP, DPDK): a receiver process in one namespace, a sender in the other, and the
chunk check.

The test makes the packets (`faulted`: two streams of `nidx` packets less the `gap`,
reordered within the window, one duplicate, one late, one foreign, a truncated, a garbage
and an over-long packet in place of three of ours, and with `cut_probe` an 8900-byte
one), the sender in its namespace sends them as they are, with UDP to another port and
100 kB of TCP echoed by the receiver's stack: the engine must take only its flow.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import struct
import textwrap
import time

import numpy as np

from capture_spec import spec
from netns import receiver, run_in, stop_receiver
from voltstream.testing import Delay, Drop, Duplicate, FaultPlan, Foreign, Garbage, Truncate

# Receiver script lines: every chunk of the stopped capture `cap` (data and presence)
# into the .npz file `out`, for check_chunks.
SAVE_CHUNKS = textwrap.dedent(
    """
    chunks, present = [], []
    while (ch := cap.next_chunk(0.2)) is not None:
        chunks.append(np.frombuffer(ch, np.uint8).copy())
        present.append(np.frombuffer(ch.present, np.uint8).copy())
        ch.release()
    np.savez(out, data=np.array(chunks), present=np.array(present))
    """
)

RECEIVER = (
    textwrap.dedent(
        """
    import json, socket, sys, threading
    import numpy as np
    from voltstream import _core
    bind, out, other_port, spec = sys.argv[1:5]
    host = bind.rsplit(":", 1)[0]
    # The kernel stack's view of another UDP port and of TCP: what the engine let through.
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind((host, int(other_port)))
    other.setblocking(False)
    tcp = socket.create_server((host, int(other_port)))
    tcp_bytes = []
    def serve():
        conn, _ = tcp.accept()
        with conn:
            while chunk := conn.recv(65536):
                tcp_bytes.append(len(chunk))
                conn.sendall(chunk)
    threading.Thread(target=serve, daemon=True).start()
    cap = _core.Capture(json.loads(spec))
    cap.start()
    print(cap.address, flush=True)
    sys.stdin.readline()
    cap.stop()
    """
    )
    + SAVE_CHUNKS
    + textwrap.dedent(
        """
    passed = []
    while True:
        try:
            passed.append(len(other.recv(65536)))
        except BlockingIOError:
            break
    print(json.dumps({"stats": cap.stats(), "passed": passed, "tcp": sum(tcp_bytes)}),
          flush=True)
    """
    )
)

SENDER = textwrap.dedent(
    """
    import pickle, socket, sys, time
    import numpy as np
    host, port, path, gso, plen = sys.argv[1:6]
    port, plen = int(port), int(plen)
    with open(path, "rb") as f:
        packets = pickle.load(f)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"warm-up: ARP, to a port the stack owns", (host, port + 1))
    time.sleep(0.2)
    # TCP (think ssh) to the receiver's kernel stack, echoed back, while the engine runs.
    with socket.create_connection((host, port + 1), timeout=5) as t:
        t.sendall(bytes(100_000))
        t.shutdown(socket.SHUT_WR)
        echoed = 0
        while chunk := t.recv(65536):
            echoed += len(chunk)
    assert echoed == 100_000, echoed
    if gso == "1":
        # The repository's sender (sendmmsg + UDP GSO super-frames) for each run of
        # whole packets, the others one by one.
        from voltstream import _core
        sender, run, first = _core.Sender(f"{host}:{port}"), [], True
        for p in [*packets, None]:
            if p is not None and len(p) == plen + 10:
                run.append(p)
                continue
            if run:
                r = sender.send(np.frombuffer(b"".join(run), np.uint8), plen + 10, 0.5)
                assert r["packets"] == len(run) and (r["gso"] or not first), r
                run, first = [], False
            if p is not None:
                s.sendto(p, (host, port))
    else:
        for k, p in enumerate(packets):
            s.sendto(p, (host, port))
            if k % 64 == 63:
                time.sleep(0.002)
    for k in range(3):  # another port: the receiver's kernel stack gets these
        s.sendto(b"other-%d" % k + bytes(plen), (host, port + 1))
    """
)


def faulted(seed: int, nidx: int, plen: int, gap, *, reorder: bool, cut_probe: bool):
    """The two streams' packets with the faults every engine must count: ``gap`` lost,
    reordering inside the window (unless the stream goes as GSO super-frames), one
    duplicate, one late, one foreign, and a truncated, a garbage and an over-long packet
    (and an 8900-byte one a ring may cut) each in place of one of ours."""
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    rows = [struct.pack(">QH", i, s) + data[i, s].tobytes() for i in range(nidx) for s in (0, 1)]
    junk = random.Random(seed).randbytes(7)
    # Packet (i, s) is at 2 i + s.
    at = {2 * i + s: Drop() for i, s in gap}
    at |= {
        2 * (nidx - 1): Duplicate(),
        2 * 1 + 1: Duplicate(4 * nidx),  # the copy comes last, behind the window: late
        2 * (nidx - 2): Foreign(lambda p: p[:8] + struct.pack(">H", 9) + p[10:]),
        2 * (nidx - 3): Truncate(plen // 2),
        2 * (nidx - 4) + 1: Garbage(lambda p: junk),
        2 * (nidx - 5): Garbage(lambda p: b"\x07" * (plen + 10 + 200)),  # beyond max_packet
    }
    if cut_probe:
        at[2 * (nidx - 6) + 1] = Garbage(lambda p: b"\x08" * 8900)  # a ring may cut it
    # Delays of up to 7 packets: inside the assembler's window.
    rates = {Delay(7): 0.5} if reorder else {}
    return FaultPlan(seed, rates=rates, at=at, between=range(2, 2 * nidx)).apply(rows)


def check_chunks(out, seed: int, nidx: int, plen: int, ppc: int, gap, context: str = "") -> None:
    """The chunks saved in `out` hold exactly the packets sent, present where not in `gap`."""
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    saved = np.load(out)
    got = saved["data"].reshape(-1, 2, ppc, plen)
    present = saved["present"].reshape(-1, 2, ppc).astype(bool)
    assert got.shape[0] == nidx // ppc, context
    want = data.reshape(-1, ppc, 2, plen).transpose(0, 2, 1, 3)
    want_present = np.ones_like(present)
    for i, s in gap:
        want_present[i // ppc, s, i % ppc] = False
    np.testing.assert_array_equal(present, want_present)
    np.testing.assert_array_equal(got[present], want[present])


def capture_over_veth(v, tmp_path, engine_kw: dict, *, plen, nidx, gap, port=7148, gso=False,
                      cut_probe=False, ppc=16):  # fmt: skip
    """Runs the receiver with `capture_spec.spec(..., **engine_kw)` and the sender of
    `faulted`'s packets; checks the chunks and the TCP echo; returns the capture's stats,
    the other port's datagrams and the (index, stream) of every packet lost."""
    out = tmp_path / "chunks.npz"
    seed = int.from_bytes(os.urandom(4), "little")
    sent = faulted(seed, nidx, plen, gap, reorder=not gso, cut_probe=cut_probe)
    lost = {(at // 2, at % 2) for at in sent.lost}
    packets = tmp_path / "packets.pickle"
    packets.write_bytes(pickle.dumps(sent.packets))
    bind = f"{v['rx']}:{port}"
    cap = spec("counter", bind, ppc, nchunks=64, window=3, payload_len=plen, streams=2,
               **engine_kw)  # fmt: skip
    with receiver(v["rx_ns"], RECEIVER, bind, str(out), str(port + 1), json.dumps(cap)) as rx:
        addr = rx.stdout.readline().strip()
        assert addr == f"{v['rx']}:{port}", rx.stderr.read() if not addr else addr
        run_in(v["tx_ns"], SENDER, v["rx"], str(port), str(packets), "1" if gso else "0",
               str(plen))  # fmt: skip
        time.sleep(0.05)
        res = json.loads(stop_receiver(rx))
    check_chunks(out, seed, nidx, plen, ppc, lost, json.dumps(res))
    assert res["tcp"] == 100_000
    return res["stats"], res["passed"], lost


def check_counters(st, engine: str, *, nidx: int, lost, plen: int, cut_probe=False) -> None:
    """Every counter of a capture_over_veth run with ``engine``: the sender's stream less
    ``lost``, one duplicate, one late, one foreign, and the malformed ones (the truncated,
    the garbage and the over-long packet, and the cut probe when it was sent, each in
    place of one of ours: lost too)."""
    assert st["engine"] == engine
    assert st["kernel_drops"] == 0
    s0, s1 = st["streams"]
    nlost = [sum(1 for g in lost if g[1] == s) for s in (0, 1)]
    assert (s0["received"], s1["received"]) == (nidx - nlost[0], nidx - nlost[1])
    assert (s0["missing"], s1["missing"]) == tuple(nlost)
    assert (s0["duplicate"], s1["duplicate"], s0["late"], s1["late"]) == (1, 0, 0, 1)
    assert (st["foreign"], st["malformed"]) == (1, 3 + cut_probe)
    assert s0["bytes"] == s0["received"] * plen
    # Less the dropped, plus the duplicate, the late and the foreign packet.
    assert st["packets"] == 2 * nidx - (len(lost) - 3 - cut_probe) + 3
