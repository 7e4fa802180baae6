#!/usr/bin/env python3
"""A Kubernetes control plane on 127.0.0.1 with simulated (kwok) nodes, no containers.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, as built by
devkit/kube/go_tools.py (into ~/.cache/stateful-streaming-go/bin), each started as a process of its
own bound to 127.0.0.1, with the certificates and kubeconfigs this script makes with openssl.
kwok plays the kubelet of the nodes this script registers (annotation kwok.x-k8s.io/node=fake)
with the stages kwokctl uses by default (node-initialize, node-heartbeat-with-lease, pod-ready,
pod-complete, pod-delete, read from kwok's own module), so pods become Running and Ready and
Jobs complete.

    python3 devkit/kube/control_plane.py up [--nodes 3]   # prints the KUBECONFIG path
    python3 devkit/kube/control_plane.py status
    python3 devkit/kube/control_plane.py down             # stops each process by its pid file
    python3 devkit/kube/control_plane.py check   # namespace (restricted), StatefulSet, Ready pods

Everything lives under .venv/kube/ (pki/, etcd/, logs/, run/*.pid, kubeconfig), but for the
volumes of the default StorageClass `standard`: kube-controller-manager's in-tree hostPath
provisioner makes /tmp/hostpath_pv/<uid> per claim (no kubelet ever mounts it) and removes it
when the claim goes; `down` removes those left. `up` starts from an empty etcd; `down` leaves
the logs. Ports (127.0.0.1 only) move with CLUSTER_PORT_BASE.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: `python3 devkit/kube/control_plane.py up`
from devkit.kube import pki  # noqa: E402
from devkit.kube.go_tools import BIN, GO, KWOK  # noqa: E402  (the binaries, their module cache)
from devkit.kube.processes import Processes  # noqa: E402

STATE = Path(os.environ.get("KUBE_DIR", ROOT / ".venv" / "kube"))
PKI, LOGS, RUN, ETCD_DATA = STATE / "pki", STATE / "logs", STATE / "run", STATE / "etcd"
KUBECONFIG = STATE / "kubeconfig"
PROCESSES = Processes(RUN, LOGS, STATE)
running_pid = PROCESSES.running_pid

HOST = "127.0.0.1"
BASE = int(os.environ.get("CLUSTER_PORT_BASE", "36400"))
PORTS = {
    "etcd-client": BASE + 79,
    "etcd-peer": BASE + 80,
    "apiserver": BASE + 43,
    "controller-manager": BASE + 57,
    "scheduler": BASE + 59,
    "kwok": BASE + 47,
}
# Service addresses: with kwok nodes nothing routes to them; a real node (devkit/kube/node.py)
# reaches them through its kube-proxy, from the pods' bridge only.
SERVICE_CIDR = "10.96.0.0/16"
# The order of start; `down` goes the other way.
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]


def write_kubeconfig(path: Path, user: str) -> None:
    """A kubeconfig of this control plane for `user`'s certificate (issued in PKI)."""
    pki.write_kubeconfig(path, PKI, f"https://{HOST}:{PORTS['apiserver']}", user)


def issue(name: str, subj: str) -> None:
    """A client certificate of this control plane's CA for `name` (PKI/<name>.crt and .key)."""
    pki.issue(PKI, name, subj)


# ---- the API, with the admin certificate -------------------------------------------------------


def api(
    method: str,
    path: str,
    body: dict | None = None,
    *,
    ok404: bool = False,
    content_type: str = "application/json",
) -> Any:
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    ctx.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    req = urllib.request.Request(
        f"https://{HOST}:{PORTS['apiserver']}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": content_type, "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            data = resp.read()
    except urllib.error.HTTPError as e:
        if ok404 and e.code == 404:
            return None
        raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode()[:500]}") from None
    return json.loads(data) if data else None


