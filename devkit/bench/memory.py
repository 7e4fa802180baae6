"""The memory of one instance: its whole process tree, sampled while it runs.

An instance is its Python main process, the Spark JVM that process starts, and the JVM's Python
workers (forked from a daemon), so its footprint is the sum over all of them. Each process counts
its PSS (proportional set size, `/proc/<pid>/smaps_rollup`): pages shared by several processes
(the workers share the daemon's imports) are divided among them, where RSS would count them once
per process.

The peak is also split by kind of process: the driver JVM, the instance's main Python process,
and Spark's Python processes (the fork server, the launchers that stand in for its children,
the daemons and their workers, the planners and the streaming source runner).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from devkit.bench.measure import PeriodicSampler

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
    return sum(sum(sizes) for sizes in tree_pss_by_kind(pid).values())


def process_kind(pid: int, root: int) -> str:
    """What a process of an instance's tree is: "JVM" (a java process, the root too: a Kafka
    Streams instance), "main" (the Python root) or "Python"."""
    try:
        executable = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        executable = b""  # gone meanwhile
    if executable.rsplit(b"/", 1)[-1] == b"java":
        return "JVM"
    return "main" if pid == root else "Python"


def tree_pss_by_kind(pid: int) -> dict[str, list[int]]:
    """The PSS in bytes of each live process of `pid`'s tree, grouped by `process_kind`."""
    kinds: dict[str, list[int]] = {}
    for p in process_tree(pid):
        pss = pss_bytes(p)
        if pss:
            kinds.setdefault(process_kind(p, pid), []).append(pss)
    return kinds


class MemorySampler(PeriodicSampler):
    """Samples a process tree's PSS every `interval_s` on a daemon thread."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__("memory", interval_s)
        self.pid = pid
        self.samples: list[int] = []
        self._peak_kinds: dict[str, list[int]] = {}

    def take(self) -> int:
        """The tree's PSS now, kept as a sample unless the tree is gone (0)."""
        kinds = tree_pss_by_kind(self.pid)
        total = sum(sum(sizes) for sizes in kinds.values())
        if total:
            if total > max(self.samples, default=0):
                self._peak_kinds = kinds
            self.samples.append(total)
        return total

    def peak_by_kind(self) -> str | None:
        """The peak sample split by kind of process, in MiB: "JVM 685, main 107, Python 635
        (21 processes)" (None without samples)."""
        if not self.samples:
            return None
        mib = {
            k: round(sum(self._peak_kinds.get(k, ())) / 2**20) for k in ("JVM", "main", "Python")
        }
        count = len(self._peak_kinds.get("Python", ()))
        return (
            f"JVM {mib['JVM']}, main {mib['main']}, Python {mib['Python']} "
            f"({count} process{'' if count == 1 else 'es'})"
        )

    def median_mib(self) -> float | None:
        """The median sample in MiB (None without samples)."""
        return round(statistics.median(self.samples) / 2**20) if self.samples else None

    def peak_mib(self) -> float | None:
        """The largest sample in MiB (None without samples)."""
        return round(max(self.samples) / 2**20) if self.samples else None
