"""``--katcp-sensors HOST:PORT``: a live loopback capture's counters read back as katcp
sensors by a real aiokatcp client, equal to the Prometheus scrape of the same moment."""

from __future__ import annotations

import asyncio
import time

import aiokatcp
import pytest

from live_capture import PPC, LiveCapture, packets
from voltstream.ops.counters import Sample
from voltstream.ops.katcp_sensors import sensor_name


def _sensor_values(address: str, *names: str) -> dict[str, tuple[str, str]]:
    """(status, value) of each sensor, by ?sensor-value."""

    async def ask() -> dict[str, tuple[str, str]]:
        host, port = address.rsplit(":", 1)
        client = await asyncio.wait_for(aiokatcp.Client.connect(host, int(port)), 5)
        try:
            out = {}
            for name in names:
                _, informs = await client.request("sensor-value", name)
                args = [a.decode() for a in informs[0].arguments]
                out[name] = (args[3], args[4])  # timestamp, count, name, status, value
            return out
        finally:
            client.close()
            await client.wait_closed()

    return asyncio.run(ask())


@pytest.fixture
def capture(tmp_path):
    run = LiveCapture(tmp_path, idle_timeout=30, extra=("--katcp-sensors", "127.0.0.1:0"))
    yield run
    run.kill()


def test_capture_counters_are_katcp_sensors(capture):
    sent = packets(0, 12 * PPC, skip={(20, 1)})
    capture.send(sent)
    scraped = capture.scrape_when_received(len(sent))
    names = ["stream-packets.stream0.received", "stream-packets.stream1.missing",
             "capture-packets.received", "capture-datagrams", "capture-free-chunks",
             "thread-packets.thread0.received"]  # fmt: skip
    for _ in range(200):  # made with the first report, refreshed once a second
        try:
            got = _sensor_values(capture.katcp, *names)
        except aiokatcp.FailReply:  # not made yet
            got = {}
        if got.get("capture-packets.received", ("", ""))[1] == str(len(sent)):
            break
        time.sleep(0.05)
    assert got["stream-packets.stream0.received"] == ("nominal", str(12 * PPC))
    assert got["stream-packets.stream1.missing"] == ("warn", "1")  # a loss: warn
    assert got["capture-datagrams"][1] == str(
        int(scraped[("voltstream_capture_datagrams_total", ())])
    )
    assert got["thread-packets.thread0.received"][1] == str(len(sent))
    assert float(got["capture-free-chunks"][1]) >= 0


def test_sensor_names_are_katcp_names():
    s = Sample("voltstream_stream_packets_total", "counter", "", 1,
               {"stream": "3", "label": "VDIF thread 3 (pol 1)", "kind": "missing"})  # fmt: skip
    assert sensor_name(s) == "stream-packets.stream3.missing"
    s = Sample("voltstream_host_interface_rx_total", "counter", "", 1,
               {"interface": "eth0.100", "kind": "rx_dropped"})  # fmt: skip
    assert sensor_name(s) == "host-interface-rx.interfaceeth0_100.rx_dropped"
