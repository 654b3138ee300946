"""The kernel's counters outside the capture (stats()["host"]) and the chunk pool's memory
placement (stats()["memory"]), for real: a socket overflowed in a network namespace of its own
(so the namespace-wide UDP counters hold only this capture's drops), and huge pages reserved
through /proc/sys/vm/nr_hugepages (restored afterwards)."""

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from capture_spec import capture
from voltstream.capture.run import CaptureReport

OVERFLOW = textwrap.dedent(
    """
    import json, socket, time
    from voltstream import _core
    # Tiny receive buffer, paused: nothing is read while 300 datagrams arrive.
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": 1390},
        "network": {"bind": "127.0.0.1:0", "queue_bytes": 1},
        "engine": {"kind": "socket"},
        "chunks": {"packets_per_chunk": 4, "nchunks": 128},
    })
    cap.start(paused=True)
    host, port = cap.address.rsplit(":", 1)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(300):
        tx.sendto(i.to_bytes(8, "big") + bytes(2) + bytes(1390), (host, int(port)))
    time.sleep(0.1)
    cap.resume()
    time.sleep(0.2)
    cap.stop()
    print(json.dumps(cap.stats()))
    """
)


@pytest.fixture
def netns():
    name = f"vsn{os.getpid() % 1000}{int.from_bytes(os.urandom(2), 'little') % 1000}h"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=10)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


@pytest.mark.netns
def test_rcvbuf_errors_of_the_namespace_match_the_sockets_own_drops(netns):
    r = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", OVERFLOW],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    drops = st["kernel_drops"]
    assert drops > 0 and st["packets"] > 0, st
    assert st["packets"] + drops == 300
    udp = st["host"]["udp"]
    # Alone in its namespace, the capture's socket is the only one that overflowed.
    assert udp["scope"] == "network namespace"
    assert udp["rcvbuf_errors"] == drops
    assert udp["in_errors"] >= udp["rcvbuf_errors"]
    assert udp["no_ports"] == 0 and udp["in_csum_errors"] == 0
    sn = st["host"]["softnet"]
    assert sn["scope"] == "host" and sn["dropped"] >= 0 and sn["time_squeeze"] >= 0
    nic = st["host"]["interface"]
    assert nic["name"] == "lo" and nic["rx_dropped"] == 0
    # The end-of-run text labels them as context.
    text = "\n".join(CaptureReport(format="counter", bind="x", engine=st).summary_lines())
    assert f"udp rcvbuf_errors={drops} " in text and "[network namespace]" in text
    assert "[host]" in text and "lo rx_dropped=0" in text


def test_host_counters_before_start_are_absent_not_zero():
    cap = capture("counter", "127.0.0.1:0", 4, payload_len=8)
    h = cap.stats()["host"]
    assert h["udp"]["rcvbuf_errors"] is None and h["softnet"]["dropped"] is None
    assert h["interface"] is None
    m = cap.stats()["memory"]
    assert m == {"bytes": 0, "huge_pages": False, "locked": False, "numa_node": None,
                 "warnings": []}  # fmt: skip


def meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
# 2 streams x 128 packets x 8192 bytes: one 2 MiB huge page per chunk.
POOL = {"payload_len": 8192, "streams": 2, "nchunks": 4, "window": 2}


def send_and_check(cap):
    host, port = cap.address.rsplit(":", 1)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = np.random.default_rng(3).integers(0, 256, (128, 2, 8192), dtype=np.uint8)
    for i in range(128):
        for s in range(2):
            tx.sendto(struct.pack(">QH", i, s) + data[i, s].tobytes(), (host, int(port)))
        time.sleep(0.0005)
    time.sleep(0.1)
    cap.stop()
    ch = cap.next_chunk(1.0)
    got = np.frombuffer(ch, np.uint8).reshape(2, 128, 8192)
    np.testing.assert_array_equal(got, data.transpose(1, 0, 2))
    del got
    ch.release()


@pytest.mark.netns
def test_chunk_pool_uses_reserved_huge_pages_and_warns_without_them():
    before = NR_HUGEPAGES.read_text()
    free = meminfo("HugePages_Free")
    try:
        # As the machine is: without 4 free huge pages the pool falls back, with a warning.
        if free < POOL["nchunks"]:
            cap = capture("counter", "127.0.0.1:0", 128, engine="socket", **POOL)
            cap.start()
            m = cap.stats()["memory"]
            assert not m["huge_pages"] and m["locked"]
            assert any("nr_hugepages" in w for w in m["warnings"]), m
            text = "\n".join(
                CaptureReport(format="counter", bind="x", engine=cap.stats()).summary_lines()
            )
            assert "huge pages no" in text and "warning: no huge pages" in text
            send_and_check(cap)
        # Reserve enough (restored below): the pool is on huge pages, no warning.
        NR_HUGEPAGES.write_text(str(int(before) + POOL["nchunks"]))
        assert meminfo("HugePages_Free") >= POOL["nchunks"], "the kernel could not reserve"
        cap = capture("counter", "127.0.0.1:0", 128, engine="socket", **POOL)
        cap.start()
        m = cap.stats()["memory"]
        assert m["huge_pages"] and m["locked"] and m["warnings"] == [], m
        assert m["bytes"] == POOL["nchunks"] * 2 * 2**20
        # The pool's pages are taken from the reserve while it lives.
        assert meminfo("HugePages_Total") - meminfo("HugePages_Free") >= POOL["nchunks"]
        send_and_check(cap)
        del cap
    finally:
        NR_HUGEPAGES.write_text(before)
    assert NR_HUGEPAGES.read_text() == before
