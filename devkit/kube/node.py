#!/usr/bin/env python3
"""A real Kubernetes node beside the local control plane: pods run in containers.

containerd and runc (Debian's), the CNI bridge plugin (Debian's containernetworking-plugins), and
the kubelet, kube-proxy, CoreDNS and kind's local-path provisioner as built by
devkit/kube/go_tools.py, each a process of its own, stopped by its pid file. The images come from
devkit/kube/images.py.

    python3 devkit/kube/node.py up      # the control plane (control_plane.py) and the node
    python3 devkit/kube/node.py run -- CMD...   # CMD with the cluster's DNS (a pod's names resolve)
    python3 devkit/kube/node.py down    # the node, then the control plane; the machine as it was

This machine is shared, so the node changes nothing that outlives it (../shared/real-node.md has
why each setting is what it is):

- **Network.** Pods sit on a bridge of its own (BRIDGE, 10.244.0.1/24) with no default route and
  no masquerade; forwarding is on for that bridge alone, and FORWARD rules in a chain of its own
  drop whatever would cross from the bridge to another interface. CoreDNS answers the cluster's
  zones on the bridge address and NXDOMAIN for every other name: no query leaves the machine.
- **Kernel settings.** The kubelet writes vm.overcommit_memory, kernel.panic and
  kernel.panic_on_oops (and three more) for the whole machine; it runs in a mount namespace of
  its own where those files are plain files. Its root directory is a shared mount, so the
  volumes it mounts reach containerd.
- **cgroups (v1).** Pods live under CGROUP_ROOT in each hierarchy; `down` removes it. Nothing is
  remounted.
- **OOM scores.** The VM lacks CAP_SYS_RESOURCE: containerd keeps pods' scores at or above its
  own (`restrict_oom_score_adj`), the kubelet at 0.
- **iptables.** The kubelet adds no chains (`makeIPTablesUtilChains: false`); kube-proxy's rules
  are removed by `kube-proxy --cleanup` at `down`, the node's own chain with it, and on the
  nf_tables backend each table the node brought into being goes too (`nft`, once empty).
- **Images.** Never pulled: containerd's only registry host is a closed local port.

Everything lives under .venv/node/ (NODE_DIR moves it), but for what containerd, CNI and the
kubelet keep at fixed paths: /run/containerd/s (shim sockets), /var/lib/cni/results,
/var/run/netns (each removed with its pod) and /var/log/containers (links, removed at `down`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: `python3 devkit/kube/node.py up`
from devkit.kube import control_plane, images  # noqa: E402
from devkit.kube.go_tools import BIN  # noqa: E402
from devkit.kube.node_network import (  # noqa: E402
    NODE_IP,
    POD_CIDR,
    foreign_kube_chains,
    network_down,
    network_up,
    put_closing_chain_first,
    record_tables,
)
from devkit.kube.processes import Processes, sh  # noqa: E402

STATE = images.STATE
RUN, LOGS = STATE / "run", STATE / "logs"
NAME = "local-node"
CGROUP_ROOT = "/stateful-streaming-node"
CONTAINERD_SOCKET = STATE / "containerd" / "containerd.sock"
PROCESSES = Processes(RUN, LOGS, STATE)
running_pid, start, stop = PROCESSES.running_pid, PROCESSES.start, PROCESSES.stop
CNI_BIN = Path("/usr/lib/cni")
# What the node needs of the machine, and where each comes from.
DEBIAN = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "nft": "nftables",
    "unshare": "util-linux",
    "ip": "iproute2",
}
GO_BUILT = ["kubelet", "kube-proxy", "coredns", "local-path-provisioner"]
PORTS = {
    "kubelet": 10250,  # on NODE_IP: the API server's logs and exec
    "kubelet-healthz": control_plane.BASE + 48,
    "kube-proxy-healthz": control_plane.BASE + 49,
    "kube-proxy-metrics": control_plane.BASE + 50,
    "coredns-health": control_plane.BASE + 51,
    "coredns-ready": control_plane.BASE + 52,
}
# The kernel settings the kubelet insists on, with the values it writes (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go); it writes only those that differ.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
# The order of start; `down` goes the other way.
COMPONENTS = ["containerd", "kubelet", "kube-proxy", "coredns", "local-path-provisioner"]


# ---- what the machine must have ----------------------------------------------------------------


def missing() -> list[str]:
    """Everything the node needs that is not here, each with what to do."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root: containers, a bridge and mounts need it")
    packages = sorted({DEBIAN[b] for b in DEBIAN if shutil.which(b) is None})
    if packages:
        problems.append(f"apt-get install --no-install-recommends {' '.join(packages)}")
    plugins = [p for p in ("bridge", "host-local", "loopback") if not (CNI_BIN / p).exists()]
    if plugins:
        problems.append(
            f"CNI plugins {', '.join(plugins)} in {CNI_BIN}: "
            "apt-get install --no-install-recommends containernetworking-plugins"
        )
    built = [b for b in GO_BUILT if not (BIN / b).exists()]
    if built:
        problems.append(f"{', '.join(built)}: python3 devkit/kube/go_tools.py {' '.join(built)}")
    archives = [
        n
        for n in (images.PAUSE_IMAGE, images.BASE_IMAGE, images.PROCESSOR_IMAGE)
        if not images.archive(n).exists()
    ]
    if archives:
        problems.append(f"images {', '.join(archives)}: python3 devkit/kube/images.py")
    if not Path("/sys/fs/cgroup/cpu").is_dir():
        problems.append("cgroup v1 hierarchies under /sys/fs/cgroup (this node is made for them)")
    return problems


