"""Loopback helpers for capture tests: a free UDP port, and a sender that starts when
the capture is bound (its `on_start`), bounded by the packets it is given."""

from __future__ import annotations

import socket
import threading
import time

from voltstream.testing import free_ports  # noqa: F401 (the tests import it from here)


def free_bind() -> str:
    """127.0.0.1:PORT with a port no socket holds right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def udp_receiver() -> socket.socket:
    """A UDP socket bound to a free loopback port, a 4 MiB queue, reads time out
    after 2 s: where a test receives what a sender under test sends."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2.0)
    return rx


def address(s: socket.socket) -> str:
    """HOST:PORT a socket is bound to."""
    host, port = s.getsockname()[:2]
    return f"{host}:{port}"


def send(bind: str, packets, pace_every: int = 0) -> None:
    """Sends each packet (bytes-like rows) to ``bind``; with ``pace_every``, pauses 2 ms
    after every that many packets. Faults: voltstream.testing.FaultPlan, before."""
    host, port = bind.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        for k, p in enumerate(packets):
            tx.sendto(bytes(p), (host, int(port)))
            if pace_every and k % pace_every == pace_every - 1:
                time.sleep(0.002)


def sender(bind: str, packets, pace_every: int = 0):
    """An `on_start` callable: sends the packets from a thread of its own."""
    return lambda: threading.Thread(
        target=send, args=(bind, packets, pace_every), daemon=True
    ).start()


def wait_bound(bind: str, timeout: float = 30) -> None:
    """Returns once some socket holds ``bind`` (a process's, bound in its own time)."""
    host, port = bind.rsplit(":", 1)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, int(port)))
            except OSError:
                return
        time.sleep(0.02)
    raise AssertionError(f"nothing bound {bind} in {timeout} s")
