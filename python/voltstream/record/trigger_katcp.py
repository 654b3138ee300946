"""The katcp trigger server: ``--trigger-katcp HOST:PORT``, an aiokatcp DeviceServer
beside the HTTP one (record/trigger_http.py), in front of the same record/dumps.py
``Dumps``. Its requests are built into the very JSON body an HTTP trigger sends, so
each is decided, answered and counted as that trigger would be:

``?trigger-window START END [partial]``
    seconds since the stream's first sample (``{"start": .., "end": ..}``)
``?trigger-mjd START_MJD END_MJD [partial]``
    MJDs as decimal strings, exact (``{"start_mjd": .., "end_mjd": ..}``)
``?trigger-burst DM TIME [MARGIN [FREQ]]``
    a burst's arrival (``{"dm": .., "time": .., "margin": .., "freq": ..}``)
``?ring``
    what the ring holds and the counters (GET /ring's answer, as JSON)

A trigger replies ``ok PATH START_S END_S SAMPLES`` once the window is copied out of
the ring, or ``fail`` with the HTTP answer's ``error`` line. The server runs on a
thread of its own with its own event loop, and a trigger's copy runs off that loop,
in an executor thread: nothing here waits on, or for, the capture.
"""

# No ``from __future__ import annotations``: aiokatcp reads the request handlers'
# annotations at class creation to decode their arguments.

import asyncio
import json
import logging
import threading
from typing import Any

import aiokatcp

from voltstream import __version__
from voltstream.errors import ConfigError
from voltstream.record.dumps import Dumps

log = logging.getLogger("voltstream.record.trigger")

#: Each request's arguments, in order, as the keys of the trigger body they make.
ARGUMENTS = {
    "trigger-window": ("start", "end", "partial"),
    "trigger-mjd": ("start_mjd", "end_mjd", "partial"),
    "trigger-burst": ("dm", "time", "margin", "freq"),
}


def trigger_body(request: str, args: tuple[str, ...]) -> bytes:
    """The JSON body an HTTP trigger would send for ``?request args``: numbers stay the
    decimal strings they were written as (Dumps reads them exactly, as it reads an MJD
    string); ``partial`` becomes true, anything else there is passed on for Dumps to
    refuse, and so is an argument too many (an unknown key)."""
    names = ARGUMENTS[request]
    body: dict[str, Any] = {}
    for i, text in enumerate(args):
        key = names[i] if i < len(names) else f"argument-{i + 1}"
        body[key] = (text == "partial") or text if key == "partial" else text
    return json.dumps(body).encode()


class _Server(aiokatcp.DeviceServer):
    VERSION = "voltstream-triggers-1.0"
    BUILD_STATE = f"voltstream-{__version__}"

    def __init__(self, dumps: Dumps, host: str, port: int) -> None:
        super().__init__(host, port)
        self.dumps = dumps

    async def _trigger(self, request: str, args: tuple[str, ...]) -> tuple:
        raw = trigger_body(request, args)
        loop = asyncio.get_running_loop()
        try:  # the ring's copy in an executor thread: the loop keeps serving
            status, answer = await loop.run_in_executor(None, self.dumps.trigger, raw)
        except Exception as exc:  # a bug must not end the capture: answered, logged
            log.exception("katcp trigger failed")
            raise aiokatcp.FailReply(f"the trigger failed: {exc}") from None
        if status != 202:
            raise aiokatcp.FailReply(answer["error"])
        return answer["path"], answer["start_s"], answer["end_s"], answer["samples"]

    async def request_trigger_window(self, ctx: Any, *args: str) -> tuple:
        """Dump START..END s since the stream's first sample (?trigger-window START END
        [partial])."""
        return await self._trigger("trigger-window", args)

    async def request_trigger_mjd(self, ctx: Any, *args: str) -> tuple:
        """Dump START_MJD..END_MJD, decimal MJDs (?trigger-mjd START END [partial])."""
        return await self._trigger("trigger-mjd", args)

    async def request_trigger_burst(self, ctx: Any, *args: str) -> tuple:
        """Dump a burst's sweep across the band (?trigger-burst DM TIME [MARGIN [FREQ]])."""
        return await self._trigger("trigger-burst", args)

    async def request_ring(self, ctx: Any) -> str:
        """What the ring holds and the counters so far (JSON, as GET /ring)."""
        return json.dumps(self.dumps.status())


class KatcpTriggerServer:
    """Serves ``dumps`` over katcp on ``address`` (HOST:PORT, IPv6 in brackets; port 0
    picks a free one) from a daemon thread until `close`; a ConfigError (one line) if
    it cannot listen there."""

    def __init__(self, dumps: Dumps, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._host, self._port, self._dumps = host.strip("[]"), int(port), dumps
        self._ready = threading.Event()
        self._error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="voltstream-katcp-triggers",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise ConfigError(f"--trigger-katcp {address}: cannot serve there: "
                              f"{self._error}; choose another port (0 picks one)")  # fmt: skip

    def _run(self) -> None:
        # The server made and run on this thread's own loop (as fengine/control.py's).
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(loop))
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        self._server = _Server(self._dumps, self._host, self._port)
        try:
            await self._server.start()
        except OSError as e:
            self._error = str(e.strerror or e)
            return
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        self._loop = loop
        self._ready.set()
        await self._server.join()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._server.halt)
        self._thread.join()
