#!/usr/bin/env python3
"""Build the Go tools of the engine, kube and node tiers from their Go modules, at pinned versions.

Each binary is built from a small wrapper module (generated under wrappers/NAME of the cache):
`go install module@version` refuses modules whose go.mod carries `replace` directives, so the
wrapper requires the module at its pinned version, copies the module's own replace directives
that point at other modules, and turns those that point at a directory of the same repository
(../sdk, ./staging/src/k8s.io/api) into the published module at the matching version.

The Go build cache, module cache and GOPATH are under ~/.cache/stateful-streaming-go/ (outside
the clone, so another checkout on the machine reuses them; GO_TOOLS_HOME moves them), the
binaries go to its bin/; every build runs under `nice -n 19`, with `-p $GO_TOOLS_JOBS` packages
at once (1 by default, so a core stays free).

    python3 devkit/kube/go_tools.py            # build every binary that is missing or stale
    python3 devkit/kube/go_tools.py --list     # the pinned versions
    python3 devkit/kube/go_tools.py kwok etcd  # only these
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Outside the clone, so a fresh checkout on the same machine (CI) finds the binaries built: the
# caches are about 13 GB and a cold build takes tens of minutes. GO_TOOLS_HOME moves it.
GO = Path(
    os.environ.get("GO_TOOLS_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stateful-streaming-go"
)
BIN = GO / "bin"
# Packages compiled at once: 1 keeps a core free beside other work; CI sets 2.
JOBS = os.environ.get("GO_TOOLS_JOBS", "1")

# ---- the pinned versions: the one place to change them ----------------------------------------
# uv.lock has pulumi 3.272.0 and pulumi-kubernetes 4.34.2. The Go module proxy this machine
# reaches does not serve those (403 "This module version is not available" for
# github.com/pulumi/pulumi/pkg/v3@v3.272.0, for every version of
# github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, and for
# github.com/pulumi/pulumi-kubernetes/provider/v4@v4.34.2): the nearest it serves are pinned here.
# Not built, for the same 403: the Python language host (so `pulumi` cannot run a Python program
# or policy pack from these binaries alone), pulumi-random (provider/v4@v4.21.4) and pulumi-tls
# (provider/v5@v5.6.2). The last sdk/v3 that still holds the host, v3.79.0, is served and builds
# (python/cmd/pulumi-language-python, 40 s), and the 3.274.1 CLI runs a Python program with it
# (with pip in the virtualenv and its python first on PATH: it ignores `virtualenv`), but not a
# policy pack: its RunPlugin runs the project's directory instead of the pack's. Not built here:
# the program needs pulumi-random and pulumi-tls anyway.
PULUMI = "v3.274.1"  # pkg/v3 and sdk/v3 (pkg/v3 serves 3.260.0, 3.274.0, 3.274.1; not 3.272.0)
# The proxy serves provider/v4 only as this pseudo-version: commit f47bc2d6f199 is the one
# tagged v4.25.0 in pulumi-kubernetes, so it is stamped (and installed as) 4.25.0.
PULUMI_KUBERNETES = "v4.0.0-20260115033456-f47bc2d6f199"
PULUMI_KUBERNETES_RELEASE = "v4.25.0"
PULUMI_KUBERNETES_SDK = "v4.25.0"  # for the provider's `sdk/v4 => ../sdk` replace
KUBERNETES = "v1.36.3"  # k8s.io/kubernetes; staging modules at v0.36.3
# go.etcd.io/etcd/server/v3: Debian's etcd-server is 3.4.23, older than the 3.5.24 that
# Kubernetes 1.36 takes as its least external etcd (kubeadm's MinExternalEtcdVersion); it
# recommends 3.6.8
ETCD = "v3.6.16"
KWOK = "v0.8.0"
COREDNS = "v1.14.7"
# kind's provisioner: a claim's directory is made by a helper pod, writable by the pod's fsGroup
# (the in-tree hostPath provisioner makes it root:root 0750, and hostPath ignores fsGroup)
LOCAL_PATH_PROVISIONER = "v0.0.30"
# The GitHub workflows' linter (tests/infra/test_ci.py): the workflows cannot run here, so their
# expressions, action inputs and shell are checked statically
ACTIONLINT = "v1.7.12"
# promtool, for `promtool test rules` on the alerting rules (tests/infra/test_alert_rules.py)
PROMETHEUS = "v0.316.0"  # github.com/prometheus/prometheus: Prometheus 3.x's Go module version


# CoreDNS with the plugins the node's Corefile uses and no other, as CoreDNS documents for
# builds outside its tree (dnsserver.Directives in plugin.cfg's order): its full build compiles
# every cloud provider's SDK and takes three times as long.
COREDNS_MAIN = """package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
	"github.com/coredns/coredns/coremain"
)

