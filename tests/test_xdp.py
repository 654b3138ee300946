"""AF_XDP engine through `_core.Capture`, over a veth pair between two network namespaces
that each test creates and removes (the host's interfaces, routes and loopback are never
touched): exact counters with reordering, gaps, duplicates, late, foreign, truncated and
garbage packets; other traffic (other UDP ports, TCP, ARP) still reaches the receiver's kernel;
jumbo frames arrive whole through multi-buffer descriptors; native and generic (skb) mode;
a UDP-GSO sender in native mode; clear errors."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from netns import veth_pair
from voltstream import _core
from voltstream.errors import ConfigError, VoltstreamError

RECEIVER = textwrap.dedent(
    """
    import json, socket, sys, threading
    import numpy as np
    from voltstream import _core
    bind, mode, ppc, plen, nchunks, out, other_port = sys.argv[1:8]
    host = bind.rsplit(":", 1)[0]
    # The kernel stack's view of another UDP port and of TCP: what XDP_PASS let through.
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
                        payload_len=int(plen), streams=2, engine="xdp", xdp_mode=mode)
    cap.start()
    print(cap.address, flush=True)
    sys.stdin.readline()
    cap.stop()
    chunks, present = [], []
    while (ch := cap.next_chunk(0.2)) is not None:
        chunks.append(np.frombuffer(ch, np.uint8).copy())
        present.append(np.frombuffer(ch.present, np.uint8).copy())
        ch.release()
    np.savez(out, data=np.array(chunks), present=np.array(present))
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

SENDER = textwrap.dedent(
    """
    import json, random, socket, struct, sys, time
    import numpy as np
    host, port, seed, nidx, plen, gaps, gso = sys.argv[1:8]
    port, nidx, plen, seed = int(port), int(nidx), int(plen), int(seed)
    gap = {tuple(map(int, g.split("."))) for g in gaps.split(",") if g}
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    pk = lambda i, st, d: struct.pack(">QH", i, st) + d.tobytes()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"warm-up: ARP, to a port the stack owns", (host, port + 1))
    time.sleep(0.2)
    # TCP (think ssh) to the receiver's kernel stack, echoed back, while XDP runs.
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
    for k in range(3):  # another port: the receiver's kernel stack gets these
        s.sendto(b"other-%d" % k + bytes(plen), (host, port + 1))
    print(json.dumps({"sent": len(rows)}))
    """
)


@pytest.fixture
def veth():
    """Two namespaces joined by a veth with a 9000-byte MTU; deleting the namespaces
    (always, in the finalizer) deletes the veth."""
    yield from veth_pair("vx", 150, mtu=9000)


