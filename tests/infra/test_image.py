"""The processor image (Dockerfile): tini as PID 1 with the pods' args as its command, only the
`runtime` dependency group inside, OCI labels, a non-root user."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from pathlib import Path

from contract.processor_keys import DEFAULTS
from infra.processor import PROCESSOR_UID
from offline.render import RecordedStack
from tests.infra.conftest import k8s_object, names_of
from tests.infra.source_tree import parse_module

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
GROUPS = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
# The image's entry points: the processor, the topic reconciler and SCRAM retire Jobs, the
# brokers' readiness sidecar and an operator's pair switch (run in a pod of the image).
ENTRY_MODULES = (
    "app.processor.__main__",
    "app.admin.reconcile",
    "app.admin.scram_retire",
    "app.admin.broker_readiness",
    "app.admin.pair_switch",
    # Imported by name (`aggregation.class`), so no import statement leads to it.
    DEFAULTS["aggregation.class"].rpartition(".")[0],
)
# Import name -> distribution, where they differ.
DISTRIBUTIONS = {"confluent_kafka": "confluent-kafka", "prometheus_client": "prometheus-client"}


def exec_form(instruction: str) -> list[str]:
    """The JSON (exec) form of a Dockerfile instruction such as ENTRYPOINT or CMD."""
    match = re.search(rf"^{instruction} (\[.*\])$", DOCKERFILE, re.MULTILINE)
    assert match, f"Dockerfile has no {instruction} in exec form"
    return json.loads(match.group(1))


def requirement_name(requirement: str) -> str:
    """`pyspark[sql]>=4.3.0,<4.4` -> `pyspark`."""
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def walk_imports(modules: tuple[str, ...]) -> tuple[set[str], set[Path]]:
    """Top-level third-party modules imported by `modules` and the repository modules they
    import, followed transitively, and the repository files those are (standard library left
    out)."""
    seen: set[str] = set()
    pending = list(modules)
    found: set[str] = set()
    files: set[Path] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        path = REPO / Path(*module.split("."))
        source = (
            path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        )
        files.add(source.relative_to(REPO))
        for node in ast.walk(parse_module(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in ("app", "contract", "policies"):
                    candidate = REPO / Path(*name.split("."))
                    if (
                        candidate.with_suffix(".py").exists()
                        or (candidate / "__init__.py").exists()
                    ):
                        pending.append(name)
                elif top not in sys.stdlib_module_names:
                    found.add(top)
    return found, files


def third_party_imports(modules: tuple[str, ...]) -> set[str]:
    """The third-party half of `walk_imports`."""
    return walk_imports(modules)[0]


def test_pods_args_are_the_images_default_command_behind_tini(dev: RecordedStack) -> None:
    assert exec_form("ENTRYPOINT") == ["/usr/bin/tini", "--"]
    processor = k8s_object(dev, "StatefulSet", names_of(dev).application_id)
    container = processor["spec"]["template"]["spec"]
    assert exec_form("CMD") == container["containers"][0]["args"]


def test_image_installs_only_the_runtime_group() -> None:
    syncs = re.findall(r"uv sync ([^\n]*)", DOCKERFILE)
    assert len(syncs) == 1
    assert re.findall(r"--group (\S+)", syncs[0]) == ["runtime"]
    assert "--no-default-groups" in syncs[0]


def test_app_group_includes_runtime_which_leaves_out_the_development_tools() -> None:
    assert {"include-group": "runtime"} in GROUPS["app"]
    runtime = {requirement_name(r) for r in GROUPS["runtime"]}
    assert not runtime & {"matplotlib", "cryptography"}


def test_runtime_group_has_everything_the_processor_and_the_reconciler_import() -> None:
    imported = {DISTRIBUTIONS.get(m, m) for m in third_party_imports(ENTRY_MODULES)}
    runtime = {requirement_name(r) for r in GROUPS["runtime"]}
    assert imported, "found no third-party imports: the walk is broken"
    assert imported <= runtime, f"imported but not in the runtime group: {imported - runtime}"


def test_image_has_oci_labels_and_runs_as_the_pods_non_root_user() -> None:
    labels = set(re.findall(r"(org\.opencontainers\.image\.[a-z.]+)=", DOCKERFILE))
    assert {
        f"org.opencontainers.image.{key}"
        for key in ("title", "description", "version", "revision", "created", "source", "licenses")
    } <= labels
    assert f"USER {PROCESSOR_UID}:{PROCESSOR_UID}" in DOCKERFILE.splitlines()


def test_image_copies_every_contract_module_the_processor_and_the_reconciler_import() -> None:
    copied = " ".join(re.findall(r"^COPY (.*)$", DOCKERFILE, flags=re.MULTILINE)).split()
    _, files = walk_imports(ENTRY_MODULES)
    needed = {str(f) for f in files if f.parts[0] == "contract"}
    assert needed, "found no contract module: the walk is broken"
    missing = {
        f
        for f in needed
        if not any(f == src or (src.endswith("/") and f.startswith(src)) for src in copied)
    }
    assert not missing, f"imported but not copied: {missing}"
    # The contract, not the pack: the image has no pulumi-policy.
    assert not [f for f in files if f.parts[0] == "policies"], files


def test_image_copies_every_app_module_its_entry_points_import_and_not_the_developer_kit() -> None:
    sources = [
        word
        for line in re.findall(r"^COPY (?!--from)(.*)$", DOCKERFILE, flags=re.MULTILINE)
        for word in line.split()[:-1]
    ]
    _, files = walk_imports(ENTRY_MODULES)
    assert not {f for f in files if f.parts[0] == "devkit"}, (
        "the image's entry points import the developer kit (devkit/), which the image leaves out"
    )
    needed = {f for f in files if f.parts[0] == "app"}
    missing = {
        str(f)
        for f in needed
        if not any(str(f) == s or (s.endswith("/") and str(f).startswith(s)) for s in sources)
    }
    assert not missing, f"imported but not copied: {missing}"
    assert not [s for s in sources if s in ("app", "app/") or s.startswith("devkit")], sources
