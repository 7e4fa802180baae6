"""The Spark driver's class-data-sharing archive (AppCDS) at run time: which one to map.

A Spark driver loads about 20,000 classes before its first batch; Java 17 can map the classes an
earlier run loaded from an archive instead (`-XX:SharedArchiveFile`, JEP 350). The archive is
built by `python -m app.processor.class_archive_build` (the image does it in its own layer) and is
only valid for the JVM and the jars it was built with, so it lives in the Python environment that
holds those jars (`default_path()`). A stale or missing archive costs only the seconds: the JVM
then loads classes as usual.
"""

from __future__ import annotations

import sys
from pathlib import Path

ARCHIVE_NAME = "spark-classes.jsa"
AUTO = "auto"


def default_path() -> Path:
    """Where this Python environment's archive lives (it maps this environment's jars)."""
    return Path(sys.prefix) / "share" / "processor" / ARCHIVE_NAME


def resolve(setting: str) -> Path | None:
    """The archive that `class.data.archive` names: "auto" (this environment's, if built), a
    path, or "" (none)."""
    setting = setting.strip()
    if not setting:
        return None
    if setting == AUTO:
        path = default_path()
        return path if path.exists() else None
    return Path(setting)


def java_options(archive: Path) -> str:
    """The driver JVM option that maps `archive` (the JVM warns and goes on if it is stale)."""
    return f"-XX:SharedArchiveFile={archive}"
