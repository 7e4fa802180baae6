"""`policies/requirements.txt` (what the Pulumi CLI installs for the pack) pins exactly what
uv.lock resolved for pulumi, pulumi-policy and their dependencies."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PACK_ROOTS = ("pulumi", "pulumi-policy")


def locked_closure(lock: Mapping[str, Any], roots: Iterable[str]) -> dict[str, str]:
    """Name -> version of `roots` and everything they depend on, as uv.lock resolved them.

    A package the lock holds in several versions (protobuf 5 for infra, 6 for app) is named
    with its version in the dependency entry, so the walk follows the infra side.
    """
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for package in lock["package"]:
        by_name.setdefault(package["name"], []).append(package)
    found: dict[str, str] = {}
    pending: list[Mapping[str, Any]] = [{"name": root} for root in roots]
    while pending:
        dependency = pending.pop()
        candidates = [
            p
            for p in by_name[dependency["name"]]
            if "version" not in dependency or p["version"] == dependency["version"]
        ]
        assert len(candidates) == 1, f"uv.lock: {dependency} matches {len(candidates)} packages"
        package = candidates[0]
        if package["name"] in found:
            continue
        found[package["name"]] = package["version"]
        pending.extend(package.get("dependencies", []))
    return found


def pinned(text: str) -> dict[str, str]:
    """`name==version` lines of a requirements file (comments and blanks skipped)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, separator, version = line.partition("==")
            assert separator, f"policies/requirements.txt: {line!r} is not pinned with =="
            pins[name.strip().lower()] = version.strip()
    return pins


def test_pack_requirements_pin_what_uv_lock_resolved() -> None:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    expected = locked_closure(lock, PACK_ROOTS)
    found = pinned((REPO / "policies" / "requirements.txt").read_text())
    lines = "\n".join(f"{name}=={version}" for name, version in sorted(expected.items()))
    assert found == expected, f"policies/requirements.txt must list exactly:\n{lines}"
