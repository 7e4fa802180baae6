"""The memory of one instance: its whole process tree, sampled while it runs.

An instance is its Python main process, the Spark JVM that process starts, and the JVM's Python
workers (forked from a daemon), so its footprint is the sum over all of them. Each process counts
its PSS (proportional set size, `/proc/<pid>/smaps_rollup`): pages shared by several processes
(the workers share the daemon's imports) are divided among them, where RSS would count them once
per process.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

PROC = Path("/proc")
SAMPLE_INTERVAL_S = 1.0


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants that are alive now."""
    children: dict[int, list[int]] = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def pss_bytes(pid: int) -> int:
    """One process's proportional set size in bytes (0 when it is gone)."""
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss_bytes(pid: int) -> int:
    """The summed PSS of `pid` and its descendants."""
    return sum(pss_bytes(p) for p in process_tree(pid))


class MemorySampler:
    """Samples a process tree's PSS every `interval_s` on a daemon thread."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory", daemon=True)

    def start(self) -> MemorySampler:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def median_mib(self) -> float | None:
        """The median sample in MiB (None without samples)."""
        return round(statistics.median(self.samples) / 2**20) if self.samples else None

    def peak_mib(self) -> float | None:
        """The largest sample in MiB (None without samples)."""
        return round(max(self.samples) / 2**20) if self.samples else None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            total = tree_pss_bytes(self.pid)
            if total:
                self.samples.append(total)
