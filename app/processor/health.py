"""The processor's HTTP endpoint for Kubernetes probes and Prometheus: /live, /ready, /metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from app.clients.probe_endpoint import ProbeEndpoint
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


class HealthServer(ProbeEndpoint):
    """The processor's /live, /ready and /metrics (`app.clients.probe_endpoint`).

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
        super().__init__(
            host,
            port,
            live=self.liveness,
            ready=self.ready_status,
            registry=metrics.registry,
            # keeps processor_ready current for every scrape
            before_scrape=self.ready_status,
        )

    def start(self) -> Self:
        """Serve on a daemon thread (it never keeps the process alive)."""
        super().start()
        log.info("health endpoint on port %d: /live /ready /metrics", self.port)
        return self

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