func init() {
	dnsserver.Directives = []string{
		"bind", "ready", "health", "errors", "cache", "template", "kubernetes",
	}
}

func main() { coremain.Run() }
"""


@dataclass
class Target:
    name: str  # the binary's file name
    module: str
    version: str
    package: str
    ldflags: list[str] = field(default_factory=list)
    # module path -> version for the module's replace directives that point at a directory
    local: dict[str, str] = field(default_factory=dict)
    # default version for local replaces not listed in `local` (None: same as `version`)
    local_default: str | None = None
    # files to create in a writable copy of the module (go:embed files a Makefile generates)
    generate: dict[str, str] = field(default_factory=dict)
    # the wrapper's own main package, where the binary is the module's library with a chosen
    # part of it (`package` is then the wrapper's, wrapper.local/NAME)
    main_source: str | None = None
    # built only when asked for (`--node`, `make node-tools`): the real node's binaries, which
    # the engine tier and CI do not need
    node: bool = False
    # build tags (`go build -tags`)
    tags: list[str] = field(default_factory=list)


def _kube_ldflags(version: str) -> list[str]:
    pkg = "k8s.io/component-base/version"
    major, minor = version.lstrip("v").split(".")[:2]
    return [
        f"-X {pkg}.gitVersion={version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    ]


def _kube(name: str) -> Target:
    return Target(
        name=name,
        module="k8s.io/kubernetes",
        version=KUBERNETES,
        package=f"k8s.io/kubernetes/cmd/{name}",
        ldflags=_kube_ldflags(KUBERNETES),
        local_default="v0." + KUBERNETES.lstrip("v").split(".", 1)[1],
    )


_PV = "github.com/pulumi/pulumi/sdk/v3/go/common/version.Version"
_K8S_CMD = "cmd/pulumi-resource-kubernetes"
TARGETS = [
    Target(
        name="pulumi",
        module="github.com/pulumi/pulumi/pkg/v3",
        version=PULUMI,
        package="github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
        ldflags=[f"-X {_PV}={PULUMI}"],
    ),
    Target(
        name="pulumi-resource-kubernetes",
        module="github.com/pulumi/pulumi-kubernetes/provider/v4",
        version=PULUMI_KUBERNETES,
        package="github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes",
        ldflags=[
            "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version="
            + PULUMI_KUBERNETES_RELEASE
        ],
        local={"github.com/pulumi/pulumi-kubernetes/sdk/v4": PULUMI_KUBERNETES_SDK},
        # the provider's Makefile copies these two before building; they are go:embed'ed
        generate={
            f"{_K8S_CMD}/schema-embed.json": f"{_K8S_CMD}/schema.json",
            f"{_K8S_CMD}/terraform-mapping-embed.json": f"{_K8S_CMD}/terraform-mapping.json",
        },
    ),
    _kube("kube-apiserver"),
    _kube("kube-controller-manager"),
    _kube("kube-scheduler"),  # pods are placed on the kwok nodes by the real scheduler
    Target(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD,
        package="go.etcd.io/etcd/server/v3",
    ),
    # the real node (devkit/kube/node.py): a kubelet, kube-proxy and CoreDNS beside the control
    # plane
    replace(_kube("kubelet"), node=True),
    replace(_kube("kube-proxy"), node=True),
    Target(
        name="coredns",
        module="github.com/coredns/coredns",
        version=COREDNS,
        package="wrapper.local/coredns",
        main_source=COREDNS_MAIN,
        node=True,
    ),
    Target(
        name="local-path-provisioner",
        module="github.com/rancher/local-path-provisioner",
        version=LOCAL_PATH_PROVISIONER,
        package="github.com/rancher/local-path-provisioner",
        ldflags=[f"-X main.VERSION={LOCAL_PATH_PROVISIONER}"],
        node=True,
    ),
    Target(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=KWOK,
        package="sigs.k8s.io/kwok/cmd/kwok",
        ldflags=[f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK}"],
    ),
    Target(
        name="actionlint",
        module="github.com/rhysd/actionlint",
        version=ACTIONLINT,
        package="github.com/rhysd/actionlint/cmd/actionlint",
        ldflags=[f"-X github.com/rhysd/actionlint.version={ACTIONLINT}"],
    ),
    Target(
        name="promtool",
        module="github.com/prometheus/prometheus",
        version=PROMETHEUS,
        package="github.com/prometheus/prometheus/cmd/promtool",
        ldflags=[f"-X github.com/prometheus/common/version.Version={PROMETHEUS}"],
        # Without every cloud's service discovery SDK (Prometheus' own build tag): rule tests
        # need none of them, and they would double the build
        tags=["remove_all_sd"],
    ),
]


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOCACHE=str(GO / "cache"),
        GOMODCACHE=str(GO / "mod"),
        GOPATH=str(GO / "path"),
        GOTMPDIR=str(GO / "tmp"),
        GOFLAGS="-buildvcs=false",
        GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "local"),
        CGO_ENABLED="0",
    )
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def module_gomod(t: Target, env: dict[str, str]) -> tuple[dict, Path]:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{t.module}@{t.version}"],
        cwd=GO,
        env=env,
        capture_output=True,
        text=True,
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Error" in info:
        raise SystemExit(f"{t.name}: {info.get('Error') or out.stderr.strip()}")
    edit = subprocess.run(
        ["go", "mod", "edit", "-json", info["GoMod"]],
        cwd=GO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(edit.stdout), Path(info["Dir"])


def write_wrapper(t: Target, env: dict[str, str]) -> Path:
    mod, src = module_gomod(t, env)
    wdir = GO / "wrappers" / t.name
    if wdir.exists():
        shutil.rmtree(wdir)
    wdir.mkdir(parents=True)
    lines = [f"module wrapper.local/{t.name}", "", f"go {mod['Go']}", ""]
    lines.append(f"require {t.module} {t.version}")
    replaces: list[str] = []
    for r in mod.get("Replace") or []:
        old, new = r["Old"]["Path"], r["New"]
        if "FORBIDDEN_DEPENDENCY" in new["Path"]:
            continue  # etcd's guard against importing its test modules; not a dependency
        if new["Path"].startswith((".", "/")):  # a directory of the module's repository
            version = t.local.get(old) or t.local_default or t.version
            replaces.append(f"replace {old} => {old} {version}")
        else:
            oldv = f" {r['Old']['Version']}" if r["Old"].get("Version") else ""
            replaces.append(
                f"replace {old}{oldv} => {new['Path']} {new.get('Version', '')}".rstrip()
            )
    if t.generate:
        # a writable copy of the module with the generated go:embed files
        copy = GO / "src" / f"{t.name}@{t.version}"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(src, copy)
        for p in copy.rglob("*"):
            p.chmod(p.stat().st_mode | 0o200)
        for dst, origin in t.generate.items():
            shutil.copyfile(copy / origin, copy / dst)
        replaces.append(f"replace {t.module} => {copy}")
    lines += ["", *replaces, ""]
    (wdir / "go.mod").write_text("\n".join(lines))
    if t.main_source is not None:
        (wdir / "main.go").write_text(t.main_source)
    else:
        (wdir / "tools.go").write_text(
            f'//go:build tools\n\npackage tools\n\nimport _ "{t.package}"\n'
        )
    return wdir


def _tag_args(t: Target) -> list[str]:
    return ["-tags", ",".join(t.tags)] if t.tags else []


def build(t: Target, env: dict[str, str], download_only: bool = False) -> float:
    start = time.monotonic()
    wdir = write_wrapper(t, env)
    # -mod=mod fills go.sum from the module proxy (checked against the checksum database);
    # listing the package's dependencies fetches just the modules the build needs
    subprocess.run(
        ["go", "list", "-mod=mod", *_tag_args(t), "-deps", "-f", "{{.ImportPath}}", t.package],
        cwd=wdir,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if download_only:
        return time.monotonic() - start
    out = BIN / t.name
    cmd = [
        "nice",
        "-n",
        "19",
        "go",
        "build",
        "-mod=mod",
        "-p",
        JOBS,
        "-trimpath",
        *_tag_args(t),
        "-ldflags",
        " ".join(["-s", "-w", *t.ldflags]),
        "-o",
        str(out),
        t.package,
    ]
    run(cmd, wdir, env)
    (BIN / f".{t.name}.version").write_text(f"{t.module}@{t.version}\n")
    return time.monotonic() - start


def pulumi_env() -> dict[str, str]:
    """PULUMI_HOME beside the binaries: the plugins installed there touch no user's ~/.pulumi."""
    env = dict(os.environ)
    env.update(
        PULUMI_HOME=str(GO / "pulumi-home"),
        PULUMI_SKIP_UPDATE_CHECK="1",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def install_plugins() -> None:
    """`pulumi plugin install ... --file` for each provider built; shows the versions."""
    pulumi = BIN / "pulumi"
    if not pulumi.exists():
        return
    env = pulumi_env()
    plugins = {"pulumi-resource-kubernetes": ("kubernetes", PULUMI_KUBERNETES_RELEASE)}
    for binary, (name, version) in plugins.items():
        if (BIN / binary).exists():
            run(
                [
                    str(pulumi),
                    "plugin",
                    "install",
                    "resource",
                    name,
                    version.lstrip("v"),
                    "--file",
                    str(BIN / binary),
                ],
                ROOT,
                env,
            )
    run([str(pulumi), "version"], ROOT, env)
    run([str(pulumi), "plugin", "ls"], ROOT, env)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="*", help="binaries to build (default: all but the real node's)")
    ap.add_argument("--node", action="store_true", help="build the real node's binaries too")
    ap.add_argument("--list", action="store_true", help="print the pinned versions")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument(
        "--download-only",
        action="store_true",
        help="write the wrappers and fetch their modules, build nothing",
    )
    args = ap.parse_args()
    if args.list:
        for t in TARGETS:
            print(f"{t.name:28} {t.module}@{t.version}")
        return 0
    unknown = set(args.names) - {t.name for t in TARGETS}
    if unknown:
        raise SystemExit(f"unknown: {', '.join(sorted(unknown))}")
    BIN.mkdir(parents=True, exist_ok=True)
    (GO / "tmp").mkdir(parents=True, exist_ok=True)
    env = go_env()
    failed = []
    for t in TARGETS:
        if args.names and t.name not in args.names:
            continue
        if not args.names and t.node and not args.node:
            continue
        stamp = BIN / f".{t.name}.version"
        if (
            not args.force
            and (BIN / t.name).exists()
            and stamp.exists()
            and stamp.read_text().strip() == f"{t.module}@{t.version}"
        ):
            print(f"{t.name}: up to date ({t.module}@{t.version})")
            continue
        if args.download_only:
            secs = build(t, env, download_only=True)
            print(f"{t.name}: modules of {t.module}@{t.version} fetched in {secs:.0f} s")
            continue
        try:
            secs = build(t, env)
        except (subprocess.CalledProcessError, SystemExit) as e:
            print(f"{t.name}: FAILED: {e}", file=sys.stderr, flush=True)
            failed.append(t.name)
            continue
        print(f"{t.name}: built {t.module}@{t.version} in {secs:.0f} s", flush=True)
    if not args.download_only:
        install_plugins()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
