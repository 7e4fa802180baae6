"""A worker gives freed native memory back to the system after a read task (glibc)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.processor import native_memory

# A thread (its own malloc arena, as librdkafka's are) allocates 128 MiB in 64 KiB blocks (under
# the mmap threshold), frees all but the last (which pins the arena's top), then the process
# prints its resident set before and after `return_free_memory`.
FRAGMENTED = """
import threading
from app.processor import native_memory

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

def allocate():
    blocks = [bytearray(64 * 1024) for _ in range(2048)]
    for b in blocks:
        b[::4096] = b"x" * len(b[::4096])
    global pinned
    pinned = blocks[-1]
    del blocks

pinned = None
t = threading.Thread(target=allocate)
t.start()
t.join()
before = rss_kib()
native_memory.return_free_memory()
print(before, rss_kib())
"""


@pytest.mark.skipif(native_memory._malloc_trim() is None, reason="needs glibc's malloc_trim")
def test_freed_memory_of_a_threads_arena_goes_back_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True
    ).stdout
    before, after = map(int, out.split())
    assert before - after > 64 * 1024, f"resident {before} KiB before the trim, {after} after"
