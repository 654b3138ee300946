"""Multicast capture over a veth pair between two network namespaces that each test creates
and removes: two joined groups carry the two streams of one timeline, and datagrams to groups
the capture did not join (one joined by another socket of the receiver, one by nobody) are
never counted; the IGMP membership is in the kernel while the capture runs and gone after."""

import json
import os
import socket
import struct
import textwrap
import time

import pytest

from capture_spec import capture
from netns import receiver, run_in, stop_receiver, veth_pair
from voltstream.errors import ConfigError
from voltstream.service.exit_status import NO_DATA

PORT = 7160
GROUPS = ("239.20.1.1", "239.20.1.2")  # stream 0, stream 1
OTHER = "239.20.1.3"  # joined by another socket of the receiver, on another port
NOBODY = "239.20.1.4"  # joined by nobody

RECEIVER = textwrap.dedent(
    """
    import json, socket, struct, sys
    from voltstream import _core
    engine, iface, port, g0, g1, other = sys.argv[1:7]
    port = int(port)

    def igmp(dev):
        groups, cur = [], False
        for line in open("/proc/net/igmp").read().splitlines()[1:]:
            if not line[:1].isspace():
                cur = line.split(":")[0].split()[1] == dev  # "7\tvsn123456a: ..."
            elif cur:
                word = int(line.split()[0], 16)
                groups.append(socket.inet_ntoa(struct.pack("=I", word)))
        return groups

    # Another program's membership of OTHER, on another port: with the default
    # IP_MULTICAST_ALL=1 its datagrams to our port would reach our socket too.
    helper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    helper.bind(("0.0.0.0", port + 1))
    mreq = socket.inet_aton(other) + struct.pack("=II", 0, socket.if_nametoindex(iface))
    helper.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    kw = {"xdp_mode": "native"} if engine == "xdp" else {}
    cap = _core.Capture({
        "format": {"name": "counter", "payload_len": 256, "streams": 2},
        "network": {"bind": f"0.0.0.0:{port}", "interface": iface, "multicast": [g0, g1]},
        "engine": {"kind": engine, **kw},
        "chunks": {"packets_per_chunk": 16, "nchunks": 64, "window": 3},
    })
    cap.start()
    print(json.dumps({"address": cap.address, "igmp": igmp(iface)}), flush=True)
    sys.stdin.readline()
    cap.stop()
    nchunks = 0
    while (ch := cap.next_chunk(0.2)) is not None:
        nchunks += 1
        ch.release()
    print(json.dumps({"stats": cap.stats(), "igmp": igmp(iface), "chunks": nchunks}), flush=True)
    """
)

SENDER = textwrap.dedent(
    """
    import socket, struct, sys, time
    src, port, nidx, g0, g1, other, nobody, gaps = sys.argv[1:9]
    port, nidx = int(port), int(nidx)
    gap = {tuple(map(int, g.split("."))) for g in gaps.split(",") if g}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    pk = lambda i, st: struct.pack(">QH", i, st) + bytes((i * 7 + st + k) % 256 for k in range(256))
    for i in range(nidx):
        for st, g in ((0, g0), (1, g1)):
            if (i, st) not in gap:
                s.sendto(pk(i, st), (g, port))
        # Not ours: would be duplicates of stream 0 if they were counted.
        s.sendto(pk(i, 0), (other, port))
        s.sendto(pk(i, 0), (nobody, port))
        if i % 32 == 31:
            time.sleep(0.002)
    """
)


@pytest.fixture
def veth():
    """Two namespaces joined by a veth; deleting the namespaces (always) deletes the veth."""
    yield from veth_pair("vsn", 200, mtu=None)


def run_multicast(v, engine, nidx, gap):
    with receiver(v["rx_ns"], RECEIVER, engine, v["rx_if"], str(PORT), *GROUPS, OTHER) as rx:
        line = rx.stdout.readline()
        assert line, rx.stderr.read()
        started = json.loads(line)
        gaps = ",".join(f"{i}.{s}" for i, s in gap)
        run_in(v["tx_ns"], SENDER, v["tx"], str(PORT), str(nidx), *GROUPS, OTHER, NOBODY, gaps)
        return started, json.loads(stop_receiver(rx))


