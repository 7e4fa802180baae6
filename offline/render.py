"""Run the Pulumi program offline under Pulumi's own mocks and write what it would apply.

    python -m offline.render --stack dev --out build/manifests/dev

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
import os
import runpy
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.output import Unknown

from contract.stack_pipeline import PROJECT
from infra.stack_settings import StackConfigError

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILE = ROOT / "Pulumi.yaml"
PROGRAM = ROOT / "infra"
STACK_TYPE = "pulumi:pulumi:Stack"
_CONFIG_ENV = "PULUMI_CONFIG"
STACK_REFERENCE_TYPE = "pulumi:pulumi:StackReference"
STORAGE_CLASS_TYPE = "kubernetes:storage.k8s.io/v1:StorageClass"


@dataclass(frozen=True)
class RecordedResource:
    """One resource as the engine would receive it."""

    type: str  # "kubernetes:apps/v1:StatefulSet"
    name: str  # Pulumi logical name
    urn: str
    props: dict[str, Any]  # inputs, wire names (camelCase Kubernetes fields), numbers as given
    parent: str | None
    dependencies: tuple[str, ...]  # its `depends_on`, a component as its descendants
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
    Every registration's inputs are kept, as the engine received them, in registration order.
    """

    def __init__(
        self,
        stack: str,
        preview: bool = False,
        deployed: Mapping[str, Any] | None = None,
        storage_classes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.stack = stack
        self.preview = preview
        self.deployed = dict(deployed or {})
        self.storage_classes = dict(storage_classes or {})
        self.inputs: list[tuple[str, str, dict[str, Any]]] = []  # (type, name, inputs)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.inputs.append((args.typ, args.name, dict(args.inputs)))
        state = dict(args.inputs)
        if args.typ == STACK_REFERENCE_TYPE:
            # The program reads its own stack's outputs: what the last `pulumi up` left.
            return f"{args.name}-id", {**state, "outputs": self.deployed, "secretOutputNames": []}
        if args.resource_id and args.typ == STORAGE_CLASS_TYPE:
            # A read of a storage class in the cluster: as the recording was told it is.
            return args.resource_id, {**state, **self.storage_classes.get(args.resource_id, {})}
        if self.preview and args.typ.startswith(_COMPUTED_BY_PROVIDER):
            # What a preview of a new stack sees: what the provider computes is not known yet.
            return "", state
        digest = hashlib.sha256(f"{self.stack}/{args.name}".encode()).digest()
        # Unique per type too: a key, its request and its certificate share a name.
        unique = hashlib.sha256(f"{self.stack}/{args.typ}/{args.name}".encode())
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


class _OptionsRecorder:
    """A stack transformation that changes nothing and keeps each resource and its options.

    `pulumi.runtime.Mocks` sees a registration's inputs only; the options (`protect`,
    `customTimeouts`, `retainOnDelete`, ...) are what the program gave the resource.
    """

    def __init__(self) -> None:
        self.registered: list[tuple[pulumi.Resource, str, str, pulumi.ResourceOptions]] = []

    def __call__(
        self, args: pulumi.ResourceTransformationArgs
    ) -> pulumi.ResourceTransformationResult | None:
        self.registered.append((args.resource, args.type_, args.name, args.opts))
        return None


def _timeouts(options: pulumi.ResourceOptions) -> dict[str, str] | None:
    timeouts = options.custom_timeouts
    if timeouts is None:
        return None
    given = {"create": timeouts.create, "update": timeouts.update, "delete": timeouts.delete}
    return {k: v for k, v in given.items() if v} or None


def _resolved(value: Any) -> Any:
    """The value of an output the finished program made; `Unknown` where a preview cannot know
    it (an output made from a provider's result in a new stack)."""
    result: list[Any] = []

    @pulumi.runtime.test
    def read() -> pulumi.Output[Any]:
        return pulumi.Output.from_input(value).apply(result.append)

    read()
    return result[0] if result else Unknown()


def load_stack_file(stack: str) -> dict[str, str]:
    """The config of `Pulumi.<stack>.yaml` over Pulumi.yaml's, as the CLI hands it to a program
    (JSON for objects)."""
    path = ROOT / f"Pulumi.{stack}.yaml"
    if not path.exists():
        known = sorted(p.name for p in ROOT.glob("Pulumi.*.yaml"))
        raise StackConfigError(f"stack {stack!r}: {path.name} not found; stack files: {known}")
    document = yaml.safe_load(path.read_text()) or {}
    settings = {**load_project_config(), **(document.get("config") or {})}
    for key, value in settings.items():
        if isinstance(value, Mapping) and "secure" in value:
            raise StackConfigError(f"{key}: secrets cannot be rendered offline; pass an override")
    return _as_passed(settings)


def load_project_config() -> dict[str, Any]:
    """Pulumi.yaml's `config`: every stack's values unless its own file sets the key. A key
    is a value, or (as `pulumi new` rewrites it) a map with its `value` or `default`."""
    document = yaml.safe_load(PROJECT_FILE.read_text()) or {}
    found = {}
    for key, entry in (document.get("config") or {}).items():
        if isinstance(entry, Mapping):
            if "value" not in entry and "default" not in entry:
                continue  # a declaration without a value: the stack must set it
            entry = entry["value"] if "value" in entry else entry["default"]
        found[key] = entry
    return found


def _as_passed(settings: Mapping[str, Any]) -> dict[str, str]:
    """Settings as the CLI passes them to a program: each key under the project, objects as
    JSON."""
    return {
        (key if ":" in key else f"{PROJECT}:{key}"): (
            value if isinstance(value, str) else json.dumps(value)
        )
        for key, value in settings.items()
    }


def record_stack(
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    preview: bool = False,
    deployed: Mapping[str, Any] | None = None,
    storage_classes: Mapping[str, Mapping[str, Any]] | None = None,
) -> RecordedStack:
    """Run the program for `stack` under mocks and return every resource it registers.

    `overrides` maps config keys (`stateful-streaming:processor`, or without the project prefix)
    to values (strings, or objects that are passed as JSON) that replace the stack file's.
    `preview` records what `pulumi preview` of a new stack sends the pack: what the random and
    TLS providers compute is unknown (`pulumi.output.Unknown`), and so is everything made from it.
    `deployed` is the stack's outputs from its last `pulumi up` (none: a new stack), and
    `storage_classes` the cluster's StorageClass objects by name, for the reads the program makes.
    """
    config = load_stack_file(stack) | _as_passed(overrides or {})

    mocks = _Mocks(stack, preview, deployed, storage_classes)
    options = _OptionsRecorder()
    # A fresh root stack per recording, as each `pulumi up` has its own.
    pulumi.runtime.reset_options(project=PROJECT, stack=stack, preview=preview)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=preview)
    pulumi.runtime.register_stack_transformation(options)

    @pulumi.runtime.test
    def run_program() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")

    # The stack's config reaches the program as the language host passes it: PULUMI_CONFIG.
    passed = os.environ.get(_CONFIG_ENV)
    os.environ[_CONFIG_ENV] = json.dumps(config)
    try:
        run_program()
    finally:
        if passed is None:
            os.environ.pop(_CONFIG_ENV)
        else:
            os.environ[_CONFIG_ENV] = passed
    root = pulumi.runtime.get_root_resource()
    assert isinstance(root, pulumi.ComponentResource)  # set_mocks made the program's Stack
    resources = [resource for resource, *_ in options.registered]
    urns = _resolved([root.urn, *(resource.urn for resource in resources)])
    urn_of = {id(resource): urn for resource, urn in zip([root, *resources], urns, strict=True)}
    outputs = {key: _resolved(value) for key, value in getattr(root, "outputs", {}).items()}
    return RecordedStack(
        stack=stack,
        project=PROJECT,
        config=config,
        resources=tuple(_recorded(mocks.inputs, options.registered, urn_of, root)),
        outputs=outputs,
    )


