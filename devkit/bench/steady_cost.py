"""What the instances cost while nothing moves: CPU, standby changelog reads, state on disk.

Measured over a window once the group has settled, before a case acts: the price of the warm
copies (`num.standby.replicas`) beside what the case's moves save. CPU is every instance's whole
process tree (the Python main process, the Spark JVM, its Python workers) from `/proc`, children
that exited included (`cutime`, `cstime`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.bench.memory import PROC, process_tree
from devkit.local.instances import ProcessorProcess

STANDBY_RECORDS = "processor_standby_records_total"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class SteadyCost:
    """All instances together, over one window."""

    cpu_cores: float  # CPU seconds per second
    standby_records_s: float  # changelog records read into standby copies per second
    state_mib: float  # the instances' state directories on disk, at the window's end


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) of `pid`, its descendants and their reaped children."""
    ticks = 0
    for p in process_tree(pid):
        try:
            text = (PROC / str(p) / "stat").read_text()
        except OSError:
            continue  # exited meanwhile: its parent's cutime has it once reaped
        fields = text[text.rindex(")") + 2 :].split()
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / _TICKS_PER_S


def _cpu_seconds(instances: Sequence[ProcessorProcess]) -> float:
    return sum(tree_cpu_seconds(i.pid) for i in instances if i.pid is not None and i.running)


def _standby_records(instances: Sequence[ProcessorProcess]) -> float:
    return sum(i.status().metric(STANDBY_RECORDS) for i in instances if i.running)


def _disk_bytes(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue  # replaced or removed meanwhile
    return total


def measure(instances: Sequence[ProcessorProcess], window_s: float) -> SteadyCost:
    """The instances' cost over the next `window_s` seconds."""
    began = time.monotonic()
    cpu, standby = _cpu_seconds(instances), _standby_records(instances)
    time.sleep(window_s)
    seconds = time.monotonic() - began
    return SteadyCost(
        cpu_cores=(_cpu_seconds(instances) - cpu) / seconds,
        standby_records_s=(_standby_records(instances) - standby) / seconds,
        state_mib=sum(_disk_bytes(i.state_dir) for i in instances) / 2**20,
    )
