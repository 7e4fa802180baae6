"""Pods as local processes: what a Kubernetes node provides, and nothing the manifests say.

A `Node` runs pod specs the way the kubelet and a container runtime do, with Linux namespaces:

- **Network**: each pod gets a network namespace of its own with one address on a bridge
  (10.244.77.0/24), so `localhost` is the pod, a listener on all interfaces is the pod's, and
  three brokers keep the same ports. Cluster DNS becomes each pod's /etc/hosts (`ip netns exec`
  binds it), with the kubelet's lines for the pod itself; a Service's name lists its pods.
- **Filesystem**: each container gets a mount namespace; the image's folders and the pod's
  volumes (emptyDir, configMap, the StatefulSet's claims) are folders bound at their paths, the
  root is read-only when `readOnlyRootFilesystem` says so. Mount points missing on this machine
  are created empty and removed at the end.
- **Process**: the security context's user and groups, the image's environment and working
  directory, the kubelet's service links and downward API values, `$(VAR)` expansion in env and
  args, `terminationGracePeriodSeconds` on stop.
- **Probes**: startup, readiness and liveness executed with their timing and thresholds from the
  node (the kubelet's side of the pod network), and their outcomes kept.

Needs root (namespaces, a bridge, bind mounts) and `ip`, `unshare` and `mount` on PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.clients.waiting import wait_until

ENTRY = Path(__file__).with_name("container_entry.py")
SUBNET = "10.244.77"
BRIDGE = "ssbr0"
GATEWAY = f"{SUBNET}.1"
FIRST_POD_HOST = 10
SERVICE_SUBNET = "10.96.77"
LOOPBACK_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
# A pod's env after the image's: the kubelet's service links for the API server are always there.
KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT = f"{SERVICE_SUBNET}.1", 443


def missing_requirements() -> str | None:
    """Why pods cannot run here, or None."""
    if os.geteuid() != 0:
        return "running pods needs root (network and mount namespaces, a bridge, bind mounts)"
    tools = [tool for tool in ("ip", "unshare", "mount") if shutil.which(tool) is None]
    if tools:
        return f"running pods needs {', '.join(tools)} on PATH"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class Image:
    """What an image holds, here: folders bound read-only at its paths, its config's
    environment, working directory, user and entrypoint."""

    name: str
    folders: Mapping[str, Path]
    env: Mapping[str, str]
    workdir: str = "/"
    uid: int = 0
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodSpec:
    """One pod as a controller creates it: name, labels, the template's spec."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    # StatefulSet pods: the headless Service that names them, and their claims by volume name.
    subdomain: str | None = None
    claims: Mapping[str, Path] = field(default_factory=dict)

    @property
    def fqdn(self) -> str | None:
        """The pod's DNS name under its headless Service, if it has one."""
        if self.subdomain is None:
            return None
        return f"{self.name}.{self.subdomain}.{self.namespace}.svc.cluster.local"


# -- The kubelet's rules for a container's environment and command ------------------------

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names replaced, `$$` escapes, unknown left as is."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(replace, text)


def field_value(pod: PodSpec, ip: str, path: str) -> str:
    """A downward API `fieldRef` value, as the kubelet fills it in."""
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "status.podIP": ip,
        "spec.nodeName": socket.gethostname(),
        "spec.serviceAccountName": str(pod.spec.get("serviceAccountName", "default")),
    }
    if path in simple:
        return simple[path]
    label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
    if label:
        return pod.labels.get(label.group(1), "")
    raise ValueError(f"pod {pod.name}: fieldRef {path!r} is not one the harness fills in")


def service_links(services: Sequence[Mapping[str, Any]], namespace: str) -> dict[str, str]:
    """The `<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT...` variables the kubelet adds for every
    Service with a cluster IP in the pod's namespace (`enableServiceLinks`, on by default)."""
    env: dict[str, str] = {}
    for number, service in enumerate(services, start=2):
        spec, meta = service["spec"], service["metadata"]
        if meta.get("namespace") != namespace or spec.get("clusterIP") == "None":
            continue
        prefix = meta["name"].upper().replace("-", "_")
        host = f"{SERVICE_SUBNET}.{number}"
        ports = spec.get("ports", [])
        env[f"{prefix}_SERVICE_HOST"] = host
        for index, port in enumerate(ports):
            protocol = port.get("protocol", "TCP")
            url = f"{protocol.lower()}://{host}:{port['port']}"
            if index == 0:
                env[f"{prefix}_SERVICE_PORT"] = str(port["port"])
                env[f"{prefix}_PORT"] = url
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(
                    port["port"]
                )
            base = f"{prefix}_PORT_{port['port']}_{protocol}"
            env.update(
                {
                    base: url,
                    f"{base}_PROTO": protocol.lower(),
                    f"{base}_PORT": str(port["port"]),
                    f"{base}_ADDR": host,
                }
            )
    return env


