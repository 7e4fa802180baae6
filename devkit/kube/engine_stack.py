"""The project's program and policy pack in Pulumi's own engine, against a real API server.

The Pulumi CLI (`make tools`) runs the engine and the Kubernetes provider plugin; the program
runs inline through the Automation API (the SDK serves its own language runtime, so no Python
language host is needed), exactly as `infra/__main__.py` runs under `pulumi up`; the policy pack
runs as the executable analyzer `policies/analyzer`, which the CLI launches itself. Stacks live in
a file backend of their own, their settings in a copy of the repository's `Pulumi.<stack>.yaml`
with the test's overrides. Everything a test asserts comes from the engine's own event stream
(steps, policy events, diagnostics) or from the API server.

The engine tier and the real node's tier import it; the benchmarks on the real node, which run in
the application's environment, call it as a command (in the program's environment):

    python -m devkit.kube.engine_stack up --workdir DIR --stack dev --kubeconfig FILE \
        --settings '{"processor": {"replicas": 3}}'

which prints the run as one JSON line (seconds, changes, each StatefulSet's ops, errors).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from contract.stack_pipeline import PROJECT
from devkit.kube.go_tools import BIN, GO, pulumi_env
from offline.render import load_project_config

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "analyzer"
PASSPHRASE = "engine-tier"  # the file backend's secrets; a throw-away stack


@dataclass(frozen=True)
class Step:
    """One resource step the engine planned or took."""

    op: str  # "create", "update", "replace", "delete", "same", ...
    urn: str
    type: str
    diffs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    @classmethod
    def of(cls, meta: auto.StepEventMetadata) -> Step:
        """The step an engine event's metadata describes."""
        return cls(
            str(getattr(meta.op, "value", meta.op)), meta.urn, meta.type, tuple(meta.diffs or ())
        )


@dataclass(frozen=True)
class PolicyFinding:
    """A policy event: a violation, or a rule that could not run."""

    policy: str
    level: str  # "mandatory", "advisory", ...
    message: str
    urn: str | None

    @property
    def skipped(self) -> bool:
        """The engine's notice that a rule did not run (a value unknown during preview)."""
        return "can't run policy" in self.message


@dataclass
class EngineRun:
    """What one engine command reported, from its event stream."""

    command: str
    seconds: float
    steps: list[Step] = field(default_factory=list)
    results: list[Step] = field(default_factory=list)  # each step as it ended (its outputs)
    policies: list[PolicyFinding] = field(default_factory=list)
    diagnostics: list[tuple[str, str]] = field(default_factory=list)  # (severity, message)
    changes: dict[str, int] = field(default_factory=dict)
    policy_packs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    # Every step's start ("pre") and end ("done"), in the order the engine reported them, with
    # the time this process received each (time.monotonic()).
    timeline: list[tuple[float, str, Step]] = field(default_factory=list)

    def on_event(self, event: auto.EngineEvent) -> None:
        if event.resource_pre_event is not None:
            self.steps.append(Step.of(event.resource_pre_event.metadata))
            self.timeline.append((time.monotonic(), "pre", self.steps[-1]))
        if event.res_outputs_event is not None:
            self.results.append(Step.of(event.res_outputs_event.metadata))
            self.timeline.append((time.monotonic(), "done", self.results[-1]))
        if event.policy_event is not None:
            p = event.policy_event
            self.policies.append(
                PolicyFinding(p.policy_name, p.enforcement_level, p.message, p.resource_urn)
            )
        if event.diagnostic_event is not None:
            d = event.diagnostic_event
            self.diagnostics.append((d.severity, d.message.strip()))
        if event.summary_event is not None:
            s = event.summary_event
            self.changes = {str(getattr(k, "value", k)): v for k, v in s.resource_changes.items()}
            self.policy_packs = dict(s.policy_packs or {})

    def ops(self, type_suffix: str) -> dict[str, set[str]]:
        """The ops per resource name, for resources whose type ends with `type_suffix` (a
        replacement is several steps: `delete-replaced`, `replace`, `create-replacement`)."""
        found: dict[str, set[str]] = {}
        for step in self.steps:
            if step.type.endswith(type_suffix):
                found.setdefault(step.name, set()).add(step.op)
        return found

    def when(self, phase: str, type_suffix: str, name: str) -> tuple[int, float]:
        """The first `phase` ("pre", "done") event of a resource: its place and time."""
        for index, (at, seen, step) in enumerate(self.timeline):
            if seen == phase and step.type.endswith(type_suffix) and step.name == name:
                return index, at
        raise AssertionError(f"no {phase} event of {name} ({type_suffix}): {self.timeline}")

    def errors(self) -> list[str]:
        return [m for sev, m in self.diagnostics if sev == "error"]


def stack_settings(stack: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`Pulumi.<stack>.yaml` over Pulumi.yaml's config (the inline program's project settings
    carry none), with `overrides` merged in (keys without a namespace are the project's)."""
    document = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text()) or {}
    config = {**load_project_config(), **(document.get("config") or {})}
    for key, value in overrides.items():
        config[key if ":" in key else f"{PROJECT}:{key}"] = value
    return {"config": config}