# ---- processes ---------------------------------------------------------------------------------


def http_ok(port: int, path: str) -> bool:
    """Whether a component's health endpoint on 127.0.0.1 answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_for(what: str, probe, timeout: float, log: str) -> float:
    return control_plane.wait_for(what, probe, timeout, str(LOGS / log))


# ---- cgroups ------------------------------------------------------------------------------------


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies: every v1 one, and the v2 one a hybrid machine also has
    (/sys/fs/cgroup/unified, where the kubelet makes CGROUP_ROOT too)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return found


def cgroups_up() -> None:
    for hierarchy in cgroup_hierarchies():
        own = hierarchy / CGROUP_ROOT.lstrip("/")
        own.mkdir(exist_ok=True)
        for key in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / key).exists():
                (own / key).write_text((hierarchy / key).read_text())


def cgroups_down() -> None:
    for hierarchy in cgroup_hierarchies():
        own = hierarchy / CGROUP_ROOT.lstrip("/")
        if own.exists():
            # the deepest first; a cgroup directory goes with rmdir only
            for directory in sorted(own.rglob("*"), key=lambda p: -len(p.parts)):
                if directory.is_dir():
                    directory.rmdir()
            own.rmdir()


# ---- containerd ---------------------------------------------------------------------------------


def containerd_up() -> None:
    base = STATE / "containerd"
    hosts = base / "hosts" / "_default"
    hosts.mkdir(parents=True, exist_ok=True)
    # Every registry is this closed port (containerd 1.7 and later): an image the node does not
    # hold fails at once.
    (hosts / "hosts.toml").write_text('server = "http://127.0.0.1:9"\n')
    config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{CONTAINERD_SOCKET}"
[ttrpc]
  address = "{CONTAINERD_SOCKET}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  # the VM lacks CAP_SYS_RESOURCE: no process may lower its oom_score_adj
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{STATE / "cni" / "net.d"}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{base / "hosts"}"
"""
    (base / "config.toml").write_text(config)
    # Its own mount namespace, whose /etc/resolv.conf names the cluster's DNS only: a pull of an
    # image the node lacks resolves the registry there, and fails at once without a query
    # leaving the machine (containerd 1.6 skips the `_default` host above). `/` a slave there:
    # the kubelet's volume mounts reach it, its own mounts (rootfs, netns) stay in it.
    share_kubelet_root()
    containerd = shutil.which("containerd") or "containerd"
    start(
        "containerd",
        with_cluster_resolver(
            [containerd, "--config", base / "config.toml"], before=["mount --make-rslave /"]
        ),
    )
    wait_for(
        "containerd",
        lambda: ctr("version", check=False).returncode == 0,
        60,
        "containerd.log",
    )
    for name in (images.PAUSE_IMAGE, images.BASE_IMAGE, images.PROCESSOR_IMAGE, *broker_archives()):
        ctr("images", "import", images.archive(name))


def broker_archives() -> list[str]:
    """The broker images built (one per Kafka release)."""
    return [
        f"docker.io/stateful-streaming/kafka:{p.stem.removeprefix('kafka-')}"
        for p in sorted(images.IMAGES.glob("kafka-*.tar"))
    ]