def _recorded(
    inputs: list[tuple[str, str, dict[str, Any]]],
    registered: list[tuple[pulumi.Resource, str, str, pulumi.ResourceOptions]],
    urn_of: Mapping[int, str],
    root: pulumi.Resource,
) -> list[RecordedResource]:
    """Each registration's inputs joined with the options its resource was given."""
    pending: dict[tuple[str, str], list[tuple[pulumi.Resource, pulumi.ResourceOptions]]] = {}
    parent_of: dict[int, pulumi.Resource] = {}
    children: dict[int, list[pulumi.Resource]] = {}
    for resource, typ, name, opts in registered:
        pending.setdefault((typ, name), []).append((resource, opts))
        parent_of[id(resource)] = opts.parent if opts.parent is not None else root
        children.setdefault(id(parent_of[id(resource)]), []).append(resource)

    def expanded(dependency: pulumi.Resource) -> list[pulumi.Resource]:
        # As the SDK sends `depends_on`: a component stands for its descendants.
        if isinstance(dependency, pulumi.ComponentResource):
            return [r for child in children.get(id(dependency), []) for r in expanded(child)]
        return [dependency]

    recorded = []
    for typ, name, props in inputs:
        resource, opts = pending[(typ, name)].pop(0)
        recorded.append(
            RecordedResource(
                type=typ,
                name=name,
                urn=urn_of[id(resource)],
                props=props,
                parent=urn_of.get(id(parent_of[id(resource)])),
                dependencies=tuple(
                    urn_of[id(r)] for d in _depends_on(opts) for r in expanded(d) if id(r) in urn_of
                ),
                custom_timeouts=_timeouts(opts),
                protect=bool(opts.protect),
                retain_on_delete=bool(opts.retain_on_delete),
                delete_before_replace=bool(opts.delete_before_replace),
                replace_on_changes=tuple(opts.replace_on_changes or ()),
            )
        )
    return recorded


def _depends_on(options: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    given = options.depends_on
    if given is None:
        return []
    return list(given) if isinstance(given, list | tuple) else [given]  # type: ignore[list-item]


SECRET_PLACEHOLDER = "[secret]"

# A secret in Pulumi's property-value protocol: {SIGNATURE_KEY: SECRET_SIGNATURE, "value": ...}
# (sdk/go/common/resource/sig/sig.go). The mocks receive inputs in that form.
SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"


def _is_secret(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get(SIGNATURE_KEY) == SECRET_SIGNATURE


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
        prog="python -m offline.render", description=__doc__.split("\n")[0]
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