def _program() -> None:
    runpy.run_path(str(ROOT / "infra"), run_name="__main__")


class EngineStack:
    """One stack of the project in a workspace of its own (state, settings, plugins)."""

    def __init__(
        self,
        workdir: Path,
        stack: str,
        kubeconfig: str,
        overrides: Mapping[str, Any],
        program: Callable[[], None] = _program,
    ) -> None:
        self.workdir, self.stack_file = workdir, stack
        self.name = stack
        self.overrides = dict(overrides)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "state").mkdir(exist_ok=True)
        env = pulumi_env()
        self.env = {
            "PULUMI_HOME": env["PULUMI_HOME"],
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_BACKEND_URL": f"file://{workdir / 'state'}",
            "KUBECONFIG": kubeconfig,
            # The provider plugin the engine starts is the one `make tools` built (on PATH).
            "PATH": env["PATH"],
        }
        self.write_settings()
        self.last_run: EngineRun | None = None
        self.stack = auto.create_or_select_stack(
            stack_name=stack,
            project_name=PROJECT,
            program=program,
            opts=auto.LocalWorkspaceOptions(
                work_dir=str(workdir),
                pulumi_home=self.env["PULUMI_HOME"],
                env_vars=self.env,
                secrets_provider="passphrase",
                project_settings=auto.ProjectSettings(
                    name=PROJECT,
                    runtime="python",
                    backend=auto.ProjectBackend(url=self.env["PULUMI_BACKEND_URL"]),
                ),
                pulumi_command=auto.PulumiCommand(root=str(GO), skip_version_check=True),
            ),
        )

    def write_settings(self) -> None:
        path = self.workdir / f"Pulumi.{self.name}.yaml"
        settings = stack_settings(self.stack_file, self.overrides)
        if path.exists():  # keep what the CLI wrote (encryptionsalt)
            kept = yaml.safe_load(path.read_text()) or {}
            settings = {**kept, "config": settings["config"]}
        path.write_text(yaml.safe_dump(settings, sort_keys=False))

    def set(self, **overrides: Any) -> None:
        """Change stack settings, as an edit of `Pulumi.<stack>.yaml` would."""
        self.overrides.update(overrides)
        self.write_settings()

    def _run(self, command: str, call: Callable[..., Any], **kwargs: Any) -> EngineRun:
        # Kept where a failed command (an `auto.CommandError`) leaves its events: `last_run`.
        run = self.last_run = EngineRun(command=command, seconds=0.0)
        start = time.monotonic()
        # The inline program (and its resource hooks) runs in this process, not in the CLI's:
        # give it the cluster the CLI and the provider see, as a shell running `pulumi up` would.
        saved = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = self.env["KUBECONFIG"]
        try:
            result = call(on_event=run.on_event, color="never", **kwargs)
        finally:
            run.seconds = time.monotonic() - start
            if saved is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = saved
        outputs = getattr(result, "outputs", None)
        if outputs:
            run.outputs = {k: v.value for k, v in outputs.items()}
        return run

    def preview(self, policy_config: Path | None = None, **kw: Any) -> EngineRun:
        packs = {}
        if policy_config is not None:
            packs = {"policy_packs": [str(PACK)], "policy_pack_configs": [str(policy_config)]}
        return self._run("preview", self.stack.preview, **packs, **kw)

    def up(self, **kw: Any) -> EngineRun:
        return self._run("up", self.stack.up, **kw)

    def refresh(self, **kw: Any) -> EngineRun:
        return self._run("refresh", self.stack.refresh, **kw)

    def destroy(self, **kw: Any) -> EngineRun:
        return self._run("destroy", self.stack.destroy, **kw)


def tools_missing(*needed: str) -> list[str]:
    """Which of these binaries of `make tools` are not built."""
    return [name for name in needed if not (BIN / name).exists()]


def main() -> int:
    """`up` or `destroy` of a stack in `--workdir`, as one JSON line; exit 1 on an error."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "destroy"])
    parser.add_argument("--workdir", type=Path, required=True, help="the stack's state, kept")
    parser.add_argument("--stack", default="dev", help="the Pulumi.<stack>.yaml to start from")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--settings", type=json.loads, default={}, help="overrides, as JSON")
    args = parser.parse_args()
    stack = EngineStack(args.workdir, args.stack, args.kubeconfig, args.settings)
    try:
        run = stack.up() if args.command == "up" else stack.destroy(run_program=True)
    except auto.CommandError as exc:
        run = stack.last_run or EngineRun(args.command, 0.0)
        run.diagnostics.append(("error", str(exc).strip()[-4000:]))
    summary = {
        "command": args.command,
        "seconds": round(run.seconds, 1),
        "changes": run.changes,
        "statefulsets": {name: sorted(ops) for name, ops in run.ops("StatefulSet").items()},
        "errors": run.errors(),
    }
    print(json.dumps(summary), flush=True)
    return 1 if run.errors() else 0


if __name__ == "__main__":
    sys.exit(main())
