"""How the local KRaft cluster stops: every node by a controlled shutdown at once, and a report of
how each ended (stopped, orphaned by its quorum, or late)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devkit.kraft_node import KraftNode

# How long a node whose quorum has left may still log its approval before it counts as orphaned.
ORPHAN_GRACE_S = 5.0
# What BrokerLifecycleManager logs when the controller approves the broker's controlled shutdown.
SHUTDOWN_APPROVED = "The controller has asked us to exit controlled shutdown"


@dataclass
class ShutdownReport:
    """How `KraftCluster.shutdown` ended for each node."""

    timeout_s: float
    stopped: list[int] = field(default_factory=list)  # by its own controlled shutdown
    orphaned: list[int] = field(default_factory=list)  # killed: its quorum left before approval
    late: list[int] = field(default_factory=list)  # killed: still running at the deadline
    took_s: float = 0.0

    def describe(self) -> str:
        """One line for the log: what stopped, what was killed and why."""
        parts = [f"{len(self.stopped)} node(s) stopped by controlled shutdown"]
        if self.orphaned:
            parts.append(
                f"node(s) {_ids(self.orphaned)} killed: their controlled shutdown waited for a "
                "controller quorum that had left with the other nodes"
            )
        if self.late:
            parts.append(
                f"node(s) {_ids(self.late)} killed: still running {self.timeout_s:.0f} s after "
                "SIGTERM"
            )
        return "; ".join(parts) + f" ({self.took_s:.1f} s)"


def stop_together(
    nodes: Sequence[KraftNode], timeout_s: float, kill: Callable[[KraftNode], None]
) -> ShutdownReport:
    """SIGTERM to every running node at once, then wait for each to stop: a node left without
    its quorum's approval (after a grace) or still running after `timeout_s` is `kill`ed."""
    running = [node for node in nodes if node.process is not None]
    started = time.monotonic()
    log_offsets = {node.node_id: _size(node.log_dir / "server.log") for node in running}
    # All at once: one by one, the last node would always outlive its quorum.
    for node in running:
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)
    report = ShutdownReport(timeout_s)
    quorum = len(nodes) // 2 + 1
    alone_since: dict[int, float] = {}
    while running:
        now = time.monotonic()
        live = [node for node in running if node.process and node.process.poll() is None]
        for node in running:
            if node not in live:
                report.stopped.append(node.node_id)
                node.process = None
        running = live
        for node in live:
            # The log is read only once the quorum is gone: until then approval can come.
            if len(live) < quorum and not _approved_since(node, log_offsets[node.node_id]):
                # The grace covers an approval logged a moment after its peers left.
                since = alone_since.setdefault(node.node_id, now)
                if now - since >= ORPHAN_GRACE_S:
                    report.orphaned.append(node.node_id)
                    kill(node)
            elif now - started >= timeout_s:
                report.late.append(node.node_id)
                kill(node)
        running = [node for node in running if node.process is not None]
        if running:
            time.sleep(0.2)
    report.took_s = time.monotonic() - started
    return report


def _ids(node_ids: list[int]) -> str:
    return ", ".join(str(node_id) for node_id in node_ids)


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _approved_since(node: KraftNode, offset: int) -> bool:
    """Whether the node's server.log shows its shutdown approved after `offset` (the log's
    size at SIGTERM: a node restarted earlier logged an approval before)."""
    path = node.log_dir / "server.log"
    if not path.is_file():
        return False
    with path.open("rb") as server_log:
        server_log.seek(offset if path.stat().st_size >= offset else 0)  # rolled over since
        return SHUTDOWN_APPROVED.encode() in server_log.read()
