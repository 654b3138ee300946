"""Nodes in network namespaces (voltstream.cluster.netns): every node reaches the host's
address, the host reaches every node's, nodes reach each other, datagrams of a YNAO
frame cross unfragmented, and nothing is left once the context is gone (after an
error, a failed set-up, or with a process still inside a namespace too). The tests
that make namespaces need root; without it they are skipped, and the refusal is
tested instead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from cli_process import reaped
from netns import receiver, run_in, stop_receiver
from voltstream.cluster import netns
from voltstream.cluster.netns import NodeNamespaces, NodeNet, namespaces_available
from voltstream.errors import ConfigError, VoltstreamError

#: The tests that make namespaces: skipped only when not root (CI runs as root).
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

# A UDP receiver bound to argv[1]:argv[2] inside a namespace: says "ready", then prints
# what arrives (within 10 s) as "FROM_ADDR LENGTH TEXT".
UDP_RECEIVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.settimeout(10)
    print("ready", flush=True)
    data, peer = s.recvfrom(65536)
    print(peer[0], len(data), data[:5].decode(), flush=True)
    sys.stdin.readline()
    """
)

# Sends one datagram of argv[3] bytes starting with b"hello" to argv[1]:argv[2], with
# fragmentation forbidden (IP_PMTUDISC_DO): too big for the path MTU is an error.
UDP_SENDER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER, IP_PMTUDISC_DO (Linux)
    size = int(sys.argv[3])
    s.sendto(b"hello" + bytes(size - 5), (sys.argv[1], int(sys.argv[2])))
    """
)

TCP_CLIENT = textwrap.dedent(
    """
    import socket, sys
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    c.sendall(b"node here")
    print(c.recv(64).decode())
    """
)

YNAO_FRAME = 8216  # one datagram of this size must cross without fragments (MTU 9000)
# IP_MTU_DISCOVER = IP_PMTUDISC_DO: a datagram over the path MTU fails instead of being
# fragmented (Linux's numbers: Python's socket module does not always name them).
NO_FRAGMENTS = (10, 2)


def _udp_socket(addr: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 0))
    s.settimeout(10)
    return s


def _ours(tag: str) -> tuple[str, str]:
    """What `ip netns list` and `ip link` say of the run with this tag."""
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            timeout=10).stdout  # fmt: skip
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           timeout=10).stdout  # fmt: skip
    return (
        "\n".join(line for line in spaces.splitlines() if tag in line),
        "\n".join(line for line in links.splitlines() if tag in line),
    )


@pytest.fixture(scope="module")
def nets():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    with NodeNamespaces(3) as made:
        yield made


# --- without privileges ---------------------------------------------------------


def test_not_root_is_refused_with_a_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ok, why = namespaces_available()
    assert ok is False and "root" in why
    ns = NodeNamespaces(2)
    with pytest.raises(VoltstreamError, match="cannot make node namespaces: .*root"):
        ns.__enter__()
    assert ns.nets == []


def test_arguments_are_checked():
    with pytest.raises(ConfigError, match="1 .. 253"):
        NodeNamespaces(0)
    with pytest.raises(ConfigError, match="exceed 15 characters"):
        NodeNamespaces(3, prefix="averylongprefix")
    with pytest.raises(ConfigError, match="letters and digits"):
        NodeNamespaces(3, prefix="a b")
    with pytest.raises(ConfigError, match="MTU"):
        NodeNamespaces(3, mtu=10)
    ns = NodeNamespaces(12)
    assert all(len(name) <= 15 for name in [ns.bridge, *ns.host_ifs, *ns.node_ifs])
    assert NodeNet("n", "10.1.2.3", "10.1.2.1").exec_prefix() == ["ip", "netns", "exec", "n"]


# --- with namespaces ------------------------------------------------------------


@pytest.mark.netns
@root_only
def test_layout(nets):
    assert namespaces_available() == (True, "")
    assert len(nets) == 3 and len({n.name for n in nets}) == 3
    host = nets[0].host_addr
    assert all(n.host_addr == host for n in nets)
    assert host.endswith(".1")
    assert [n.node_addr.rsplit(".", 1)[1] for n in nets] == ["2", "3", "4"]


@pytest.mark.netns
@root_only
def test_node_reaches_the_host_over_udp(nets):
    with _udp_socket(nets[0].host_addr) as rx:
        port = rx.getsockname()[1]
        run_in(nets[0].name, UDP_SENDER, nets[0].host_addr, str(port), str(YNAO_FRAME))
        data, peer = rx.recvfrom(65536)
    assert len(data) == YNAO_FRAME and data.startswith(b"hello")
    assert peer[0] == nets[0].node_addr  # from its own address


@pytest.mark.netns
@root_only
def test_host_reaches_a_socket_bound_to_the_node_address(nets):
    node = nets[1]
    port = 7231
    with receiver(node.name, UDP_RECEIVER, node.node_addr, str(port)) as rx:
        assert rx.stdout.readline().strip() == "ready", rx.stderr.read()
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.setsockopt(socket.IPPROTO_IP, *NO_FRAGMENTS)
        with tx:
            tx.sendto(b"hello" + bytes(YNAO_FRAME - 5), (node.node_addr, port))
        line = stop_receiver(rx)
    assert line == f"{node.host_addr} {YNAO_FRAME} hello"


@pytest.mark.netns
@root_only
def test_node_connects_to_a_tcp_listener_on_the_host_address(nets):
    with socket.create_server((nets[1].host_addr, 0)) as server:
        server.settimeout(10)
        port = server.getsockname()[1]
        client = subprocess.Popen(
            [*nets[1].exec_prefix(), sys.executable, "-c", TCP_CLIENT, nets[1].host_addr,
             str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with reaped(client):
            conn, peer = server.accept()
            with conn:
                conn.settimeout(10)
                assert conn.recv(64) == b"node here"
                conn.sendall(b"scheduler here")
            out, err = client.communicate(timeout=30)
    assert client.returncode == 0, err
    assert out.strip() == "scheduler here"
    assert peer[0] == nets[1].node_addr


@pytest.mark.netns
@root_only
def test_nodes_reach_each_other(nets):
    a, b = nets[0], nets[1]
    port = 7232
    with receiver(b.name, UDP_RECEIVER, b.node_addr, str(port)) as rx:
        assert rx.stdout.readline().strip() == "ready", rx.stderr.read()
        run_in(a.name, UDP_SENDER, b.node_addr, str(port), str(YNAO_FRAME))
        line = stop_receiver(rx)
    assert line.split()[:3] == [a.node_addr, str(YNAO_FRAME), "hello"]


# --- clean-up -------------------------------------------------------------------


@pytest.mark.netns
@root_only
def test_nothing_is_left_after_exit_even_after_an_error():
    ns = NodeNamespaces(2)
    with pytest.raises(RuntimeError, match="boom"), ns as made:
        spaces, links = _ours(ns.tag)
        assert all(n.name in spaces for n in made)
        assert ns.bridge in links and all(h in links for h in ns.host_ifs)
        raise RuntimeError("boom")
    assert _ours(ns.tag) == ("", "")
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, timeout=10)
    assert str(ns.subnet) not in routes.stdout


@pytest.mark.netns
@root_only
def test_a_failed_set_up_removes_what_it_made(monkeypatch):
    real = netns._ip

    def failing(*args, check=True):
        if "route" in args and "default" in args:  # the last step of a node's set-up
            raise VoltstreamError("injected failure")
        return real(*args, check=check)

    monkeypatch.setattr(netns, "_ip", failing)
    ns = NodeNamespaces(2)
    with pytest.raises(VoltstreamError, match="injected failure"), ns:
        pass
    monkeypatch.undo()
    assert ns.nets == []
    assert _ours(ns.tag) == ("", "")


@pytest.mark.netns
@root_only
def test_a_process_left_in_a_namespace_leaves_no_interface_behind():
    """`ip netns del` only drops the name while a process holds the namespace; the
    veths are deleted explicitly, so the host is clean anyway."""
    ns = NodeNamespaces(1)
    with ns as made:
        sleeper = subprocess.Popen([*made[0].exec_prefix(), "sleep", "60"])
    try:
        assert _ours(ns.tag) == ("", "")
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
