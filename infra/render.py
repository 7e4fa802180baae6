"""Run the Pulumi program offline under Pulumi's own mocks and write what it would apply.

    python -m infra.render --stack dev --out build/manifests/dev

No cluster, credentials or Pulumi CLI: the program runs exactly as `pulumi up` runs it
(`runpy` on `infra/`, inside a root stack), with `Pulumi.<stack>.yaml` as its configuration and
`pulumi.runtime.set_mocks` in place of the engine. Every registered resource is recorded with its
inputs and options; `record_stack` is the API the policy pack's offline runner and the tests use.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import runpy
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

from infra.config import PROJECT, StackConfigError

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "infra"
STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class RecordedResource:
    """One resource as the engine would receive it."""

    type: str  # "kubernetes:apps/v1:StatefulSet"
    name: str  # Pulumi logical name
    urn: str
    props: dict[str, Any]  # inputs, wire names (camelCase Kubernetes fields), numbers as given
    parent: str | None
    provider: str | None
    dependencies: tuple[str, ...]
    custom_timeouts: dict[str, str] | None  # {"create": "20m", "update": "40m", "delete": ...}
    protect: bool
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    replace_on_changes: tuple[str, ...] = ()

    @property
    def is_kubernetes(self) -> bool:
        """Whether this is a Kubernetes object (a manifest), not a component or a RandomId."""
        return (
            self.type.startswith("kubernetes:")
            and not self.type.endswith("Patch")  # a change to an object another one makes
            and "apiVersion" in self.props
        )


@dataclass(frozen=True)
class RecordedStack:
    """Everything one run of the program registered."""

    stack: str
    project: str
    config: dict[str, str]
    resources: tuple[RecordedResource, ...]
    outputs: dict[str, Any]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """The Kubernetes manifests, integral numbers as ints (the engine passes floats).

        A Pulumi secret reads `[secret]`, as `pulumi preview` shows it: a manifest written for
        review never holds a password or a key.
        """
        return [_integral(r.props) for r in self.resources if r.is_kubernetes]

    def secret_values(self) -> list[str]:
        """Every string that the program passed as a Pulumi secret (to check where it goes)."""
        found: list[str] = []
        for resource in self.resources:
            _collect_secrets(resource.props, found, inside=False)
        return found

    def find(self, type_: str, name: str) -> RecordedResource:
        """The resource with that type token and logical name (KeyError names what exists)."""
        for resource in self.resources:
            if resource.type == type_ and resource.name == name:
                return resource
        known = sorted(f"{r.type} {r.name}" for r in self.resources)
        raise KeyError(f"no {type_} named {name!r}; recorded: {known}")


# Providers whose outputs are made at `up`, not from the inputs: unknown in a new stack's preview.
_COMPUTED_BY_PROVIDER = ("random:", "tls:")


class _Mocks(pulumi.runtime.Mocks):
    """The engine's stand-in: every resource is created with its inputs as its state.

    `random:index/randomId:RandomId` gets a value derived from its URN, the way a real stack
    keeps the one generated at the first `pulumi up`: the same stack always sees the same id.
    """

    def __init__(self, preview: bool = False) -> None:
        self.preview = preview

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        if self.preview and args.typ.startswith(_COMPUTED_BY_PROVIDER):
            # What a preview of a new stack sees: what the provider computes is not known yet.
            return "", state
        digest = hashlib.sha256(f"{settings.get_stack()}/{args.name}".encode()).digest()
        # Unique per type too: a key, its request and its certificate share a name.
        unique = hashlib.sha256(f"{settings.get_stack()}/{args.typ}/{args.name}".encode())
        if args.typ == "random:index/randomId:RandomId":
            state.update(_random_id_forms(digest[: int(args.inputs.get("byteLength", 16))]))
        elif args.typ == "random:index/randomPassword:RandomPassword":
            state["result"] = unique.hexdigest()[: int(args.inputs.get("length", 16))]
        elif args.typ.startswith("tls:"):
            # Every pulumi-tls input forces a replacement: new inputs (a new signing CA), new PEM.
            unique.update(json.dumps(args.inputs, sort_keys=True, default=str).encode())
            state.update(_tls_outputs(args.typ, unique.hexdigest()))
        return f"{args.name}-id", state

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        """The program calls no provider functions: an empty result, no failures."""
        return {}, None


def _random_id_forms(raw: bytes) -> dict[str, Any]:
    """The attributes a RandomId exposes, from its raw bytes."""
    b64 = base64.b64encode(raw).decode()
    return {
        "b64Std": b64,
        "b64Url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "hex": raw.hex(),
        "dec": str(int.from_bytes(raw, "big")),
        "id": base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }


# What the TLS provider's resources expose, as stand-ins unique to each resource: the tests check
# where key material goes (only into Secrets), not that it is valid.
_TLS_OUTPUTS = {
    "tls:index/privateKey:PrivateKey": ("privateKeyPem", "privateKeyPemPkcs8", "publicKeyPem"),
    "tls:index/selfSignedCert:SelfSignedCert": ("certPem",),
    "tls:index/certRequest:CertRequest": ("certRequestPem",),
    "tls:index/locallySignedCert:LocallySignedCert": ("certPem",),
}


def _tls_outputs(type_: str, unique: str) -> dict[str, str]:
    """PEM-shaped stand-ins for a TLS resource's outputs (`privateKeyPemPkcs8` -> PRIVATE KEY)."""
    labels = {
        "privateKeyPem": "RSA PRIVATE KEY",
        "privateKeyPemPkcs8": "PRIVATE KEY",
        "publicKeyPem": "PUBLIC KEY",
        "certPem": "CERTIFICATE",
        "certRequestPem": "CERTIFICATE REQUEST",
    }
    return {
        output: f"-----BEGIN {labels[output]}-----\n{unique}\n-----END {labels[output]}-----\n"
        for output in _TLS_OUTPUTS.get(type_, ())
    }


