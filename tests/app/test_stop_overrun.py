"""A stop that outlives `shutdown.timeout.ms` says where it hangs: every Python thread's stack goes
to the log before the kubelet's SIGKILL can erase it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contract.java_properties import format_properties
from contract.topic_specs import PipelineNames
from devkit.local.instances import REPO_ROOT, InstanceOptions, instance_properties

# An instance asked to stop whose shutdown then hangs (here: the main thread sleeps on).
HANGING_STOP = """\
import signal, sys, time
from pathlib import Path
from app.processor import lifecycle
from app.processor.settings import load_settings

lifecycle.STOP_OVERRUN_DUMP_S = 0.5
settings = load_settings(Path(sys.argv[1]), {"POD_NAME": "page-view-counter-0"})
instance = lifecycle.ProcessorInstance(settings)
instance.request_stop(signal.SIGTERM)
def stuck_in_shutdown():
    time.sleep(3)
stuck_in_shutdown()
"""


def test_a_stop_that_outlives_its_timeout_dumps_every_threads_stack(tmp_path: Path) -> None:
    properties = tmp_path / "processor.properties"
    options = InstanceOptions(extra={"shutdown.timeout.ms": "0"})
    contract = instance_properties(PipelineNames(), "127.0.0.1:9", tmp_path / "state", 0, options)
    properties.write_text(format_properties(contract), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-c", HANGING_STOP, str(properties)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Timeout (0:00:00.500000)!" in run.stderr, run.stderr[-3000:]
    assert "in stuck_in_shutdown" in run.stderr, run.stderr[-3000:]
