"""Giving a worker's freed native memory back to the system after a read task.

A read task's consumer fetches ahead (`queued.max.messages.kbytes`, up to 64 MiB by default) on
librdkafka's threads, each of which allocates from a malloc arena of its own. When the range is
read, the consumer's queue is purged and the buffers are freed, but glibc keeps the freed pages
of a thread's arena mapped for reuse: a Python worker that once read a backlog of a million
records holds on to its high-water mark for the rest of the process (120-170 MiB each, two
workers per 2-core instance). `malloc_trim(0)` hands every arena's free pages back (it
`madvise`s them away); it costs a few milliseconds per task.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def return_free_memory() -> None:
    """Give the process's free heap pages back to the system (glibc only; a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
