"""Spark's Python worker daemon, with the workers' imports done once, before it forks them.

Every Python worker of this processor (the source's readers, the keyed state) is a fork of
Spark's daemon (`spark.python.daemon.module`). pyspark's own daemon imports the worker code after
the fork, in each worker: about 3 s of pandas, pyarrow, pyspark.sql and this package on 2 cores,
paid by every worker of an instance's first batch, two at a time. This daemon imports it once,
before it serves, so that a new worker is a fork away from work.

pyspark imports after the fork because pandas and pyarrow start threads when imported, and a
fork copies only the thread that calls it. Here they start none: OpenBLAS (under numpy) is held
to the calling thread and Arrow's bundled jemalloc to no background thread. The daemon checks
that it is still single-threaded before it forks anything, and says so if it is not (a new
library version that starts a thread at import): set `spark.python.daemon.module=pyspark.daemon`
then, until this module preloads less.
"""

from __future__ import annotations

import gc
import os
import sys

# Read by the libraries when they load, so set before the first import below. Neither costs
# the workers anything: they compute nothing with BLAS, and Arrow allocates with mimalloc.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

# What a worker imports anyway: the reader and the stateful processor's dependencies.
PRELOADED = (
    "pandas",
    "pyarrow",
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.streaming.stateful_processor_api_client",
    "app.processor.kafka_source",
    "app.processor.keyed_state",
    "app.pipelines.page_view_count",
)


# Set by the processor from `python.gc.freeze` for the Python processes Spark starts.
GC_FREEZE_ENV = "PROCESSOR_PYTHON_GC_FREEZE"


def threads() -> int:
    """Threads of this process (1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def preload() -> bool:
    """Import `PRELOADED`; whether the process is still single-threaded (safe to fork)."""
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)
    return threads() == 1


def freeze_preloaded() -> bool:
    """Exempt every object alive now (the imports') from Python's cyclic collector; whether it
    did (`python.gc.freeze`).

    A full collection walks every tracked object: after pandas, pyarrow and pyspark.sql, 30-65 ms
    on 2 cores, paid by a reader in the middle of its read and by every worker after every task
    (pyspark's daemon collects then). Frozen, they are skipped, and a fork never writes the
    collector's bookkeeping into their pages, which stay shared with the parent. CPython's
    documentation recommends the same before a fork (`gc.freeze`). They are module-level objects
    that live as long as the process anyway; the collection first drops the imports' garbage.
    """
    if os.environ.get(GC_FREEZE_ENV, "true").lower() != "true":
        return False
    gc.collect()
    gc.freeze()
    return True


if __name__ == "__main__":
    if not preload():
        print(
            f"app.processor.python_daemon: {threads()} threads after importing {PRELOADED}; "
            "forked workers may hang: set spark.python.daemon.module=pyspark.daemon",
            file=sys.stderr,
        )
    from pyspark.daemon import manager

    freeze_preloaded()
    manager()