def ctr(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ctr", "--address", CONTAINERD_SOCKET, "--namespace", "k8s.io", *args, check=check)


# ---- the kubelet ------------------------------------------------------------------------------


def bind_cluster_role(name: str, role: str, kind: str, subject: str) -> None:
    """A ClusterRoleBinding of `role` to one User or Group."""
    rbac = "rbac.authorization.k8s.io"
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": rbac, "kind": kind, "name": subject}],
    }
    control_plane.api("POST", f"/apis/{rbac}/v1/clusterrolebindings", binding)


def kubelet_root() -> Path:
    return STATE / "kubelet"


def share_kubelet_root() -> None:
    """The kubelet's root directory a shared mount: what it mounts there for a pod, in its own
    namespace, reaches containerd's."""
    root = kubelet_root()
    root.mkdir(parents=True, exist_ok=True)
    if sh("mountpoint", "-q", root, check=False).returncode != 0:
        sh("mount", "--bind", root, root)
    sh("mount", "--make-shared", root)


def kubelet_up() -> None:
    pki = control_plane.PKI
    control_plane.issue(
        "kubelet",
        f"/O=system:nodes/CN=system:node:{NAME}",
    )
    control_plane.write_kubeconfig(STATE / "kubelet.kubeconfig", "kubelet")
    # The control plane runs RBAC only (no Node authorizer): the node's group gets system:node.
    bind_cluster_role("stateful-streaming:nodes", "system:node", "Group", "system:nodes")
    root = kubelet_root()
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": PORTS["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": PORTS["kubelet-healthz"],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},  # any holder of a certificate of the CA
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        # cgroup v1: kubelet 1.35+ refuses it unless told; containerd 1.x gives no driver
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "oomScoreAdj": 0,
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": False,  # it writes KUBELET_SYSCTLS, into its own namespace
        "clusterDNS": [NODE_IP],
        "clusterDomain": "cluster.local",
        "resolvConf": "",  # pods get the cluster's DNS only, nothing of the machine's
        "podLogsDir": str(STATE / "pod-logs"),
        "volumePluginDir": str(STATE / "volume-plugins"),
        "failSwapOn": False,
        # A shared disk: evict only when it is really full, and never collect the node's images
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
    }
    (STATE / "kubelet.json").write_text(json.dumps(config, indent=2))
    # The three kernel settings, as plain files the kubelet may write in its own namespace
    sysctls = STATE / "sysctl"
    covers = []
    for key, value in KUBELET_SYSCTLS.items():
        plain = sysctls / key.replace("/", ".")
        plain.parent.mkdir(parents=True, exist_ok=True)
        plain.write_text(value + "\n")
        covers.append(f"mount --bind {plain} /proc/sys/{key}")
    kubelet = [
        BIN / "kubelet",
        f"--config={STATE / 'kubelet.json'}",
        f"--kubeconfig={STATE / 'kubelet.kubeconfig'}",
        f"--root-dir={root}",
        f"--cert-dir={STATE / 'kubelet-pki'}",
        f"--hostname-override={NAME}",
        f"--node-ip={NODE_IP}",
        "--node-labels=topology.kubernetes.io/zone=zone-a",
        "--v=1",
    ]
    # /proc is made private in the new namespace, so the covers stay in it; the root directory
    # stays a peer of the machine's.
    script = " && ".join(
        ["mount --make-rprivate /proc", *covers, "exec " + " ".join(map(str, kubelet))]
    )
    start("kubelet", ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script])


def node_ready() -> bool:
    node = control_plane.api("GET", f"/api/v1/nodes/{NAME}", ok404=True)
    if node is None:
        return False
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])
    )


# ---- kube-proxy, CoreDNS, the provisioner ------------------------------------------------------


def kube_proxy_up() -> None:
    control_plane.issue("kube-proxy", "/CN=system:kube-proxy")
    control_plane.write_kubeconfig(STATE / "kube-proxy.kubeconfig", "kube-proxy")
    bind_cluster_role(
        "stateful-streaming:kube-proxy", "system:node-proxier", "User", "system:kube-proxy"
    )
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(STATE / "kube-proxy.kubeconfig")},
        "hostnameOverride": NAME,
        "bindAddress": NODE_IP,
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{PORTS['kube-proxy-healthz']}",
        "metricsBindAddress": f"127.0.0.1:{PORTS['kube-proxy-metrics']}",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        # zeros: leave the machine's conntrack sysctls alone
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # true would set net.ipv4.conf.all.route_localnet for the whole machine
        "iptables": {"localhostNodePorts": False},
    }
    (STATE / "kube-proxy.json").write_text(json.dumps(config, indent=2))
    start("kube-proxy", [BIN / "kube-proxy", f"--config={STATE / 'kube-proxy.json'}"])


