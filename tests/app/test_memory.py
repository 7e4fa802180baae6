"""The bench's memory measure: a process tree's PSS, children included."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from app.clients.waiting import wait_until
from devkit.bench.memory import MemorySampler, process_tree, pss_bytes, tree_pss_bytes

# A child that starts a grandchild holding 64 MiB of its own memory, then waits.
HOLDER = (
    "import subprocess, sys; "
    "g = subprocess.Popen([sys.executable, '-c', "
    '\'import sys, time; b = bytearray(64 * 2**20); b[::4096] = b"x" * len(b[::4096]); '
    "print(1, flush=True); time.sleep(60)'], stdout=sys.stdout); "
    "g.wait()"
)


def test_a_process_trees_memory_counts_its_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"1"  # the grandchild holds its memory now
        tree = process_tree(child.pid)
        assert tree[0] == child.pid and len(tree) == 2
        grandchild = tree[1]
        assert pss_bytes(grandchild) > 64 * 2**20
        assert tree_pss_bytes(child.pid) >= pss_bytes(child.pid) + pss_bytes(grandchild) * 0.9
        sampler = MemorySampler(child.pid, interval_s=0.05).start()
        wait_until(lambda: len(sampler.samples) >= 3, 30, "three samples", interval_s=0.05)
        sampler.stop()
        assert (sampler.peak_mib() or 0) >= 64
        # The root is the "main" process; its (non-JVM) child one of the Python processes.
        by_kind = sampler.peak_by_kind() or ""
        found = re.fullmatch(r"JVM 0, main \d+, Python (\d+) \(1 process\)", by_kind)
        assert found is not None and int(found[1]) >= 64, by_kind
    finally:
        for pid in reversed(process_tree(child.pid)):
            os.kill(pid, 9)
        child.wait()
    assert pss_bytes(child.pid) == 0  # gone: nothing, no error
