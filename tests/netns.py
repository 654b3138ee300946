"""A veth pair between two network namespaces, made and removed by a test.

Shared by the engines' veth tests (AF_XDP, DPDK, multicast). Only addresses
inside the two namespaces are used; deleting the namespaces (always, in the
finally clause) deletes the veth.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=10)


def veth_pair(prefix: str, net_base: int, mtu: int | None = 9000):
    """Generator for a pytest fixture: yields rx_ns, tx_ns, rx_if, tx_if, rx and tx
    (the receiver's and sender's addresses in a /30 of 10.<net_base + k>.x)."""
    tag = f"{os.getpid() % 1000}{int.from_bytes(os.urandom(2), 'little') % 1000}"
    rx_ns, tx_ns = f"{prefix}{tag}r", f"{prefix}{tag}t"
    rx_if, tx_if = f"{prefix}{tag}a", f"{prefix}{tag}b"
    net = f"10.{net_base + int(tag) % 50}.{int(tag) % 250}"
    size = ("mtu", str(mtu)) if mtu else ()
    try:
        sh("ip", "netns", "add", rx_ns)
        sh("ip", "netns", "add", tx_ns)
        sh("ip", "link", "add", rx_if, "netns", rx_ns, *size, "type", "veth",
           "peer", "name", tx_if, "netns", tx_ns, *size)  # fmt: skip
        for ns, ifname, host in ((rx_ns, rx_if, 1), (tx_ns, tx_if, 2)):
            sh("ip", "-n", ns, "addr", "add", f"{net}.{host}/30", "dev", ifname)
            sh("ip", "-n", ns, "link", "set", ifname, "up")
        yield {
            "rx_ns": rx_ns,
            "tx_ns": tx_ns,
            "rx_if": rx_if,
            "tx_if": tx_if,
            "rx": f"{net}.1",
            "tx": f"{net}.2",
        }
    finally:
        for ns in (rx_ns, tx_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@contextmanager
def receiver(ns: str, script: str, *args: str) -> Iterator[subprocess.Popen]:
    """``python -c script args`` in namespace ``ns``, talking over pipes: the receiver of
    a veth test. Killed on the way out if it is still running (a failed assertion)."""
    rx = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield rx
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait(timeout=10)


def stop_receiver(rx: subprocess.Popen) -> str:
    """Tells the receiver to stop; returns the last line it printed (its report)."""
    stdout, stderr = rx.communicate("stop\n", timeout=30)
    assert rx.returncode == 0, stderr
    return stdout.strip().splitlines()[-1]


def run_in(ns: str, script: str, *args: str, timeout: float = 60) -> str:
    """Runs ``python -c script args`` in namespace ``ns`` to the end (a sender); returns
    what it printed."""
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args],
        timeout=timeout, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout
