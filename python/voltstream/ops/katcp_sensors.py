"""katcp sensors of a run (``--katcp-sensors HOST:PORT`` on capture and fold): the
counters table (counters.py) served as aiokatcp sensors, for telescope control systems
that speak katcp rather than Prometheus.

One sensor per sample, refreshed from the run's board once per interval on the
server's own event loop (a thread of its own, as fengine/control.py runs its
server). Names follow katcp usage, dashes and dots: ``voltstream_stream_packets_total
{stream="1", kind="missing"}`` is ``stream-packets.stream1.missing``, a kind or state
label by its value alone. Sensors appear with the first report (once the capture is
open). A loss kind (missing, late, dropped, invalid, malformed) above zero has status
``warn``; every other reading is ``nominal``. The info sample (configuration) has no
sensor: katcp's ``?version-list`` and the verb's stderr carry that.
"""

from __future__ import annotations

import asyncio
import re
import threading

import aiokatcp

from voltstream.errors import ConfigError
from voltstream.ops.board import RunStatus
from voltstream.ops.counters import LOSS_KINDS, Sample, samples

#: Labels that stand for themselves in a sensor name (the value alone).
_BARE = ("kind", "state")
#: Labels left out of sensor names: text that other labels already identify.
_SKIP = ("label", "cpu")


def sensor_name(s: Sample) -> str:
    """A sample's katcp sensor name (letters, digits, '_', '.', '-')."""
    base = s.name.removeprefix("voltstream_").removesuffix("_total").replace("_", "-")
    parts = [base]
    for k in sorted(s.labels, key=lambda k: (k in _BARE, k)):
        if k in _SKIP or not s.labels[k]:
            continue
        v = re.sub(r"[^A-Za-z0-9_-]", "_", s.labels[k])
        parts.append(v if k in _BARE else f"{k}{v}")
    return ".".join(parts)


class _Server(aiokatcp.DeviceServer):
    VERSION = "voltstream-run-1.0"
    BUILD_STATE = "voltstream"


class KatcpSensors:
    """Serves ``board``'s numbers as katcp sensors on ``address`` (HOST:PORT; port 0
    picks a free one) until `close`."""

    def __init__(self, board: RunStatus, address: str, interval_s: float = 1.0) -> None:
        host, _, port = address.rpartition(":")
        self.board, self.interval_s = board, interval_s
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _Server | None = None
        self.address = ""
        self._thread = threading.Thread(
            target=self._run, args=(host, int(port)), name="voltstream-katcp", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise ConfigError(f"--katcp-sensors {address}: cannot serve there: {self._error}")

    def _run(self, host: str, port: int) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve(loop, host, port))
        except BaseException as e:  # handed to the starting thread
            self._error = e
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> None:
        server = _Server(host, port)
        await server.start()
        bound = server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        self._loop, self._server = loop, server
        self._ready.set()
        refresh = loop.create_task(self._refresh(server))
        await server.join()
        refresh.cancel()

    async def _refresh(self, server: _Server) -> None:
        while True:
            self.update(server)
            await asyncio.sleep(self.interval_s)

    def update(self, server: _Server) -> None:
        """Sets every sensor from the board's report now (on the server's loop)."""
        for s in samples(self.board.report()):
            if s.kind == "histogram":  # katcp has no histogram sensor
                continue
            name = sensor_name(s)
            integral = float(s.value).is_integer() and s.name.endswith("_total")
            sensor = server.sensors.get(name)
            if sensor is None:
                sensor = aiokatcp.Sensor(int if integral else float, name, s.help)
                server.sensors.add(sensor)
            value = int(s.value) if sensor.stype is int else float(s.value)
            loss = s.labels.get("kind") in LOSS_KINDS and value > 0
            status = aiokatcp.Sensor.Status.WARN if loss else aiokatcp.Sensor.Status.NOMINAL
            sensor.set_value(value, status=status)

    def close(self) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self.update, server)  # the final numbers
                loop.call_soon_threadsafe(server.halt)
            except RuntimeError:  # the loop has ended already
                pass
        self._thread.join()
