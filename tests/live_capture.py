"""A real `voltstream capture --metrics` process on loopback, for the metrics and status
tests: counter packets of two streams, sent by the test, scraped over HTTP."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from loopback import free_bind, send
from voltstream.ops.status_view import scrape_metrics

#: Packets per stream per chunk of the capture (the tests send whole chunks).
PPC = 16
PAYLOAD = 64
COUNTER_STREAM = 'format = "counter"\nstreams = 2\npayload_len = 64\n'


def packets(first: int, last: int, skip: set[tuple[int, int]] = frozenset()) -> list[bytes]:
    """Counter packets of indices first..last-1 in both streams, but (index, stream) in
    ``skip`` (missing on purpose)."""
    return [
        struct.pack(">QH", i, s) + bytes([i % 256]) * PAYLOAD
        for i in range(first, last)
        for s in (0, 1)
        if (i, s) not in skip
    ]


class LiveCapture:
    """``voltstream capture`` (or the ``verb`` and its own options, e.g. record) of two
    counter streams with ``--metrics 127.0.0.1:0``, ``--report`` to
    ``tmp/report.json``; ends after ``idle_timeout`` s without packets."""

    def __init__(
        self, tmp: Path, idle_timeout: float = 3.0, verb: tuple = ("capture",), extra: tuple = ()
    ) -> None:
        stream = tmp / "counter.toml"
        stream.write_text(COUNTER_STREAM)
        self.bind = free_bind()
        self.report_path = tmp / "report.json"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voltstream.cli", *verb, "--stream", str(stream),
             "--listen", self.bind, "--duration", "120", "--idle-timeout", str(idle_timeout),
             # A few chunks of window: the tests read counters mid-run, once the chunks
             # they sent (a dozen) have left it (the default holds 4096 packets).
             "--packets-per-chunk", str(PPC), "--window", "4", "--metrics", "127.0.0.1:0",
             "--report", str(self.report_path), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.address = self.katcp = ""
        listening = False
        assert self.proc.stderr is not None
        while not (self.address and listening):
            line = self.proc.stderr.readline()
            assert line, f"the capture ended before it listened: {self.proc.communicate()}"
            if "metrics on http://" in line:
                self.address = line.split("http://")[1].split("/")[0]
            if "katcp sensors on " in line:
                self.katcp = line.split("katcp sensors on ")[1].strip()
            listening = listening or "listening on" in line

    def send(self, pkts: list[bytes]) -> None:
        send(self.bind, pkts, pace_every=64)

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://{self.address}/status.json", timeout=5) as r:
            return json.load(r)

    def scrape(self) -> dict[tuple[str, tuple], float]:
        """Every sample of /metrics: (sample name, sorted labels) -> value."""
        return scrape_metrics(self.address)

    def scrape_when_received(self, n: int) -> dict[tuple[str, tuple], float]:
        """The first scrape that counts ``n`` received packets (the socket may still
        hold some when the sender returns)."""
        return self.scrape_when(("voltstream_capture_packets_total", (("kind", "received"),)), n)

    def scrape_when(self, key: tuple[str, tuple], n: int) -> dict[tuple[str, tuple], float]:
        """The first scrape whose sample ``key`` is ``n``."""
        for _ in range(400):
            got = self.scrape()
            if got.get(key) == n:
                return got
            time.sleep(0.025)  # the socket still holds some: ask again
        raise AssertionError(f"{key} never reached {n}: {got.get(key)}")

    def finish(self) -> dict:
        """Waits for the idle timeout to end the run; its --report."""
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return json.loads(self.report_path.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