def coredns_up() -> None:
    corefile = f"""cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{PORTS["coredns-health"]}
    ready 127.0.0.1:{PORTS["coredns-ready"]}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {control_plane.KUBECONFIG} local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
# No forwarder: every other name is NXDOMAIN here, and no query leaves the machine.
.:53 {{
    bind {NODE_IP}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""
    (STATE / "Corefile").write_text(corefile)
    start("coredns", [BIN / "coredns", "-conf", STATE / "Corefile"])


# kind's provisioner, configured as its own deploy/local-path-storage.yaml configures it, with
# the node's image as the helper (busybox is not to be had here) and the claims under STATE.
PROVISIONER_NAMESPACE = "local-path-storage"
PROVISIONER_ACCOUNT = "local-path-provisioner-service-account"


def provisioner_up() -> None:
    ns = PROVISIONER_NAMESPACE
    paths = STATE / "claims"
    paths.mkdir(exist_ok=True)
    control_plane.api(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
    )
    control_plane.api(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": PROVISIONER_ACCOUNT}},
    )
    helper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/disk-pressure",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            "containers": [
                {
                    "name": "helper-pod",
                    "image": images.BASE_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
        },
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "local-path-config"},
        "data": {
            "config.json": json.dumps(
                {
                    "nodePathMap": [
                        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(paths)]}
                    ]
                }
            ),
            "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
            "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
            "helperPod.yaml": json.dumps(helper),
        },
    }
    control_plane.api("POST", f"/api/v1/namespaces/{ns}/configmaps", config_map)
    # `standard`, the default class as kind names it, through this provisioner
    control_plane.api("DELETE", "/apis/storage.k8s.io/v1/storageclasses/standard", ok404=True)
    control_plane.api(
        "POST",
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": "standard",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "rancher.io/local-path",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            # A local-path volume is a directory with no quota: a claim may grow, and the size
            # it asks is all that changes (a `pulumi up` of a disk resize runs as on a cloud's).
            "allowVolumeExpansion": True,
        },
    )
    start(
        "local-path-provisioner",
        [
            BIN / "local-path-provisioner",
            "--debug",
            "start",
            f"--kubeconfig={control_plane.KUBECONFIG}",
            f"--namespace={ns}",
            "--provisioner-name=rancher.io/local-path",
            f"--helper-image={images.BASE_IMAGE}",
            f"--service-account-name={PROVISIONER_ACCOUNT}",
            "--configmap-name=local-path-config",
        ],
    )


# ---- up, down, run -----------------------------------------------------------------------------


def refuse_to_start() -> None:
    """Stop at once, touching nothing, where the node cannot start or would harm the machine."""
    problems = missing()
    if problems:
        raise SystemExit("the node cannot start; missing:\n  " + "\n  ".join(problems))
    if any(running_pid(c) for c in COMPONENTS):
        raise SystemExit(f"a node is running (pid files in {RUN}); `down` first")
    foreign = foreign_kube_chains()
    if foreign:
        # `down` removes every KUBE- chain: it would take another node's with it
        raise SystemExit(
            "another Kubernetes node's iptables chains are on this machine, and `down` would "
            "remove them with this node's: " + "; ".join(foreign) + ". Stop that node first (or "
            "`python3 devkit/kube/node.py down` if it was this one)"
        )


def up() -> None:
    RUN.mkdir(parents=True, exist_ok=True)
    record_tables()
    control_plane.fresh_logs(LOGS)
    t0 = time.monotonic()
    times: dict[str, float] = {}
    control_plane.up(nodes=0)
    times["control plane"] = time.monotonic() - t0
    network_up()
    cgroups_up()
    t = time.monotonic()
    containerd_up()
    times["containerd, images imported"] = time.monotonic() - t
    kubelet_up()
    times["node Ready"] = wait_for("the node Ready", node_ready, 120, "kubelet.log")
    kube_proxy_up()
    times["kube-proxy synced"] = wait_for(
        "kube-proxy", lambda: http_ok(PORTS["kube-proxy-healthz"], "/healthz"), 60, "kube-proxy.log"
    )
    put_closing_chain_first()
    coredns_up()
    provisioner_up()
    times["CoreDNS ready"] = wait_for(
        "CoreDNS", lambda: http_ok(PORTS["coredns-ready"], "/ready"), 60, "coredns.log"
    )
    times["total"] = time.monotonic() - t0
    for k, v in times.items():
        print(f"  {k:28} {v:6.1f} s", file=sys.stderr)
    print(f"node {NAME} Ready on {NODE_IP}; logs in {LOGS}", file=sys.stderr)
    print(control_plane.KUBECONFIG)


def delete_pods() -> None:
    """Every pod off the node, through the API, so the kubelet tears down their mounts and
    network (a pod's netns and CNI results go with it)."""
    if control_plane.running_pid("kube-apiserver") is None or running_pid("kubelet") is None:
        return
    for ns in control_plane.api("GET", "/api/v1/namespaces")["items"]:
        name = ns["metadata"]["name"]
        if name == "default" or name.startswith("kube-"):
            continue  # neither can go; nothing runs in them
        control_plane.api("DELETE", f"/api/v1/namespaces/{name}", ok404=True)

    def no_pods() -> bool:
        return not control_plane.api("GET", "/api/v1/pods")["items"]

    try:
        wait_for("every pod gone", no_pods, 120, "kubelet.log")
    except SystemExit as exc:
        print(f"warning: {exc}", file=sys.stderr)


def unmount_state() -> None:
    """What is still mounted under STATE (a pod the kubelet did not tear down), deepest first."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4]
        if target == str(STATE) or target.startswith(f"{STATE}/"):
            mounts.append(target)
    for target in sorted(set(mounts), key=lambda p: -len(p)):
        sh("umount", "--lazy", target, check=False)


def down() -> None:
    delete_pods()
    stopped = [s for s in (stop(c) for c in reversed(COMPONENTS[1:])) if s]
    # containers left behind (a pod the kubelet could not delete): their shims, then containerd
    if running_pid("containerd") is not None:
        for task in ctr("tasks", "ls", "-q", check=False).stdout.split():
            ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
    stopped += [s for s in [stop("containerd")] if s]
    shims = sh("pgrep", "-f", f"containerd-shim.*{CONTAINERD_SOCKET}", check=False)
    for pid in shims.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    if (BIN / "kube-proxy").exists():
        sh(BIN / "kube-proxy", "--cleanup", check=False)
    network_down()
    unmount_state()
    cgroups_down_safely()
    shutil.rmtree(STATE / "claims", ignore_errors=True)  # the claims' data goes with the node
    for link in Path("/var/log/containers").glob("*.log"):
        if os.readlink(link).startswith(f"{STATE}/"):
            link.unlink()
    control_plane.down()
    print("node stopped: " + (", ".join(stopped) or "nothing was running"))


def cgroups_down_safely() -> None:
    try:
        cgroups_down()
    except OSError as exc:
        print(f"warning: cgroups under {CGROUP_ROOT} not all removed: {exc}", file=sys.stderr)


def with_cluster_resolver(
    argv: Sequence[str | Path], before: Sequence[str] = ()
) -> list[str | Path]:
    """`argv` in a mount namespace of its own whose /etc/resolv.conf names the cluster's DNS
    (CoreDNS on the bridge, no forwarder): it resolves pods' and Services' names, and no query
    leaves the machine. `before`: shell commands to run in the namespace first."""
    resolv = STATE / "resolv.conf"
    resolv.write_text(
        f"nameserver {NODE_IP}\nsearch svc.cluster.local cluster.local\noptions ndots:5\n"
    )
    # private first, where `before` says nothing: the cover stays in the namespace
    script = " && ".join(
        [*(before or ["mount --make-rprivate /"]), f"mount --bind {resolv} /etc/resolv.conf"]
    )
    return [
        "unshare",
        "--mount",
        "--propagation",
        "unchanged",
        "sh",
        "-c",
        f'{script} && exec "$@"',
        "sh",
        *argv,
    ]


def run_with_cluster_dns(argv: Sequence[str]) -> int:
    """`argv` with the cluster's DNS (`with_cluster_resolver`): a client on the machine reaches
    the pods by their names, as a pod would."""
    return subprocess.run([str(a) for a in with_cluster_resolver(argv)]).returncode


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="the control plane and the node")
    sub.add_parser("down", help="stop everything, leave the machine as it was")
    sub.add_parser("missing", help="what the node needs that is not here")
    p_run = sub.add_parser("run", help="a command with the cluster's DNS")
    p_run.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.cmd == "up":
        refuse_to_start()
        try:
            up()
        except BaseException:
            down()
            raise
        return 0
    if args.cmd == "down":
        down()
        return 0
    if args.cmd == "missing":
        problems = missing()
        print("\n".join(problems) or "nothing")
        return 1 if problems else 0
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    return run_with_cluster_dns(argv)


if __name__ == "__main__":
    sys.exit(main())
