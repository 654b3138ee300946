"""The trigger server: HTTP on ``--trigger-listen`` (stdlib http.server, its own
threads), in front of record/dumps.py ``Dumps``.

``POST /trigger`` with a JSON body (dumps.py says which) is answered with a JSON
object: 202 and the dump (file, window, samples, lost samples) once the window is
copied out of the ring; 400 for a malformed trigger, 410 for data the ring no longer
holds, 409 for data not yet in it, 503 while dumps wait for the disk, each with an
``error`` line and what the ring holds. ``GET /ring`` (or ``/``) answers what the ring
holds and the counters so far. Nothing a sender sends stops the capture: any error in
a request is answered 500 and logged.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from voltstream.errors import ConfigError
from voltstream.record.dumps import Dumps

log = logging.getLogger("voltstream.record.trigger")

#: The largest trigger body read (a trigger is a few numbers).
MAX_BODY = 64 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    dumps: Dumps


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] not in ("/", "/ring"):
            self._answer(404, {"error": "GET /ring, or POST /trigger with a JSON body"})
            return
        self._answer(200, self.server.dumps.status())

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0] not in ("/", "/trigger"):
            self._answer(404, {"error": "POST /trigger with a JSON body, or GET /ring"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._answer(411 if length < 0 else 413,
                         {"error": f"send a JSON body of at most {MAX_BODY} bytes with its "
                                   "Content-Length"})  # fmt: skip
            return
        raw = self.rfile.read(length)
        try:
            status, body = self.server.dumps.trigger(raw)
        except Exception as exc:  # a bug must not end the capture: answered, logged
            log.exception("trigger failed")
            status, body = 500, {"error": f"the trigger failed: {exc}"}
        self._answer(status, body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("trigger server: " + format, *args)


class TriggerServer:
    """Serves ``dumps`` on ``address`` (HOST:PORT, IPv6 in brackets; port 0 picks a
    free one) from daemon threads until `close`."""

    def __init__(self, dumps: Dumps, address: str) -> None:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        server_class = type("_TriggerServer", (_Server,), {
            "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})  # fmt: skip
        try:
            self._server = server_class((host, int(port)), _Handler)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--trigger-listen {address}: cannot serve there: {e}") from None
        self._server.dumps = dumps
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="voltstream-triggers", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
