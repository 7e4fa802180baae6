"""Kafka client properties files (`--command-config`), read the same way by every tool.

The reconciler, the load generator, the local run and the benchmarks take their security
settings (`security.protocol`, `sasl.*`, `ssl.*`, librdkafka's names) from one such file, as
Kafka's own tools do; `${dir:DIRECTORY:FILE}` and `${env:NAME}` are resolved, so the file holds
no secret (the password is a file of a mounted Secret).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contract.java_properties import PropertyLine, parse_properties, resolve_env
from contract.tls_settings import tls_weakenings

# Client settings that apply to the consumer and the producer alike (security), as in Kafka Streams.
CLIENT_COMMON_KEYS = ("security.protocol",)
CLIENT_COMMON_PREFIXES = ("sasl.", "ssl.")

FLAG = "--command-config"
HELP = (
    "Kafka client properties (security.protocol, sasl.*, ssl.*; ${dir:DIRECTORY:FILE} and "
    "${env:NAME} are resolved), as for Kafka's own tools: secrets never go on the command line"
)


class ClientPropertiesError(ValueError):
    """The client properties file is unreadable, malformed or names an unset variable."""


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--command-config FILE` to a tool's command line."""
    parser.add_argument(FLAG, type=Path, metavar="FILE", help=HELP)


@dataclass(frozen=True)
class ClientConfig:
    """One `--command-config` file: its settings as written and as this process's clients use
    them. A child process (a processor instance) gets them as written, so a `${dir:...}` or
    `${env:...}` reference stays a reference in the files this process writes."""

    path: Path | None = None
    written: Mapping[str, str] = field(default_factory=dict)
    resolved: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None, env: Mapping[str, str]) -> ClientConfig:
        """Read `path` (none: no settings) and resolve its references from `env` and files."""
        if path is None:
            return cls()
        entries = _read(path)
        for entry in entries:
            for weakening in tls_weakenings({entry.key: entry.value}):
                raise ClientPropertiesError(
                    f"{FLAG} {path}:{entry.line} {entry.key}={entry.value!r}: must be "
                    f"{weakening.required}: {weakening.why}; remove it"
                )
        resolved = {}
        for entry in entries:
            try:
                resolved[entry.key] = resolve_env(entry.value, env)
            except LookupError as exc:
                raise ClientPropertiesError(
                    f"{FLAG} {path}:{entry.line} {entry.key}: {exc}"
                ) from exc
        return cls(path, {entry.key: entry.value for entry in entries}, resolved)

    def security(self) -> dict[str, str]:
        """The security settings as written (`security.protocol`, `sasl.*`, `ssl.*`): what a
        processor instance's properties take from this file."""
        return {
            key: value
            for key, value in self.written.items()
            if key in CLIENT_COMMON_KEYS or key.startswith(CLIENT_COMMON_PREFIXES)
        }

    def arguments(self) -> list[str]:
        """`--command-config FILE` for a tool this process runs, or nothing."""
        return [FLAG, str(self.path)] if self.path is not None else []


def _read(path: Path) -> list[PropertyLine]:
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientPropertiesError(f"cannot read {FLAG} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise ClientPropertiesError(f"invalid {FLAG} {path}: {exc}") from exc
