"""The memory of one instance: its whole process tree, sampled while it runs.

An instance is its Python main process, the Spark JVM that process starts, and the JVM's Python
workers (forked from a daemon), so its footprint is the sum over all of them. Each process counts
its PSS (proportional set size, `/proc/<pid>/smaps_rollup`): pages shared by several processes
(the workers share the daemon's imports) are divided among them, where RSS would count them once
per process.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from app.devkit.bench.measure import PeriodicSampler

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


class MemorySampler(PeriodicSampler):
    """Samples a process tree's PSS every `interval_s` on a daemon thread."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__("memory", interval_s)
        self.pid = pid
        self.samples: list[int] = []

    def take(self) -> int:
        """The tree's PSS now, kept as a sample unless the tree is gone (0)."""
        total = tree_pss_bytes(self.pid)
        if total:
            self.samples.append(total)
        return total

    def median_mib(self) -> float | None:
        """The median sample in MiB (None without samples)."""
        return round(statistics.median(self.samples) / 2**20) if self.samples else None

    def peak_mib(self) -> float | None:
        """The largest sample in MiB (None without samples)."""
        return round(max(self.samples) / 2**20) if self.samples else None
