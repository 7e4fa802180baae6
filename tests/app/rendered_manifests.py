"""The manifests `python -m offline.render` writes, rendered and read back by kind and name."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
INFRA_PYTHON = REPO / ".venv" / "infra" / "bin" / "python"


def render(stack: str, out: Path, overrides: Mapping[str, Any] | None = None) -> None:
    """`python -m offline.render --stack <stack> --out <out> [--override KEY=JSON ...]`, in the
    infra environment."""
    options = [f"--override={key}={json.dumps(value)}" for key, value in (overrides or {}).items()]
    result = subprocess.run(
        [str(INFRA_PYTHON), "-m", "offline.render", "--stack", stack, "--out", str(out), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"rendering the {stack} stack with {INFRA_PYTHON} (made by `make setup`) "
            f"exited {result.returncode}:\n{result.stderr[-3000:]}"
        )


@dataclass(frozen=True)
class Manifests:
    """The rendered objects, by kind and name."""

    objects: tuple[dict[str, Any], ...]

    @classmethod
    def load(cls, folder: Path) -> Manifests:
        """Every YAML document in the folder."""
        docs = []
        for path in sorted(folder.glob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        return cls(tuple(docs))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every object of that kind."""
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        """The object of that kind and name (KeyError names what exists)."""
        for obj in self.of_kind(kind):
            if obj["metadata"]["name"] == name:
                return obj
        names = [o["metadata"]["name"] for o in self.of_kind(kind)]
        raise KeyError(f"no {kind} {name!r}; rendered: {names}")

    def config_maps(self) -> dict[str, dict[str, str]]:
        """ConfigMap data by name."""
        return {c["metadata"]["name"]: c.get("data", {}) for c in self.of_kind("ConfigMap")}
