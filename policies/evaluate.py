"""Evaluate the pack over recorded resources exactly the way the Pulumi engine does.

The pack runs as the engine runs it: `AnalyzerProcess` launches the executable `policies/analyzer`
(or any pack command), reads the port it prints and speaks Pulumi's Analyzer gRPC protocol to it:
`GetAnalyzerInfo` for the policies, `Configure` with the per-stack policy config, `Analyze` per
resource and `AnalyzeStack` once. So every policy sees what it sees under `pulumi preview`:
`ResourceValidationArgs` / `StackValidationArgs` built by pulumi_policy in its own process, props
wrapped by `unknown_checking_proxy`, numbers as floats, enforcement levels resolved the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

import grpc
import jsonschema
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import proto
from pulumi.runtime.proto import analyzer_pb2_grpc
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from policies.rules.masking import credentials_of, masked

PACK_DIR = Path(__file__).resolve().parent
# The pack as the CLI launches it (`--policy-pack policies/analyzer`).
PACK_EXECUTABLE = PACK_DIR / "analyzer"

_LEVELS = {
    "advisory": proto.ADVISORY,
    "mandatory": proto.MANDATORY,
    "remediate": proto.REMEDIATE,
    "disabled": proto.DISABLED,
}
_LEVEL_NAMES = {value: name for name, value in _LEVELS.items()}


class PolicyConfigError(ValueError):
    """A policy pack config file that the Pulumi CLI would refuse."""


class PackLaunchError(RuntimeError):
    """The pack did not start: it exited, or printed no port."""


class Resource(Protocol):
    """What the evaluation needs of a resource (`offline.render.RecordedResource` has it).

    Read-only members, so frozen dataclasses and properties satisfy it too.
    """

    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def urn(self) -> str: ...
    @property
    def props(self) -> Mapping[str, Any]: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def dependencies(self) -> Sequence[str]: ...
    @property
    def custom_timeouts(self) -> Mapping[str, str] | None: ...
    @property
    def protect(self) -> bool: ...
    @property
    def delete_before_replace(self) -> bool: ...


@dataclass(frozen=True)
class Violation:
    """One diagnostic the engine would print."""

    policy: str
    level: str  # "mandatory" or "advisory"
    message: str  # the policy's own message (without the description the engine prepends)
    description: str
    urn: str | None

    @property
    def mandatory(self) -> bool:
        """Whether it fails `pulumi preview` (and the offline check)."""
        return self.level == "mandatory"


@dataclass(frozen=True)
class PolicyInfo:
    """One policy as the pack describes it to the engine (`GetAnalyzerInfo`)."""

    name: str
    description: str
    level: str  # the pack's own enforcement level, before the config file
    config_properties: Mapping[str, Any]  # the JSON schema of its thresholds


def load_policy_config(path: Path, policies: Sequence[PolicyInfo]) -> dict[str, Any]:
    """Read and validate `policies/config.<stack>.json` as the CLI does before it runs a pack."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PolicyConfigError(f"{path}: cannot read policy config: {error}") from error
    validate_policy_config(config, policies, source=str(path))
    return config