def wait_for(what: str, probe, timeout: float, log: str | None = None) -> float:
    """Seconds until `probe()` is true. A component still starting refuses or drops connections
    (OSError, HTTPException) or answers an HTTP error (`api`'s RuntimeError): all mean "not
    yet", and the last one is named if `timeout` runs out, with the end of its `log`. Anything
    else is a bug and raised."""
    start = time.monotonic()
    last_error = "none (the probe said no)"
    while True:
        try:
            if probe():
                return time.monotonic() - start
        except (OSError, RuntimeError, http.client.HTTPException) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() - start > timeout:
            tail = ""
            if log:
                lines = (LOGS / log).read_text(errors="replace").splitlines()[-20:]
                tail = "\n".join(lines)
            raise SystemExit(
                f"{what}: not ready after {timeout:.0f} s; last error: {last_error}\n{tail}"
            )
        time.sleep(0.2)


def healthz(port: int, path: str = "/healthz", cert: str = "admin") -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the components' own self-signed serving certs
    ctx.load_cert_chain(str(PKI / f"{cert}.crt"), str(PKI / f"{cert}.key"))
    with urllib.request.urlopen(f"https://{HOST}:{port}{path}", context=ctx, timeout=2) as r:
        return r.status == 200


# ---- processes ---------------------------------------------------------------------------------


def start(name: str, args: list[str]) -> None:
    binary = BIN / name
    if not binary.exists():
        raise SystemExit(f"{binary} missing: run `make tools` first")
    PROCESSES.start(name, [binary, *args])


def kwok_stages() -> Path:
    """kwokctl's default stages, from the kwok module the binary was built from."""
    gomodcache = GO / "mod"
    stage = gomodcache / f"sigs.k8s.io/kwok@{KWOK}" / "kustomize" / "stage"
    files = [
        stage / "node/fast/node-initialize.yaml",
        stage / "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        stage / "pod/fast/pod-ready.yaml",
        stage / "pod/fast/pod-complete.yaml",
        stage / "pod/fast/pod-delete.yaml",
    ]
    out = STATE / "kwok-stages.yaml"
    out.write_text("\n---\n".join(f.read_text() for f in files))
    return out


def register_node(i: int) -> None:
    name = f"kwok-node-{i}"
    zone = "zone-" + "abc"[i % 3]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "topology.kubernetes.io/zone": zone,
            },
        },
        "status": {
            "allocatable": {
                "cpu": "16",
                "memory": "64Gi",
                "pods": "110",
                "ephemeral-storage": "200Gi",
            },
            "capacity": {
                "cpu": "16",
                "memory": "64Gi",
                "pods": "110",
                "ephemeral-storage": "200Gi",
            },
        },
    }
    if api("GET", f"/api/v1/nodes/{name}", ok404=True) is None:
        api("POST", "/api/v1/nodes", node)


def storage_class() -> None:
    """`standard`, the default class, as kind names it: claims are bound at once."""
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kubernetes.io/host-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        # Claims may grow: the API server takes the new size (the hostPath plugin never resizes
        # the directory, so a claim's status keeps its first capacity).
        "allowVolumeExpansion": True,
    }
    if api("GET", "/apis/storage.k8s.io/v1/storageclasses/standard", ok404=True) is None:
        api("POST", "/apis/storage.k8s.io/v1/storageclasses", sc)


def fresh_logs(logs: Path) -> None:
    """Each component's log of the last run kept as `NAME.log.previous`; this run's starts empty."""
    logs.mkdir(parents=True, exist_ok=True)
    for log in logs.glob("*.log"):
        log.replace(log.with_name(f"{log.name}.previous"))