def capture_over_veth(v, tmp_path, *, mode, plen, nidx, gap, gso=False, ppc=16):
    port = 7148
    out = tmp_path / "chunks.npz"
    seed = int.from_bytes(os.urandom(4), "little")
    rx = subprocess.Popen(
        ["ip", "netns", "exec", v["rx_ns"], sys.executable, "-c", RECEIVER, f"{v['rx']}:{port}",
         mode, str(ppc), str(plen), "64", str(out), str(port + 1)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        addr = rx.stdout.readline().strip()
        assert addr == f"{v['rx']}:{port}", rx.stderr.read() if not addr else addr
        gaps = ",".join(f"{i}.{s}" for i, s in gap)
        r = subprocess.run(
            ["ip", "netns", "exec", v["tx_ns"], sys.executable, "-c", SENDER, v["rx"], str(port),
             str(seed), str(nidx), str(plen), gaps, "1" if gso else "0"],
            timeout=60, capture_output=True, text=True,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        time.sleep(0.05)
        stdout, stderr = rx.communicate("stop\n", timeout=30)
        assert rx.returncode == 0, stderr
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait(timeout=10)
    res = json.loads(stdout.strip().splitlines()[-1])
    data = np.random.default_rng(seed).integers(0, 256, (nidx, 2, plen), dtype=np.uint8)
    saved = np.load(out)
    got = saved["data"].reshape(-1, 2, ppc, plen)
    present = saved["present"].reshape(-1, 2, ppc).astype(bool)
    assert got.shape[0] == nidx // ppc
    want = data.reshape(-1, ppc, 2, plen).transpose(0, 2, 1, 3)
    want_present = np.ones_like(present)
    for i, s in gap:
        want_present[i // ppc, s, i % ppc] = False
    np.testing.assert_array_equal(present, want_present)
    np.testing.assert_array_equal(got[present], want[present])
    assert res["tcp"] == 100_000
    return res["stats"], res["passed"]


def check_counters(st, passed, *, nidx, gap, plen):
    assert st["engine"] == "xdp"
    assert st["kernel_drops"] == 0
    s0, s1 = st["streams"]
    ngap = [sum(1 for g in gap if g[1] == s) for s in (0, 1)]
    assert (s0["received"], s1["received"]) == (nidx - ngap[0], nidx - ngap[1])
    assert (s0["missing"], s1["missing"]) == tuple(ngap)
    assert (s0["duplicate"], s1["duplicate"], s0["late"], s1["late"]) == (1, 0, 0, 1)
    assert (st["foreign"], st["malformed"]) == (1, 3)
    assert s0["bytes"] == s0["received"] * plen
    assert st["packets"] == 2 * nidx - len(gap) + 6
    x = st["xdp"]
    assert x["matched"] == st["packets"]
    assert x["no_socket"] == x["cut"] == x["rx_dropped"] == x["rx_ring_full"] == 0
    # Other ports went to the kernel stack: the warm-up and three datagrams.
    assert len(passed) == 4 and passed[1:] == [plen + 7] * 3


@pytest.mark.netns
@pytest.mark.parametrize("plen", [1000, 8192], ids=["1000B", "jumbo8192B"])
@pytest.mark.parametrize("mode", ["native", "skb"])
def test_xdp_counts_every_kind_of_packet_exactly_over_a_veth(veth, tmp_path, mode, plen):
    nidx = 400 if plen < 4096 else 160
    gap = {(7, 1), (100, 0), (101, 0), (133, 1)}
    st, passed = capture_over_veth(veth, tmp_path, mode=mode, plen=plen, nidx=nidx, gap=gap)
    check_counters(st, passed, nidx=nidx, gap=gap, plen=plen)
    x = st["xdp"]
    assert (x["interface"], x["queue"], x["mode"]) == (veth["rx_if"], 0, mode)
    # veth has no zero-copy; the 9000-byte MTU needs multi-buffer (kernel 6.6+), and a
    # jumbo frame spans three 4 KiB chunks yet arrived whole.
    assert x["zero_copy"] is False and x["multi_buffer"] is True
    assert x["frame_size"] == 4096


@pytest.mark.netns
def test_xdp_native_mode_takes_a_udp_gso_sender(veth, tmp_path):
    """With our program attached natively the kernel turns GSO off on the veth's peer,
    so the repository's GSO sender is segmented before XDP sees it."""
    nidx, plen, gap = 512, 1000, {(3, 0), (300, 1)}
    st, passed = capture_over_veth(
        veth, tmp_path, mode="native", plen=plen, nidx=nidx, gap=gap, gso=True
    )
    check_counters(st, passed, nidx=nidx, gap=gap, plen=plen)


@pytest.mark.netns
def test_xdp_errors_are_clear(veth):
    env = ["ip", "netns", "exec", veth["rx_ns"], sys.executable, "-c"]
    script = textwrap.dedent(
        """
        import sys
        from voltstream import _core
        from voltstream.errors import VoltstreamError
        bind = sys.argv[1]
        first = _core.Capture("counter", bind, 4, payload_len=8, engine="xdp")
        first.start()
        errors = []
        for kw in ({"xdp_queue": 3}, {}):
            try:
                _core.Capture("counter", bind.rsplit(":", 1)[0] + ":0", 4, payload_len=8,
                              engine="xdp", **kw).start()
                errors.append("started")
            except VoltstreamError as e:
                errors.append(str(e))
        first.stop()
        print("\\n".join(errors))
        """
    )
    r = subprocess.run([*env, script, f"{veth['rx']}:7149"], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    queue, busy = r.stdout.strip().splitlines()
    assert "queue 3" in queue and "receive queue" in queue, queue
    assert "already reads queue 0" in busy, busy


def test_xdp_argument_errors_need_no_privileges():
    with pytest.raises(ConfigError, match="unknown XDP mode"):
        _core.Capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp", xdp_mode="zc")
    cap = _core.Capture("counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp")
    assert cap.stats()["engine"] == "xdp" and "xdp" not in cap.stats()
    bad = _core.Capture(
        "counter", "127.0.0.1:0", 4, payload_len=8, engine="xdp", interface="vs-nope0"
    )
    with pytest.raises(VoltstreamError, match="vs-nope0|without AF_XDP"):
        bad.start()