def validate_policy_config(
    config: Mapping[str, Any], policies: Sequence[PolicyInfo], source: str = "policy config"
) -> None:
    """Unknown policy names, unknown enforcement levels and thresholds off their schema fail."""
    if not isinstance(config, Mapping):
        raise PolicyConfigError(f"{source}: must be a JSON object keyed by policy name")
    by_name = {p.name: p for p in policies}
    for name, value in config.items():
        if name != "all" and name not in by_name:
            raise PolicyConfigError(
                f"{source}: {name!r} is not a policy of this pack; known: {sorted(by_name)}"
            )
        level = value if isinstance(value, str) else (value or {}).get("enforcementLevel")
        if level is not None and level not in _LEVELS:
            raise PolicyConfigError(
                f"{source}: {name}.enforcementLevel={level!r}; allowed: {sorted(_LEVELS)}"
            )
        if name == "all" or not isinstance(value, Mapping):
            continue
        thresholds = {k: v for k, v in value.items() if k != "enforcementLevel"}
        known = dict(by_name[name].config_properties)
        json_schema = {"type": "object", "properties": known, "additionalProperties": False}
        try:
            jsonschema.validate(thresholds, json_schema)
        except jsonschema.ValidationError as error:
            path = ".".join(map(str, error.absolute_path)) or "(thresholds)"
            raise PolicyConfigError(
                f"{source}: {name}.{path}: {error.message}; thresholds of {name}: "
                f"{sorted(known) or 'none'}"
            ) from error


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_seconds(text: str | None) -> float:
    """A Pulumi custom timeout (a Go duration such as `40m` or `1h30m`) in seconds; 0 if unset."""
    if not text:
        return 0.0
    parts = _DURATION_PART.findall(text)
    if "".join(n + u for n, u in parts) != text:
        raise ValueError(f"custom timeout {text!r} is not a duration like 10m, 1h30m or 90s")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _options(resource: Resource) -> proto.AnalyzerResourceOptions:
    timeouts = resource.custom_timeouts or {}
    return proto.AnalyzerResourceOptions(
        protect=resource.protect,
        deleteBeforeReplace=resource.delete_before_replace,
        deleteBeforeReplaceDefined=True,
        parent=resource.parent or "",
        customTimeouts=proto.AnalyzerResourceOptions.CustomTimeouts(
            create=duration_seconds(timeouts.get("create")),
            update=duration_seconds(timeouts.get("update")),
            delete=duration_seconds(timeouts.get("delete")),
        ),
    )


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(value, default=_wire)))
    return struct


def _wire(value: Any) -> str:
    """A value JSON has no form for: an unknown (a preview's) as the engine sends it."""
    return UNKNOWN_STRING_VALUE if isinstance(value, Unknown) else str(value)


def configure_request(
    policies: Sequence[PolicyInfo], config: Mapping[str, Any]
) -> proto.ConfigureAnalyzerRequest:
    """The engine's `Configure`: every policy with its resolved level and its thresholds."""
    request = proto.ConfigureAnalyzerRequest()
    levels = resolved_levels(policies, config)
    for policy in policies:
        entry = config.get(policy.name, {})
        thresholds = (
            {}
            if isinstance(entry, str)
            else {k: v for k, v in entry.items() if k != "enforcementLevel"}
        )
        request.policyConfig[policy.name].CopyFrom(
            proto.PolicyConfig(
                enforcementLevel=_LEVELS[levels[policy.name]], properties=_struct(thresholds)
            )
        )
    return request


def resolved_levels(policies: Sequence[PolicyInfo], config: Mapping[str, Any]) -> dict[str, str]:
    """Each policy's enforcement level after the config file, as the CLI resolves it."""
    levels = {}
    for policy in policies:
        entry = config.get(policy.name, {})
        level = entry if isinstance(entry, str) else entry.get("enforcementLevel")
        levels[policy.name] = level or config.get("all") or policy.level
    return levels