def container_env(
    pod: PodSpec,
    ip: str,
    image: Image,
    container: Mapping[str, Any],
    services: Sequence[Mapping[str, Any]],
    config_maps: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """The process environment: image, HOSTNAME, service links, then the container's `env`."""
    links = {
        "KUBERNETES_SERVICE_HOST": KUBERNETES_SERVICE_HOST,
        "KUBERNETES_SERVICE_PORT": str(KUBERNETES_SERVICE_PORT),
        "KUBERNETES_PORT": f"tcp://{KUBERNETES_SERVICE_HOST}:{KUBERNETES_SERVICE_PORT}",
    }
    if pod.spec.get("enableServiceLinks", True):
        links.update(service_links(services, pod.namespace))
    declared: dict[str, str] = dict(links)
    for var in container.get("env", []):
        if "value" in var:
            declared[var["name"]] = expand(var["value"], declared)
        elif "fieldRef" in var.get("valueFrom", {}):
            declared[var["name"]] = field_value(pod, ip, var["valueFrom"]["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["configMapKeyRef"]
            declared[var["name"]] = config_maps[ref["name"]][ref["key"]]
        else:
            raise ValueError(f"pod {pod.name}: env {var['name']} has a source the harness lacks")
    return {**image.env, "HOSTNAME": pod.name, **declared}


def container_argv(image: Image, container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """`command` replaces the entrypoint, `args` the cmd, both `$(VAR)`-expanded."""
    command = container.get("command", list(image.entrypoint))
    args = container.get("args", list(image.cmd) if "command" not in container else [])
    argv = [expand(part, env) for part in [*command, *args]]
    if argv and argv[0] == "/usr/bin/tini" and not Path(argv[0]).exists():
        # The image's init (signal forwarding, reaping); this machine lacks it, the process runs
        # as the container's first process without it.
        argv = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    return argv


# -- Probes ------------------------------------------------------------------------------------


@dataclass
class ProbeRecord:
    """What a probe answered over the container's life."""

    kind: str  # startup | readiness | liveness
    spec: Mapping[str, Any]
    successes: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    first_success_s: float | None = None  # after the container started
    last_error: str | None = None

    @property
    def budget_s(self) -> float:
        """How long the kubelet lets it fail before acting: delay + period x threshold."""
        return self.spec.get("initialDelaySeconds", 0) + self.spec.get(
            "periodSeconds", 10
        ) * self.spec.get("failureThreshold", 3)

    def describe(self) -> str:
        """The probe's action, as `kubectl describe` shows it."""
        if "httpGet" in self.spec:
            return (
                f"http-get :{self.spec['httpGet']['port']}{self.spec['httpGet'].get('path', '/')}"
            )
        if "tcpSocket" in self.spec:
            return f"tcp-socket :{self.spec['tcpSocket']['port']}"
        return f"exec {self.spec['exec']['command']}"


def _port(value: int | str, container: Mapping[str, Any]) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports", []):
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"container {container['name']}: no port named {value!r}")


def probe_once(spec: Mapping[str, Any], ip: str, container: Mapping[str, Any]) -> str | None:
    """One probe attempt from the node: None on success, else why it failed."""
    timeout = float(spec.get("timeoutSeconds", 1))
    try:
        if "httpGet" in spec:
            action = spec["httpGet"]
            url = f"http://{ip}:{_port(action['port'], container)}{action.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return None if 200 <= response.status < 400 else f"HTTP {response.status}"
        if "tcpSocket" in spec:
            port = _port(spec["tcpSocket"]["port"], container)
            with socket.create_connection((ip, port), timeout=timeout):
                return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return str(exc)
    raise ValueError(f"container {container['name']}: a probe kind the harness lacks: {spec}")


def _container_command(pod_name: str, spec_path: Path) -> list[str]:
    """A container process: the pod's network namespace, a mount and UTS namespace of its own,
    then `container_entry.py` with its spec."""
    netns = f"ss-{pod_name}"
    return ["ip", "netns", "exec", netns, "unshare", "--uts", "--", sys.executable, str(ENTRY),
            str(spec_path)]  # fmt: skip


# -- Containers and pods -----------------------------------------------------------------------


class Container:
    """A started container: its process, log and probes (run on a thread, as the kubelet does)."""

    def __init__(
        self,
        pod: RunningPod,
        spec: Mapping[str, Any],
        process: subprocess.Popen[bytes],
        log_path: Path,
    ) -> None:
        self.pod = pod
        self.spec = spec
        self.name: str = spec["name"]
        self.process = process
        self.log_path = log_path
        self.started_at = time.monotonic()
        self.probes = {
            kind: ProbeRecord(kind, spec[f"{kind}Probe"])
            for kind in ("startup", "readiness", "liveness")
            if f"{kind}Probe" in spec
        }
        self.started = "startup" not in self.probes
        self.ready = False
        self.restart_reasons: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._probe_loop, name=f"probes-{pod.spec.name}-{self.name}", daemon=True
        )
        self._thread.start()

    def _probe(self, record: ProbeRecord) -> bool:
        error = probe_once(record.spec, self.pod.ip, self.spec)
        if error is None:
            record.successes += 1
            record.consecutive_failures = 0
            if record.first_success_s is None:
                record.first_success_s = time.monotonic() - self.started_at
            return True
        record.failures += 1
        record.consecutive_failures += 1
        record.last_error = error
        return False

    def _probe_loop(self) -> None:
        next_at = {
            kind: self.started_at + record.spec.get("initialDelaySeconds", 0)
            for kind, record in self.probes.items()
        }
        while not self._stop.wait(0.2) and self.process.poll() is None:
            now = time.monotonic()
            for kind, record in self.probes.items():
                if now < next_at[kind] or (kind != "startup") != self.started:
                    continue
                next_at[kind] = now + record.spec.get("periodSeconds", 10)
                ok = self._probe(record)
                threshold = record.spec.get("failureThreshold", 3)
                if kind == "startup" and ok:
                    self.started = True
                    # Readiness and liveness begin once the startup probe succeeded.
                    for other in next_at:
                        next_at[other] = max(next_at[other], now)
                elif kind == "readiness":
                    success_threshold = record.spec.get("successThreshold", 1)
                    # Unready at the first failure, where the kubelet waits for
                    # failureThreshold of them: stricter, so what is Ready here is on a cluster.
                    self.ready = ok and (self.ready or record.successes >= success_threshold)
                if kind in ("startup", "liveness") and record.consecutive_failures >= threshold:
                    # The kubelet would kill and restart the container: a failed run here.
                    self.restart_reasons.append(
                        f"{kind} probe ({record.describe()}) failed {threshold} times: "
                        f"{record.last_error}"
                    )
                    record.consecutive_failures = 0

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the container's output."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """SIGTERM, the start of the kubelet's stop."""
        self._stop.set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM, then SIGKILL after the grace period; the exit code."""
        self.terminate()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.returncode


@dataclass
class RunningPod:
    """A pod on the node: its address and containers."""

    spec: PodSpec
    ip: str
    folder: Path
    containers: dict[str, Container] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Every container running and Ready, as the Pod's Ready condition means."""
        return all(c.ready and c.process.poll() is None for c in self.containers.values())

    def failures(self) -> list[str]:
        """Exited containers and probe failures the kubelet would restart for."""
        found = []
        for container in self.containers.values():
            code = container.process.poll()
            if code is not None:
                found.append(f"{self.spec.name}/{container.name} exited {code}")
            found += [f"{self.spec.name}/{container.name}: {r}" for r in container.restart_reasons]
        return found


class Node:
    """One machine's worth of pods (see the module docstring); a context manager."""

    def __init__(
        self,
        folder: Path,
        images: Mapping[str, Image],
        services: Sequence[Mapping[str, Any]] = (),
        config_maps: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.folder = folder
        self.images = images
        self.services = services
        self.config_maps = dict(config_maps or {})
        self.pods: dict[str, RunningPod] = {}
        self._addresses: dict[str, str] = {}
        self._names: dict[str, list[str]] = {}
        self._created_mount_points: list[Path] = []
        self._netns: list[str] = []

    # -- network -----------------------------------------------------------------------------

    def __enter__(self) -> Node:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def address(self, pod_name: str) -> str:
        """The pod's IP, assigned at first use (so DNS can be known before pods start)."""
        if pod_name not in self._addresses:
            self._addresses[pod_name] = f"{SUBNET}.{FIRST_POD_HOST + len(self._addresses)}"
        return self._addresses[pod_name]

    def publish(self, name: str, pods: Sequence[str]) -> None:
        """A DNS name for these pods (a pod's FQDN, or a Service's name for its pods)."""
        self._names[name] = [self.address(pod) for pod in pods]

    def _hosts_file(self, pod: PodSpec, ip: str) -> str:
        own = f"{ip}\t{pod.fqdn} {pod.name}\n" if pod.fqdn else f"{ip}\t{pod.name}\n"
        cluster = "".join(
            f"{address}\t{name}\n"
            for name, addresses in sorted(self._names.items())
            if name != pod.fqdn
            for address in addresses
        )
        return LOOPBACK_HOSTS + "# the kubelet's entry for this pod\n" + own + cluster

    def _add_network(self, pod: PodSpec) -> str:
        ip, netns = self.address(pod.name), f"ss-{pod.name}"
        veth = self._veth(pod.name)
        _run("ip", "netns", "add", netns)
        self._netns.append(netns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _run("ip", "link", "set", veth, "master", BRIDGE, "up")
        _run("ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _run("ip", "-n", netns, "link", "set", "eth0", "up")
        _run("ip", "-n", netns, "link", "set", "lo", "up")
        hosts = Path("/etc/netns") / netns / "hosts"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(self._hosts_file(pod, ip), encoding="utf-8")
        return ip

    # -- volumes and mounts ---------------------------------------------------------------------

    def _mount_point(self, path: str) -> None:
        target = Path(path)
        missing = []
        while not target.exists():
            missing.append(target)
            target = target.parent
        for directory in reversed(missing):
            directory.mkdir()
            self._created_mount_points.append(directory)

    def _volumes(self, pod: PodSpec, folder: Path, fs_group: int | None) -> dict[str, Path]:
        volumes: dict[str, Path] = {}
        for volume in pod.spec.get("volumes", []):
            path = folder / "volumes" / volume["name"]
            if "emptyDir" in volume:
                path.mkdir(parents=True, exist_ok=True)
                path.chmod(0o777)  # an emptyDir's mode
            elif "configMap" in volume:
                data = self.config_maps[volume["configMap"]["name"]]
                path.mkdir(parents=True, exist_ok=True)
                for key, value in data.items():
                    (path / key).write_text(value, encoding="utf-8")
                    (path / key).chmod(0o644)
                path.chmod(0o755)
            else:
                raise ValueError(
                    f"pod {pod.name}: volume {volume['name']} of a kind the harness lacks"
                )
            volumes[volume["name"]] = path
        for name, claim in pod.claims.items():
            claim.mkdir(parents=True, exist_ok=True)
            # The kubelet's fsGroup ownership: group-owned, group-writable, setgid.
            os.chown(claim, 0, fs_group if fs_group is not None else 0)
            claim.chmod(0o2775)
            volumes[name] = claim
        return volumes

    # -- containers -----------------------------------------------------------------------------

    def run_pod(self, pod: PodSpec, init_timeout_s: float = 120.0) -> RunningPod:
        """Create the pod: network, volumes, init containers to completion, then its containers."""
        folder = self.folder / "pods" / pod.name
        folder.mkdir(parents=True, exist_ok=True)
        ip = self._add_network(pod)
        security = pod.spec.get("securityContext", {})
        volumes = self._volumes(pod, folder, security.get("fsGroup"))
        running = RunningPod(pod, ip, folder)
        self.pods[pod.name] = running
        for init in pod.spec.get("initContainers", []):
            process, log_path = self._start(running, init, volumes, init=True)
            code = process.wait(timeout=init_timeout_s)
            if code != 0:
                tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
                raise RuntimeError(
                    f"pod {pod.name}: init container {init['name']} exited {code}: {tail}"
                )
        for spec in pod.spec["containers"]:
            process, log_path = self._start(running, spec, volumes, init=False)
            running.containers[spec["name"]] = Container(running, spec, process, log_path)
        return running

    def _start(
        self,
        running: RunningPod,
        container: Mapping[str, Any],
        volumes: Mapping[str, Path],
        init: bool,
    ) -> tuple[subprocess.Popen[bytes], Path]:
        pod = running.spec
        image = self.images[container["image"]]
        security = {**pod.spec.get("securityContext", {}), **container.get("securityContext", {})}
        uid = int(security.get("runAsUser", image.uid))
        if security.get("runAsNonRoot") and uid == 0:
            raise RuntimeError(f"pod {pod.name}/{container['name']}: runAsNonRoot with uid 0")
        gid = int(security.get("runAsGroup", 0))
        groups = sorted({gid, *([security["fsGroup"]] if "fsGroup" in security else [])})
        mounts: list[tuple[str, str, bool]] = [
            (str(source), target, True) for target, source in image.folders.items()
        ]
        for mount in container.get("volumeMounts", []):
            if "subPath" in mount:
                raise ValueError(f"pod {pod.name}: subPath mounts are not supported here")
            mounts.append(
                (str(volumes[mount["name"]]), mount["mountPath"], bool(mount.get("readOnly")))
            )
        mounts.sort(key=lambda m: len(Path(m[1]).parts))  # parents before children
        for _, target, _ in mounts:
            self._mount_point(target)
        env = container_env(pod, running.ip, image, container, self.services, self.config_maps)
        spec = {
            "hostname": pod.name,
            "mounts": mounts,
            "read_only_root": bool(security.get("readOnlyRootFilesystem")),
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "workdir": container.get("workingDir", image.workdir),
            "argv": container_argv(image, container, env),
            "env": env,
        }
        kind = "init" if init else "container"
        spec_path = running.folder / f"{kind}-{container['name']}.json"
        spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
        log_path = running.folder / f"{kind}-{container['name']}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                _container_command(pod.name, spec_path),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return process, log_path

    def exec(self, pod_name: str, container: str, argv: Sequence[str], timeout_s: float) -> str:
        """`kubectl exec`: a command in the container's namespaces, environment and user."""
        running = self.pods[pod_name]
        spec = json.loads((running.folder / f"container-{container}.json").read_text())
        spec["argv"] = list(argv)
        path = running.folder / f"exec-{container}-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        result = subprocess.run(
            _container_command(pod_name, path),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"exec in {pod_name}/{container} {list(argv)} exited {result.returncode}: "
                f"{result.stderr[-2000:]}"
            )
        return result.stdout

    def delete_pod(self, pod_name: str) -> dict[str, int | None]:
        """Stop the pod's containers as the kubelet does (grace period), remove its network."""
        running = self.pods.pop(pod_name)
        grace = float(running.spec.spec.get("terminationGracePeriodSeconds", 30))
        codes = {name: c.stop(grace) for name, c in running.containers.items()}
        self._remove_netns(f"ss-{pod_name}")
        return codes

    def _veth(self, pod_name: str) -> str:
        """The node's end of the pod's link (15 characters at most, a Linux limit)."""
        return f"ssv{self.address(pod_name).rsplit('.', 1)[1]}"

    def _remove_netns(self, netns: str) -> None:
        if netns in self._netns:
            self._netns.remove(netns)
            # The link first, and synchronously: a deleted namespace takes its end of the link
            # with it only later, and a pod started again at once (a Job's retry, the toolbox)
            # reuses the name.
            subprocess.run(
                ["ip", "link", "del", self._veth(netns.removeprefix("ss-"))], capture_output=True
            )
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / netns, ignore_errors=True)

    def close(self) -> None:
        """Every pod stopped, every namespace, link and mount point this node made removed."""
        # All at once, as when a namespace is deleted: a broker stopped last would otherwise
        # wait its whole grace period for a quorum that is already gone.
        for container in self.containers():
            container.terminate()
        for name in list(self.pods):
            self.delete_pod(name)
        for netns in list(self._netns):
            self._remove_netns(netns)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
        for directory in reversed(self._created_mount_points):
            with contextlib.suppress(OSError):  # something else put files there
                directory.rmdir()
        self._created_mount_points.clear()

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait for `predicate()`, failing early when a pod fails."""

        def holds() -> bool:
            failures = [f for pod in self.pods.values() for f in pod.failures()]
            if failures:
                raise RuntimeError(f"waiting for {what}: {failures}\n{self.log_tails()}")
            return predicate()

        wait_until(holds, timeout_s, what, seen=self.log_tails, interval_s=0.5)

    def log_tails(self, lines: int = 20) -> str:
        """Every container's last lines, for failure messages."""
        return "\n".join(
            f"--- {pod.spec.name}/{name}\n{container.log_tail(lines)}"
            for pod in self.pods.values()
            for name, container in pod.containers.items()
        )

    def containers(self) -> Iterator[Container]:
        """Every running container."""
        for pod in self.pods.values():
            yield from pod.containers.values()
