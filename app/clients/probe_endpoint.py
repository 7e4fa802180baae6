"""The HTTP endpoint a pod's kubelet probes and Prometheus scrapes: /live, /ready and /metrics.

Served by prometheus_client's WSGI app and threading server, so /metrics negotiates the
OpenMetrics format, gzip and `name[]` filters as every Prometheus exporter does. The processor
(`app.processor.health`) and the brokers' readiness sidecar (`app.admin.broker_readiness`) say
only what their probes answer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from types import TracebackType
from typing import Any, Self
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# A probe's answer: whether it holds, and the JSON body that says why.
Probe = Callable[[], tuple[bool, Mapping[str, object]]]
StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        # The kubelet probes every few seconds: an access log line each is noise.
        pass


class ProbeEndpoint:
    """/live and /ready answer their probes (200 or 503, with a JSON body); /metrics the registry.

    `before_scrape` runs before each /metrics answer, for series that follow a probe's answer.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        live: Probe,
        ready: Probe,
        registry: CollectorRegistry,
        before_scrape: Callable[[], object] = lambda: None,
    ) -> None:
        self._probes = {"/live": live, "/ready": ready}
        self._metrics = make_wsgi_app(registry)
        self._before_scrape = before_scrape
        self._server = make_server(
            host, port, self._app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the one picked when constructed with port 0)."""
        return int(self._server.server_port)

    def start(self) -> Self:
        """Serve on a daemon thread (it never keeps the process alive)."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probe-endpoint", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until interrupted, then release the port."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            self._before_scrape()
            return self._metrics(environ, start_response)
        probe = self._probes.get(path)
        if probe is None:
            body: Mapping[str, object] = {
                "error": f"no endpoint {path}; try /live, /ready or /metrics"
            }
            return _json(start_response, HTTPStatus.NOT_FOUND, body)
        held, body = probe()
        return _json(
            start_response, HTTPStatus.OK if held else HTTPStatus.SERVICE_UNAVAILABLE, body
        )


def _json(
    start_response: StartResponse, status: HTTPStatus, body: Mapping[str, object]
) -> list[bytes]:
    payload = json.dumps(body).encode() + b"\n"
    start_response(
        f"{status.value} {status.phrase}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
    )
    return [payload]