def up(nodes: int) -> None:
    if any(running_pid(c) for c in COMPONENTS):
        raise SystemExit(f"a cluster is running (pid files in {RUN}); `down` first")
    for d in (PKI, ETCD_DATA, RUN):
        shutil.rmtree(d, ignore_errors=True)
    fresh_logs(LOGS)
    for d in (PKI, RUN, ETCD_DATA, STATE / "certs"):
        d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    times: dict[str, float] = {}
    pki.make_pki(PKI)
    write_kubeconfig(KUBECONFIG, "admin")
    for user in ("controller-manager", "scheduler", "kwok"):
        write_kubeconfig(STATE / f"{user}.kubeconfig", user)
    times["certificates"] = time.monotonic() - t0

    etcd_url = f"http://{HOST}:{PORTS['etcd-client']}"
    start(
        "etcd",
        [
            "--name=local",
            f"--data-dir={ETCD_DATA}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://{HOST}:{PORTS['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://{HOST}:{PORTS['etcd-peer']}",
            f"--initial-cluster=local=http://{HOST}:{PORTS['etcd-peer']}",
            f"--listen-metrics-urls=http://{HOST}:{PORTS['etcd-client'] + 2}",
            "--unsafe-no-fsync",  # a throw-away test store
        ],
    )
    times["etcd"] = wait_for(
        "etcd",
        lambda: urllib.request.urlopen(f"{etcd_url}/health", timeout=2).status == 200,
        30,
        "etcd.log",
    )

    start(
        "kube-apiserver",
        [
            f"--etcd-servers={etcd_url}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={PORTS['apiserver']}",
            f"--tls-cert-file={PKI / 'apiserver.crt'}",
            f"--tls-private-key-file={PKI / 'apiserver.key'}",
            f"--client-ca-file={PKI / 'ca.crt'}",
            f"--service-account-key-file={PKI / 'sa.pub'}",
            f"--service-account-signing-key-file={PKI / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            # the `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints refuse
            "--endpoint-reconciler-type=none",
            f"--cert-dir={STATE / 'certs'}",
            "--profiling=false",
            # A real node (devkit/kube/node.py) is reached at its InternalIP: by default the API
            # server resolves the node's hostname through the machine's resolver, a query that
            # leaves the machine.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={PKI / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={PKI / 'apiserver-kubelet-client.key'}",
        ],
    )
    times["kube-apiserver"] = wait_for(
        "kube-apiserver", lambda: healthz(PORTS["apiserver"], "/readyz"), 120, "kube-apiserver.log"
    )

    start(
        "kube-controller-manager",
        [
            f"--kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--bind-address={HOST}",
            f"--secure-port={PORTS['controller-manager']}",
            f"--cert-dir={STATE / 'certs'}",
            f"--service-account-private-key-file={PKI / 'sa.key'}",
            f"--root-ca-file={PKI / 'ca.crt'}",
            f"--cluster-signing-cert-file={PKI / 'ca.crt'}",
            f"--cluster-signing-key-file={PKI / 'ca.key'}",
            "--use-service-account-credentials=true",
            # the in-tree hostPath provisioner (a directory /tmp/hostpath_pv/<uid> per claim,
            # removed on Delete): the `standard` StorageClass below provisions through it
            "--enable-hostpath-provisioner=true",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )
    start(
        "kube-scheduler",
        [
            f"--kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--bind-address={HOST}",
            f"--secure-port={PORTS['scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )
    start(
        "kwok",
        [
            f"--kubeconfig={STATE / 'kwok.kubeconfig'}",
            f"--config={kwok_stages()}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address={HOST}:{PORTS['kwok']}",
            "--node-lease-duration-seconds=40",
        ],
    )
    times["kube-controller-manager"] = wait_for(
        "kube-controller-manager",
        lambda: healthz(PORTS["controller-manager"]),
        60,
        "kube-controller-manager.log",
    )
    times["kube-scheduler"] = wait_for(
        "kube-scheduler", lambda: healthz(PORTS["scheduler"]), 60, "kube-scheduler.log"
    )

    for i in range(nodes):
        register_node(i)
    storage_class()

    def nodes_ready() -> bool:
        items = api("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
        return len(items) == nodes and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
            for n in items
        )

    times["kwok nodes Ready"] = wait_for("kwok nodes", nodes_ready, 60, "kwok.log")

    def default_sa() -> bool:
        return (
            api("GET", "/api/v1/namespaces/default/serviceaccounts/default", ok404=True) is not None
        )

    times["default ServiceAccount"] = wait_for(
        "default ServiceAccount", default_sa, 60, "kube-controller-manager.log"
    )
    times["total"] = time.monotonic() - t0
    (STATE / "start-times.json").write_text(json.dumps(times, indent=2))
    for k, v in times.items():
        print(f"  {k:24} {v:6.1f} s", file=sys.stderr)
    print(f"cluster up: {nodes} kwok nodes; logs in {LOGS}", file=sys.stderr)
    print(f"export KUBECONFIG={KUBECONFIG}", file=sys.stderr)
    print(KUBECONFIG)


def provisioned_dirs() -> list[Path]:
    """The directories the hostPath provisioner made for this cluster's volumes."""
    if running_pid("kube-apiserver") is None:
        return []
    try:
        pvs = api("GET", "/api/v1/persistentvolumes")["items"]
    except Exception:  # the API is gone already: nothing to ask
        return []
    paths = (pv["spec"].get("hostPath", {}).get("path", "") for pv in pvs)
    return [Path(p) for p in paths if p.startswith("/tmp/hostpath_pv/")]


def down() -> None:
    dirs = provisioned_dirs()
    stopped = [s for s in (PROCESSES.stop(name) for name in reversed(COMPONENTS)) if s]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    print("stopped: " + (", ".join(stopped) or "nothing was running"))


def status() -> int:
    rc = 0
    for name in COMPONENTS:
        pid = running_pid(name)
        print(f"{name:24} {'pid ' + str(pid) if pid else 'not running'}")
        rc |= pid is None
    print(f"KUBECONFIG={KUBECONFIG}")
    return rc


# ---- the check: a restricted namespace, a StatefulSet whose pods become Ready ------------------


def check() -> None:
    ns = "cluster-check"
    t0 = time.monotonic()
    if api("GET", f"/api/v1/namespaces/{ns}", ok404=True) is not None:
        api("DELETE", f"/api/v1/namespaces/{ns}")
        wait_for(
            "old namespace gone",
            lambda: api("GET", f"/api/v1/namespaces/{ns}", ok404=True) is None,
            60,
        )
    api(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        },
    )
    wait_for(
        "default ServiceAccount",
        lambda: (
            api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default", ok404=True) is not None
        ),
        30,
    )

    def sts(restricted: bool) -> dict:
        container = {
            "name": "app",
            "image": "registry.invalid/app:1",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": 8080}},
        }
        if restricted:
            container["securityContext"] = {
                "allowPrivilegeEscalation": False,
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            }
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web" if restricted else "web-privileged"},
            "spec": {
                "serviceName": "web",
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [container]},
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        }

    # Pod Security admission: a pod without the restricted securityContext is refused
    api("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", sts(False))
    refused = wait_for(
        "a FailedCreate event for the non-restricted pod",
        lambda: any(
            "violates PodSecurity" in e.get("message", "")
            for e in api("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        ),
        30,
    )
    api("DELETE", f"/apis/apps/v1/namespaces/{ns}/statefulsets/web-privileged")
    print(f"PodSecurity restricted refused a pod without securityContext ({refused:.1f} s)")

    api("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", sts(True))

    def ready() -> bool:
        s = api("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/web")
        return s.get("status", {}).get("readyReplicas") == 3

    secs = wait_for("StatefulSet web 3/3 Ready", ready, 120, "kwok.log")
    pods = api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dweb")["items"]
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        conds = {c["type"]: c for c in p["status"].get("conditions", [])}
        print(
            f"{p['metadata']['name']:8} node={p['spec'].get('nodeName')} "
            f"phase={p['status'].get('phase')} podIP={p['status'].get('podIP')} "
            f"Ready={conds.get('Ready', {}).get('status')} "
            f"at={conds.get('Ready', {}).get('lastTransitionTime')}"
        )
    claims = api("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims")["items"]
    for c in sorted(claims, key=lambda c: c["metadata"]["name"]):
        print(
            f"{c['metadata']['name']:12} {c['status'].get('phase')} "
            f"class={c['spec'].get('storageClassName')} volume={c['spec'].get('volumeName')}"
        )
    print(
        f"StatefulSet web: 3/3 Ready {secs:.1f} s after create "
        f"({time.monotonic() - t0:.1f} s for the whole check)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the control plane and kwok nodes")
    p_up.add_argument("--nodes", type=int, default=int(os.environ.get("CLUSTER_NODES", "3")))
    sub.add_parser("down", help="stop every component by its pid file")
    sub.add_parser("status", help="which components run")
    sub.add_parser("check", help="restricted namespace + StatefulSet Ready on kwok")
    args = ap.parse_args()
    if args.cmd == "up":
        try:
            up(args.nodes)
        except BaseException:
            down()
            raise
        return 0
    if args.cmd == "down":
        down()
        return 0
    if args.cmd == "status":
        return status()
    check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
