"""The local channel from the group member to the Spark source: the current assignment.

The group member lives in the processor's main Python process; the source's reader runs in
processes the JVM starts (DESIGN.md, "Facts about PySpark 4.3"), so a module-level variable is
not shared. The member publishes its assignment as a small JSON file in the state directory,
replaced atomically (write a temporary file, then `os.replace`), and the reader reads it at
each planning step. A reader never sees a half-written file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from app.processor.atomic_file import replace_text

FILE_NAME = "assignment.json"


@dataclass(frozen=True)
class Assignment:
    """The input partitions this instance owns, as the group last assigned them.

    `generation` grows with every change, so a reader can tell a new assignment from the one it
    already checked. `draining` is set on shutdown: the source plans no new batch. `warm_up`,
    when not 0, asks the source for one empty batch marked with it, before the member joins the
    group (see `GroupAssignedReader.latestOffset`). A new `nudge` asks for one batch even when no
    input arrived (a side of a pair whose control topic changed: `app/processor/pair.py`).
    """

    topic: str
    partitions: tuple[int, ...] = field(default=())
    generation: int = 0
    draining: bool = False
    warm_up: int = 0
    # Partitions whose warm copies this instance keeps (`state_restore.standby_partitions`).
    standby: tuple[int, ...] = field(default=())
    nudge: int = 0

    def to_json(self) -> str:
        """The file's content."""
        return json.dumps(
            {
                "topic": self.topic,
                "partitions": sorted(self.partitions),
                "generation": self.generation,
                "draining": self.draining,
                "warm_up": self.warm_up,
                "standby": sorted(self.standby),
                "nudge": self.nudge,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Assignment:
        """Parse the file's content."""
        data = json.loads(text)
        return cls(
            topic=str(data["topic"]),
            partitions=tuple(int(p) for p in data["partitions"]),
            generation=int(data["generation"]),
            draining=bool(data.get("draining", False)),
            warm_up=int(data.get("warm_up", 0)),
            standby=tuple(int(p) for p in data.get("standby", ())),
            nudge=int(data.get("nudge", 0)),
        )


def assignment_path(state_dir: Path) -> Path:
    """Where the member publishes the assignment for the instance whose state is in `state_dir`."""
    return state_dir / FILE_NAME


def publish(path: Path, assignment: Assignment) -> None:
    """Replace the file at `path` atomically with `assignment`."""
    replace_text(path, assignment.to_json())


def read(path: Path) -> Assignment | None:
    """The published assignment, or None when none was published yet (the group join is slow)."""
    try:
        return Assignment.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def withdraw(path: Path) -> None:
    """Remove a published assignment (a new process must not plan with its predecessor's)."""
    path.unlink(missing_ok=True)
