"""The processor's HTTP endpoint for Kubernetes probes and Prometheus: /live, /ready, /metrics."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from prometheus_client import CONTENT_TYPE_LATEST

from app.processor.metrics import ProcessorMetrics

log = logging.getLogger(__name__)

# A main loop that has not beaten for this long is stuck: the kubelet should restart the pod.
DEFAULT_LIVENESS_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ReadinessStatus:
    """What readiness is made of: the pod is Ready (and the roll goes on) only when all hold."""

    query_running: bool
    assignment_received: bool
    restore_done: bool
    # A micro-batch of this query run finished: the first one pays the start (Python workers,
    # plans, state stores; far longer than a caught-up batch), so before it a "running" query is not
    # processing yet, and the next pod of a roll must not be stopped.
    batch_done: bool

    @property
    def ready(self) -> bool:
        """All conditions hold."""
        return not self.failing()

    def failing(self) -> list[str]:
        """The names of the conditions that do not hold."""
        return [name for name, held in self.__dict__.items() if not held]


class HealthServer:
    """/live, /ready and /metrics on a daemon thread.

    `heartbeat()` is called by the process's main loop; `/live` fails once the last beat is older
    than `liveness_timeout_s`. `/ready` asks `readiness` on every request.
    """

    def __init__(
        self,
        port: int,
        metrics: ProcessorMetrics,
        readiness: Callable[[], ReadinessStatus],
        *,
        host: str = "0.0.0.0",
        liveness_timeout_s: float = DEFAULT_LIVENESS_TIMEOUT_S,
    ) -> None:
        self.metrics = metrics
        self.readiness = readiness
        self.liveness_timeout_s = liveness_timeout_s
        self._last_beat = time.monotonic()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the one picked when constructed with port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        """Serve on a daemon thread (it never keeps the process alive)."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()
        log.info("health endpoint on port %d: /live /ready /metrics", self.port)
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def heartbeat(self) -> None:
        """The main loop is alive; call it at least every `liveness_timeout_s`."""
        self._last_beat = time.monotonic()

    def liveness(self) -> tuple[bool, dict[str, object]]:
        """Whether the main loop beat recently, and the JSON body that says so."""
        age = time.monotonic() - self._last_beat
        body: dict[str, object] = {
            "live": age <= self.liveness_timeout_s,
            "last_heartbeat_seconds_ago": round(age, 1),
        }
        if not body["live"]:
            body["reason"] = (
                f"main loop heartbeat is {age:.1f} s old (limit {self.liveness_timeout_s:g} s)"
            )
        return bool(body["live"]), body

    def ready_status(self) -> tuple[bool, dict[str, object]]:
        """Ask the readiness callable; a failure to answer counts as not ready, with the reason."""
        try:
            status = self.readiness()
        except Exception as exc:  # the probe must answer, whatever the callable does
            log.warning("readiness check failed: %s", exc)
            self.metrics.set_ready(False)
            return False, {"ready": False, "failing": ["readiness_check"], "error": str(exc)}
        self.metrics.set_ready(status.ready)
        body: dict[str, object] = {"ready": status.ready}
        if not status.ready:
            body["failing"] = status.failing()
        return status.ready, body

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _handler_for(health: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/live":
                self._json(*health.liveness())
            elif path == "/ready":
                self._json(*health.ready_status())
            elif path == "/metrics":
                health.ready_status()  # keeps processor_ready current for every scrape
                self._send(HTTPStatus.OK, CONTENT_TYPE_LATEST, health.metrics.exposition())
            else:
                body = {"error": f"no endpoint {path}; try /live, /ready or /metrics"}
                self._send(HTTPStatus.NOT_FOUND, "application/json", _encode(body))

        def _json(self, ok: bool, body: dict[str, object]) -> None:
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, "application/json", _encode(body))

        def _send(self, status: HTTPStatus, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            # Probes hit these endpoints every few seconds: no access log.
            pass

    return Handler


def _encode(body: Mapping[str, object]) -> bytes:
    return json.dumps(body).encode() + b"\n"
