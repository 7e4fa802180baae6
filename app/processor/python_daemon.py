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


if __name__ == "__main__":
    if not preload():
        print(
            f"app.processor.python_daemon: {threads()} threads after importing {PRELOADED}; "
            "forked workers may hang: set spark.python.daemon.module=pyspark.daemon",
            file=sys.stderr,
        )
    from pyspark.daemon import manager

    manager()