@pytest.mark.netns
@pytest.mark.parametrize("engine", ["socket", "packet_ring", "xdp"])
def test_two_groups_assemble_onto_one_timeline_and_other_groups_are_not_counted(veth, engine):
    nidx, gap = 320, {(5, 0), (77, 1), (200, 1)}
    started, done = run_multicast(veth, engine, nidx, gap)
    assert started["address"] == f"0.0.0.0:{PORT}"
    # Joined while capturing (the kernel sent the IGMP reports); OTHER is the helper's.
    assert set(GROUPS) | {OTHER} <= set(started["igmp"]), started["igmp"]
    assert NOBODY not in started["igmp"]
    # Left on stop; the helper socket still holds OTHER.
    assert not set(GROUPS) & set(done["igmp"]), done["igmp"]
    assert OTHER in done["igmp"]
    st = done["stats"]
    assert st["engine"] == engine and st["multicast"] == list(GROUPS)
    s0, s1 = st["streams"]
    assert (s0["received"], s1["received"]) == (nidx - 1, nidx - 2)
    assert (s0["missing"], s1["missing"]) == (1, 2)
    assert s0["duplicate"] == s1["duplicate"] == s0["late"] == s1["late"] == 0
    assert st["foreign"] == st["malformed"] == st["kernel_drops"] == 0
    assert st["packets"] == 2 * nidx - len(gap)
    assert done["chunks"] == nidx // 16
    nic = st["host"]["interface"]
    assert nic["name"] == veth["rx_if"] and nic["rx_dropped"] == 0


def test_multicast_arguments_are_checked_without_privileges():
    with pytest.raises(ConfigError, match="not an IPv4 multicast group"):
        capture("counter", "0.0.0.0:7000", 4, payload_len=8, multicast=["10.0.0.1"])
    with pytest.raises(ConfigError, match="unicast address"):
        capture("counter", "127.0.0.1:7000", 4, payload_len=8, multicast=["239.1.1.1"])
    with pytest.raises(ConfigError, match="not an IP address"):
        capture("counter", "0.0.0.0:7000", 4, payload_len=8, multicast=["239.1.1"])
    cap = capture("counter", "239.1.1.1:7000", 4, payload_len=8, multicast=["239.1.1.2"])
    assert cap.stats()["multicast"] == ["239.1.1.1", "239.1.1.2"]
    ring = capture(
        "counter", "0.0.0.0:7000", 4, payload_len=8, engine="packet_ring", multicast=["239.1.1.1"]
    )
    if os.geteuid() == 0:
        with pytest.raises(ConfigError, match="needs the interface"):
            ring.start()


def test_loopback_multicast_capture_with_the_socket_engine():
    """A group on loopback in the host namespace (no IGMP leaves the machine)."""
    group = "239.255.60.7"
    with pytest.raises(ConfigError, match="port 0"):  # a group capture needs its port
        capture("counter", f"{group}:0", 4, payload_len=8, interface="lo")
    port = 7161
    cap = capture("counter", f"{group}:{port}", 4, payload_len=8, engine="socket", interface="lo")
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    with cap:
        for i in range(8):
            tx.sendto(struct.pack(">QH", i, 0) + bytes(8), (group, port))
            tx.sendto(struct.pack(">QH", i + 100, 0) + bytes(8), ("239.255.60.8", port))
        time.sleep(0.1)
    st = cap.stats()
    assert st["streams"][0]["received"] == 8 and st["packets"] == 8


def test_cli_capture_joins_groups_and_reports_them(tmp_path, capsys):
    from voltstream.cli import main

    report = tmp_path / "r.json"
    rc = main(["capture", "--listen", "239.255.60.9:7162", "--multicast", "239.255.60.10",
               "--interface", "lo", "--engine", "socket", "--duration", "0.3",
               "--report", str(report)])  # fmt: skip
    assert rc == NO_DATA  # nothing was sent to the groups: said, and not a success
    out = capsys.readouterr().out
    assert "multicast groups joined: 239.255.60.9, 239.255.60.10" in out
    assert "kernel counters during the run" in out and "[network namespace]" in out
    eng = json.loads(report.read_text())["engine"]
    assert eng["multicast"] == ["239.255.60.9", "239.255.60.10"]
    assert eng["host"]["interface"]["name"] == "lo"
    assert set(eng["memory"]) == {"bytes", "huge_pages", "locked", "numa_node", "warnings"}
    with pytest.raises(SystemExit):
        main(["capture", "--listen", "0.0.0.0:7162", "--multicast", "10.1.1.1", "--duration", "1"])
    assert "not an IPv4 multicast group" in capsys.readouterr().err
