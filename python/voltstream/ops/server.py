"""The metrics server: one daemon thread serving a run's `RunStatus` over HTTP.

``/metrics`` is prometheus-client's WSGI app over a registry holding only this
run's collector (the numbers are converted from the report on each scrape, see
counters.py); ``/status.json`` is the same status as JSON, for `voltstream status`
and scripts. wsgiref is enough: a scrape a second is the load this sees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from voltstream.errors import ConfigError
from voltstream.ops.board import RunStatus
from voltstream.ops.counters import Sample, run_samples, samples


class RunCollector(Collector):
    """A run's report as metric families, converted at each scrape."""

    def __init__(self, board: RunStatus) -> None:
        self.board = board

    def collect(self) -> Iterator[Metric]:
        status = self.board.status()
        return iter(families([*run_samples(status), *samples(status["report"])]))


def families(flat: Iterable[Sample]) -> list[Metric]:
    """Samples grouped into one family per name, in first-seen order."""
    by_name: dict[str, Metric] = {}
    for s in flat:
        fam = by_name.get(s.name)
        if fam is None:
            fam = _family(s)
            by_name[s.name] = fam
        if isinstance(fam, InfoMetricFamily):
            fam.add_metric([], s.labels)
        elif isinstance(fam, HistogramMetricFamily):
            buckets = [(repr(le), n) for le, n in s.buckets] + [("+Inf", s.count)]
            fam.add_metric(list(s.labels.values()), buckets, s.value)
        else:
            fam.add_sample(_sample_name(s), s.labels, float(s.value))
    return list(by_name.values())


def _family(s: Sample) -> Metric:
    if s.kind == "counter":
        return CounterMetricFamily(s.name, s.help)
    if s.kind == "info":
        return InfoMetricFamily(s.name, s.help)
    if s.kind == "histogram":
        return HistogramMetricFamily(s.name, s.help, labels=list(s.labels))
    return GaugeMetricFamily(s.name, s.help)


def _sample_name(s: Sample) -> str:
    return s.name if s.name.endswith("_total") or s.kind != "counter" else s.name + "_total"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape a second would bury the verb's own stderr


class MetricsServer:
    """Serves ``board`` on ``address`` (HOST:PORT; port 0 picks a free one) from a
    daemon thread until `close`."""

    def __init__(self, board: RunStatus, address: str) -> None:
        host, _, port = address.rpartition(":")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RunCollector(board))
        metrics_app = make_wsgi_app(registry)
        self.board = board

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path == "/metrics":
                return metrics_app(environ, start)
            if path == "/status.json":
                body = json.dumps(board.status(), default=str).encode()
                start("200 OK", [("Content-Type", "application/json")])
                return [body]
            start("404 Not Found", [("Content-Type", "text/plain")])
            return [b"voltstream: /metrics (Prometheus) or /status.json\n"]

        try:
            self._server: WSGIServer = make_server(
                host.strip("[]"), int(port), app, handler_class=_QuietHandler
            )
        except (OSError, ValueError) as e:
            raise ConfigError(f"--metrics {address}: cannot serve there: {e}") from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="voltstream-metrics", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
