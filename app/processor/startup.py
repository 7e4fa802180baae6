"""Where an instance's start goes: process start to its first committed batch, phase by phase.

A restart's pause is this sum (static membership) or is hidden behind it (hand-off), so the
instance logs it once, at its first committed batch, and exports the total as a metric.
"""

from __future__ import annotations

import logging
import os
import re
import time

log = logging.getLogger(__name__)

START_LINE = "first batch committed %.1f s after the process started: %s"
_START_LINE = re.compile(r"first batch committed ([0-9.]+) s after the process started: (.*)")
_PHASE = re.compile(r"(.+) ([0-9.]+) s")


def process_age_s() -> float:
    """Seconds since this process started (the interpreter's start and imports included)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # Field 22, after the parenthesised command name: start time in clock ticks since boot.
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            up_s = float(uptime.read().split()[0])
        return max(0.0, up_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, IndexError, ValueError):
        return 0.0  # not Linux: the phases then start at the first mark


class StartupClock:
    """Named phases of the start, each from the previous mark to its own."""

    def __init__(self) -> None:
        self._origin = time.monotonic() - process_age_s()
        self._last = self._origin
        self._phases: list[tuple[str, float]] = []
        self.reported = False

    def mark(self, phase: str, at: float | None = None) -> float:
        """End `phase` now (or at monotonic time `at`); its duration in seconds."""
        now = time.monotonic() if at is None else at
        took = now - self._last
        self._phases.append((phase, took))
        self._last = now
        return took

    def since_start(self) -> float:
        """Seconds since the process started."""
        return time.monotonic() - self._origin

    def report(self, phase: str, at: float) -> float:
        """End the last `phase` at monotonic time `at` and log the breakdown once; the total."""
        self.mark(phase, at)
        total = at - self._origin
        if not self.reported:
            self.reported = True
            log.info(
                START_LINE, total, ", ".join(f"{name} {took:.1f} s" for name, took in self._phases)
            )
        return total


def read_start_line(log_text: str) -> tuple[float, dict[str, float]] | None:
    """The start an instance's log reports (`StartupClock.report`): its total and its phases in
    seconds; None when the log has no such line yet."""
    found = _START_LINE.search(log_text)
    if found is None:
        return None
    phases = {}
    for part in found.group(2).split(", "):
        phase = _PHASE.fullmatch(part.strip())
        if phase is not None:
            phases[phase.group(1)] = float(phase.group(2))
    return float(found.group(1)), phases