class AnalyzerProcess:
    """A policy pack launched the way the engine launches it, spoken to over gRPC.

    `command` runs the pack (by default the executable `policies/analyzer` the CLI runs); it
    must print the port it serves on as its first line, as `pulumi_policy.PolicyPack` does.
    One process serves any number of evaluations: each one sends its own `Configure`.
    """

    def __init__(
        self, command: Sequence[str | Path] = (PACK_EXECUTABLE,), *, start_timeout: float = 120.0
    ) -> None:
        self.command = [str(part) for part in command]
        # The pack's stderr, kept for the error if it stops: open as long as the process runs.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",  # the port line reaches us at once
            # `policies/analyzer` runs the pack with this Python, unless the caller chose another.
            "POLICY_PACK_PYTHON": os.environ.get("POLICY_PACK_PYTHON", sys.executable),
        }
        self._process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        try:
            port = self._read_port(start_timeout)
            self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(self._channel).result(timeout=start_timeout)
            self._stub = analyzer_pb2_grpc.AnalyzerStub(self._channel)
            info = self._stub.GetAnalyzerInfo(empty_pb2.Empty())
        except BaseException:
            self.close()
            raise
        self.policies: tuple[PolicyInfo, ...] = tuple(
            PolicyInfo(
                name=p.name,
                description=p.description,
                level=_LEVEL_NAMES[p.enforcementLevel],
                config_properties=json_format.MessageToDict(p.configSchema.properties),
            )
            for p in info.policies
        )
        self._descriptions = {p.name: p.description for p in self.policies}
        self._valid_configs: set[str] = set()

    def _read_port(self, timeout: float) -> int:
        """The first line the pack prints; its stderr in the error if it stops before that."""
        assert self._process.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        os.set_blocking(self._process.stdout.fileno(), False)
        while not line.endswith(b"\n"):
            chunk = self._process.stdout.read(64) or b""
            line += chunk
            if not chunk:
                if self._process.poll() is not None:
                    raise PackLaunchError(
                        f"policy pack {' '.join(self.command)} exited with "
                        f"{self._process.returncode} before printing its port: {self._errors()}"
                    )
                if time.monotonic() > deadline:
                    raise PackLaunchError(
                        f"policy pack {' '.join(self.command)} printed no port within "
                        f"{timeout:.0f} s: {self._errors() or 'no output'}"
                    )
                time.sleep(0.05)
        text = line.decode().strip()
        if not text.isdigit():
            raise PackLaunchError(
                f"policy pack {' '.join(self.command)} printed {text!r}, expected its port"
            )
        return int(text)

    def _errors(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()

    def evaluate(self, resources: Iterable[Resource], config: Mapping[str, Any]) -> list[Violation]:
        """Run every policy over the resources; return the violations in engine order."""
        resources = list(resources)
        # The same config is sent evaluation after evaluation (a test tier sends hundreds):
        # checked against the schemas once per process.
        key = json.dumps(config, sort_keys=True, default=str)
        if key not in self._valid_configs:
            validate_policy_config(config, self.policies)
            self._valid_configs.add(key)
        self._stub.Configure(configure_request(self.policies, config))
        # Each resource's props converted once, for its `Analyze` and for `AnalyzeStack`.
        wired = [(r, _struct(r.props), _options(r)) for r in resources]
        diagnostics: list[tuple[Any, str | None]] = []
        for resource, properties, options in wired:
            request = proto.AnalyzeRequest(
                type=resource.type,
                properties=properties,
                urn=resource.urn,
                name=resource.name,
                options=options,
            )
            response = self._stub.Analyze(request)
            diagnostics.extend((diagnostic, resource.urn) for diagnostic in response.diagnostics)
        stack_request = proto.AnalyzeStackRequest(
            resources=[
                proto.AnalyzerResource(
                    type=r.type,
                    properties=properties,
                    urn=r.urn,
                    name=r.name,
                    options=options,
                    parent=r.parent or "",
                    dependencies=list(r.dependencies),
                )
                for r, properties, options in wired
            ]
        )
        response = self._stub.AnalyzeStack(stack_request)
        diagnostics.extend((d, d.urn or None) for d in response.diagnostics)
        # Masked again here, for what reaches the table and SARIF whatever a policy reported.
        credentials = credentials_of((r.type, r.props) for r in resources) if diagnostics else set()
        return [self._violation(diagnostic, urn, credentials) for diagnostic, urn in diagnostics]

    def _violation(self, diagnostic: Any, urn: str | None, credentials: set[str]) -> Violation:
        description = self._descriptions.get(diagnostic.policyName, diagnostic.description)
        message = diagnostic.message
        if message.startswith(description):
            message = message[len(description) :].lstrip("\n") or description
        return Violation(
            policy=diagnostic.policyName,
            level=_LEVEL_NAMES[diagnostic.enforcementLevel],
            message=masked(message, credentials),
            description=description,
            urn=urn,
        )

    def close(self) -> None:
        """Stop the pack (it serves until killed, as under the CLI)."""
        if getattr(self, "_channel", None) is not None:
            self._channel.close()
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()

    def __enter__(self) -> AnalyzerProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