class _RecordingMonitor(MockMonitor):
    """Pulumi's mock monitor that also keeps each registration's options and the stack outputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []
        self.outputs: dict[str, Any] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type == STACK_TYPE:
            return response
        timeouts = request.customTimeouts
        self.recorded.append(
            RecordedResource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                props=rpc.deserialize_properties(request.object),
                parent=request.parent or None,
                provider=request.provider or None,
                dependencies=tuple(request.dependencies),
                custom_timeouts=(
                    {k: v for k in ("create", "update", "delete") if (v := getattr(timeouts, k))}
                    or None
                ),
                protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                delete_before_replace=bool(request.deleteBeforeReplace),
                replace_on_changes=tuple(request.replaceOnChanges),
            )
        )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if request.urn.split("::")[2] == STACK_TYPE:
            self.outputs = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


def load_stack_file(stack: str) -> dict[str, str]:
    """The config of `Pulumi.<stack>.yaml` as the CLI hands it to a program (JSON for objects)."""
    path = ROOT / f"Pulumi.{stack}.yaml"
    if not path.exists():
        known = sorted(p.name for p in ROOT.glob("Pulumi.*.yaml"))
        raise StackConfigError(f"stack {stack!r}: {path.name} not found; stack files: {known}")
    document = yaml.safe_load(path.read_text()) or {}
    config = {}
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, Mapping) and "secure" in value:
            raise StackConfigError(f"{key}: secrets cannot be rendered offline; pass an override")
        full = key if ":" in key else f"{PROJECT}:{key}"
        config[full] = value if isinstance(value, str) else json.dumps(value)
    return config


def record_stack(
    stack: str, overrides: Mapping[str, Any] | None = None, *, preview: bool = False
) -> RecordedStack:
    """Run the program for `stack` under mocks and return every resource it registers.

    `overrides` maps config keys (`stateful-streaming:processor`, or without the project prefix)
    to values (strings, or objects that are passed as JSON) that replace the stack file's.
    `preview` records what `pulumi preview` of a new stack sends the pack: what the random and
    TLS providers compute is unknown (`pulumi.output.Unknown`), and so is everything made from it.
    """
    config = load_stack_file(stack)
    for key, value in (overrides or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        config[full] = value if isinstance(value, str) else json.dumps(value)

    mocks = _Mocks(preview)
    monitor = _RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    set_all_config(config, [])
    # set_mocks installs a root stack for unit tests; the program gets its own, as under the CLI.
    settings.set_root_resource(None)  # type: ignore[arg-type]

    def run_program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")

    try:
        _sync_await(run_in_stack(run_program))
    finally:
        settings.set_root_resource(None)  # type: ignore[arg-type]
    return RecordedStack(
        stack=stack,
        project=PROJECT,
        config=config,
        resources=tuple(monitor.recorded),
        outputs=monitor.outputs,
    )


SECRET_PLACEHOLDER = "[secret]"


def _is_secret(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def _collect_secrets(value: Any, found: list[str], inside: bool) -> None:
    if _is_secret(value):
        _collect_secrets(value["value"], found, inside=True)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect_secrets(item, found, inside)
    elif isinstance(value, list):
        for item in value:
            _collect_secrets(item, found, inside)
    elif inside and isinstance(value, str):
        found.append(value)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if _is_secret(value):
        inner = value["value"]
        if isinstance(inner, Mapping):
            return {k: SECRET_PLACEHOLDER for k in inner}
        return SECRET_PLACEHOLDER
    if isinstance(value, Mapping):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def manifest_filename(obj: Mapping[str, Any]) -> str:
    """`<kind>-<name>.yaml`, lower case, unique within one stack."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


# kubectl's order, so a reviewer reads what an object is before what it holds.
TOP_LEVEL_ORDER = ("apiVersion", "kind", "metadata", "spec", "data")


def conventional_order(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object with its top-level fields in the order Kubernetes documentation uses."""
    first = {k: obj[k] for k in TOP_LEVEL_ORDER if k in obj}
    return {**first, **{k: v for k, v in obj.items() if k not in first}}


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (properties files, JSON specs) as literal blocks, as people write them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


def write_manifests(recorded: RecordedStack, out: Path) -> list[Path]:
    """Write one YAML file per Kubernetes object; stale files from an earlier render are removed."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.yaml"):
        stale.unlink()
    written = []
    for obj in recorded.kubernetes_objects():
        path = out / manifest_filename(obj)
        text = yaml.dump(
            conventional_order(obj),
            Dumper=_ManifestDumper,
            sort_keys=False,
            default_flow_style=False,
        )
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.render", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", type=Path, required=True, help="directory for the manifests")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help='replace a stack setting, e.g. processor=\'{"membershipMode": "static"}\' '
        "(a top-level key of Pulumi.<stack>.yaml, its value as JSON or a plain string); "
        "repeatable",
    )
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    for item in args.override:
        key, separator, value = item.partition("=")
        if not separator or not key:
            parser.error(f"--override {item!r}: expected KEY=JSON, e.g. processor='{{...}}'")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    try:
        recorded = record_stack(args.stack, overrides)
    except StackConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in write_manifests(recorded, args.out):
        meta = yaml.safe_load(path.read_text())["metadata"]
        print(f"{path}  {meta.get('namespace', '-')}/{meta['name']}")
    print(f"stack {args.stack}: {len(recorded.kubernetes_objects())} manifests, outputs:")
    for key, value in sorted(recorded.outputs.items()):
        print(f"  {key} = {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
