"""Counter-format capture over a veth pair, shared by the kernel-bypass engines' tests
(AF_XDP, DPDK): a receiver process in one namespace, a sender in the other, and the
chunk check.

The sender sends two streams of `nidx` packets (less the `gap`), reordered within the
window, then one duplicate, one late, one foreign, one truncated, one garbage and one
over-long packet (and, with `cut_probe`, an 8900-byte one), UDP to another port and
100 kB of TCP echoed by the receiver's stack: the engine must take only its flow.
"""

from __future__ import annotations

import json
import os
import textwrap
import time

import numpy as np

from netns import receiver, run_in, stop_receiver

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
    bind, ppc, plen, nchunks, out, other_port, engine_kw = sys.argv[1:8]
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
    cap = _core.Capture("counter", bind, int(ppc), nchunks=int(nchunks), window=3,
                        payload_len=int(plen), streams=2, **json.loads(engine_kw))
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
    import json, random, socket, struct, sys, time
    import numpy as np
    host, port, seed, nidx, plen, gaps, gso, cut_probe = sys.argv[1:9]
    port, nidx, plen, seed = int(port), int(nidx), int(plen), int(seed)
    gap = {tuple(map(int, g.split("."))) for g in gaps.split(",") if g}
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    pk = lambda i, st, d: struct.pack(">QH", i, st) + d.tobytes()
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
    rows = [(i, st) for i in range(nidx) for st in range(2) if (i, st) not in gap]
    if gso == "1":
        # The repository's sender: sendmmsg + UDP GSO super-frames.
        from voltstream import _core
        buf = np.frombuffer(b"".join(pk(i, st, data[i, st]) for i, st in rows), np.uint8)
        r = _core.Sender(f"{host}:{port}").send(buf, plen + 10, 0.5)
        assert r["packets"] == len(rows) and r["gso"], r
    else:
        # Reordered within blocks of 8 packets (inside the assembler's window).
        rnd = random.Random(seed)
        for b in range(0, len(rows), 8):
            block = rows[b : b + 8]
            rnd.shuffle(block)
            for i, st in block:
                s.sendto(pk(i, st, data[i, st]), (host, port))
            if b % 64 == 56:
                time.sleep(0.002)
    s.sendto(pk(nidx - 1, 0, data[nidx - 1, 0]), (host, port))  # duplicate
    s.sendto(pk(1, 1, data[1, 1]), (host, port))  # late: behind the window
    s.sendto(pk(nidx - 2, 9, data[0, 0]), (host, port))  # stream 9: foreign
    s.sendto(pk(nidx - 2, 0, data[0, 0])[: plen // 2], (host, port))  # truncated
    s.sendto(bytes(random.Random(seed).randrange(256) for _ in range(7)), (host, port))  # garbage
    s.sendto(b"\\x07" * (plen + 10 + 200), (host, port))  # longer than max_packet
    if cut_probe == "1":
        s.sendto(b"\\x08" * 8900, (host, port))  # longer still: a ring may cut it
    for k in range(3):  # another port: the receiver's kernel stack gets these
        s.sendto(b"other-%d" % k + bytes(plen), (host, port + 1))
    print(json.dumps({"sent": len(rows)}))
    """
)


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
    """Runs the receiver with `_core.Capture(..., **engine_kw)` and the sender; checks the
    chunks and the TCP echo; returns the capture's stats and the other port's datagrams."""
    out = tmp_path / "chunks.npz"
    seed = int.from_bytes(os.urandom(4), "little")
    args = (f"{v['rx']}:{port}", str(ppc), str(plen), "64", str(out), str(port + 1))
    with receiver(v["rx_ns"], RECEIVER, *args, json.dumps(engine_kw)) as rx:
        addr = rx.stdout.readline().strip()
        assert addr == f"{v['rx']}:{port}", rx.stderr.read() if not addr else addr
        gaps = ",".join(f"{i}.{s}" for i, s in gap)
        run_in(v["tx_ns"], SENDER, v["rx"], str(port), str(seed), str(nidx), str(plen), gaps,
               "1" if gso else "0", "1" if cut_probe else "0")  # fmt: skip
        time.sleep(0.05)
        res = json.loads(stop_receiver(rx))
    check_chunks(out, seed, nidx, plen, ppc, gap, json.dumps(res))
    assert res["tcp"] == 100_000
    return res["stats"], res["passed"]


def check_counters(st, engine: str, *, nidx: int, gap, plen: int, cut_probe=False) -> None:
    """Every counter of a capture_over_veth run with ``engine``: the sender's stream less
    ``gap``, one duplicate, one late, one foreign, and the malformed ones (the truncated,
    the garbage and the over-long packet, and the cut probe when it was sent)."""
    assert st["engine"] == engine
    assert st["kernel_drops"] == 0
    s0, s1 = st["streams"]
    ngap = [sum(1 for g in gap if g[1] == s) for s in (0, 1)]
    assert (s0["received"], s1["received"]) == (nidx - ngap[0], nidx - ngap[1])
    assert (s0["missing"], s1["missing"]) == tuple(ngap)
    assert (s0["duplicate"], s1["duplicate"], s0["late"], s1["late"]) == (1, 0, 0, 1)
    assert (st["foreign"], st["malformed"]) == (1, 3 + cut_probe)
    assert s0["bytes"] == s0["received"] * plen
    assert st["packets"] == 2 * nidx - len(gap) + 6 + cut_probe
