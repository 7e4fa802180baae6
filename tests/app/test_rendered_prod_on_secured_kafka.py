"""The prod stack as rendered starts and counts on a secured 3-node Apache Kafka (docs/security.md).

Everything comes from `python -m offline.render --stack prod`: the brokers' settings (their
container's rendered server.properties, `SERVER_PROPERTIES`), each broker pod's `grant-acls`
script (run with Kafka's tools from the release's jars) and readiness sidecar with the files
they mount, the topic Job's own command with its ConfigMap (topics, users, ACLs, client
settings) and the processor's `processor.properties`, its environment and its volumes. The
test changes only what names the pod or the cluster's network instead of this host (ports,
addresses, mount paths, the image's interpreter and Kafka's jars), each change listed below
with its reason; so a rendered prod setting that the brokers, their pods' helpers, the
reconciler or the processor would refuse fails here.

Broker settings the render leaves at Kafka's defaults take the local cluster's test values
(`devkit.kraft_node.TEST_BROKER_CONFIGS`: fewer threads and internal-topic partitions for a
2-core machine); every key the render sets overrides them. One cluster serves the module.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509

from app.admin.acl_bindings import Binding, read_bindings
from app.admin.scram_credentials import authenticates, existing_credentials
from app.clients.waiting import wait_until
from contract import acl_specs, container_commands, topic_specs
from contract.java_properties import load_properties
from contract.kafka_security import (
    BROKER_PRINCIPAL,
    TLS_CA_FILE,
    TLS_CERT_FILE,
    TLS_COMBINED_FILE,
    TLS_KEY_FILE,
)
from devkit.kraft_cluster import ClusterSecurity, KraftCluster
from devkit.local_ports import free_port
from tests.app.processor_harness import (
    REPO,
    ProcessorProcess,
    produce_page_views,
    wait_for_counts,
)
from tests.app.rendered_manifests import Manifests, render
from tests.app.secured_kafka import (
    BrokerPod,
    BrokerPods,
    broker_pods,
    grant_command,
    localize,
    release_mounts,
)

pytestmark = [
    pytest.mark.timeout(900),
]

STACK = "prod"
# The brokers' client listener in the pod: the readiness sidecar connects to it on localhost.
CLIENT_PORT = 9092
DEADLINE_S = 300.0
JOB_TIMEOUT_S = 600.0
VIEWS = 3000

# Rendered server.properties keys the test drops, and why: each is the pod's (its identity, its
# addresses, its volume), and the local cluster sets its own (`KraftCluster._server_properties`).
BROKER_KEYS_DROPPED = {
    "process.roles": "set per node by the cluster, which runs every node as the render does "
    "(broker,controller: checked on the brokers)",
    "node.id": "the pod's ordinal (the broker's start appends it); the cluster numbers its nodes",
    "listeners": "the pod's ports; the nodes listen on free ports of 127.0.0.1",
    "advertised.listeners": "the pods' DNS names; the nodes advertise 127.0.0.1",
    "controller.quorum.voters": "the pods' DNS names; the nodes form a quorum of their "
    "loopback controller ports (controller.quorum.bootstrap.servers)",
    "log.dirs": "the pod's data volume; each node has a folder of the cluster's",
}
# Rendered keys the test rewrites, and why: the brokers read their TLS files from the kafka-tls
# Secret mounted here; the cluster writes files of the same names (`devkit.local_tls`) into its
# `tls_dir`, with a certificate for 127.0.0.1 and the subject prod's certificate has.
BROKER_TLS_MOUNT = PurePosixPath("/etc/kafka/tls")
CLUSTER_TLS_FILES = frozenset({TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE, TLS_COMBINED_FILE})
_TLS_FILE = f"a file in {BROKER_TLS_MOUNT}: the file of that name in the cluster's tls_dir"
BROKER_KEYS_REWRITTEN = {"ssl.keystore.location": _TLS_FILE, "ssl.truststore.location": _TLS_FILE}
# What the test changes in the rendered processor.properties, and why; every other line runs as
# rendered (checked on the file the processor reads).
PROCESSOR_KEYS_CHANGED = {
    "bootstrap.servers": "the Kafka Service's DNS name; the brokers' loopback client listeners",
    "sasl.password": "a ${dir:...} reference into the user Secret's mount: its local folder",
    "ssl.ca.location": "a file in the CA Secret's mount: its local folder",
    "state.dir": "the state claim's mount: a temporary folder",
    "spark.local.dir": "in the pod's /tmp (an emptyDir): a temporary folder",
    "health.port": "the pod's port; a free port of this host (the harness's)",
}
# The topic Job's command runs as rendered but for the image's interpreter (`python` on the
# image's PATH: this environment's), --bootstrap-servers (the brokers' loopback listeners) and
# its mount paths (each volume's local folder, in its arguments and in its ConfigMap's files).


def downward_env(container: Mapping[str, Any], pod: str, namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet fills it (values and the pod's own fields)."""
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


@dataclass(frozen=True)
class Kubelet:
    """Stands in for the kubelet: a pod's volumes as local folders, filled from the rendered
    ConfigMaps and, for the Secrets (rendered without their values), the cluster's TLS files
    and the users' passwords."""

    manifests: Manifests
    tls_dir: Path
    passwords: Mapping[str, str]  # user -> password
    user_secrets: Mapping[str, str]  # Secret name -> user

    def mount(
        self, pod: Mapping[str, Any], container: Mapping[str, Any], root: Path
    ) -> dict[str, Path]:
        """Write every volume `container` mounts into a folder under `root`; mount path ->
        folder. ConfigMap files name the other mounts by their local folders."""
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: root / m["name"] for m in container.get("volumeMounts", [])}
        for mount in container.get("volumeMounts", []):
            folder = mounts[mount["mountPath"]]
            folder.mkdir(parents=True)
            # No volume of that name: a claim of the StatefulSet's volumeClaimTemplates, empty.
            volume = volumes.get(mount["name"], {"emptyDir": {}})
            for name, text in self._files(volume, mounts).items():
                (folder / name).write_text(text, encoding="utf-8")
        return mounts

    def _files(self, volume: Mapping[str, Any], mounts: Mapping[str, Path]) -> dict[str, str]:
        if "emptyDir" in volume:
            return {}
        sources = volume["projected"]["sources"] if "projected" in volume else [volume]
        files = {}
        for source in sources:
            if "configMap" in source:
                ref = source["configMap"]
                data = {
                    key: localize(text, mounts)
                    for key, text in self.manifests.config_maps()[ref["name"]].items()
                }
            else:
                ref = source["secret"]
                data = self.secret(ref.get("secretName") or ref["name"])
            items = ref.get("items") or [{"key": key, "path": key} for key in data]
            files.update({item["path"]: data[item["key"]] for item in items})
        return files

    def secret(self, name: str) -> dict[str, str]:
        """The rendered Secret's keys with this host's values."""
        secret = self.manifests.get("Secret", name)
        keys = {**secret.get("stringData", {}), **secret.get("data", {})}
        if secret.get("type") == "kubernetes.io/tls":
            return {key: (self.tls_dir / key).read_text(encoding="utf-8") for key in keys}
        user = self.user_secrets[name]
        # Every other key holds the user's password (one per SCRAM mechanism).
        return {key: user if key == "username" else self.passwords[user] for key in keys}


@dataclass
class Deployed:
    """The rendered prod stack's brokers, running, and what the module needs to go on."""

    manifests: Manifests
    cluster: KraftCluster
    kubelet: Kubelet
    workdir: Path
    rendered_broker: dict[str, str]
    broker_configs: dict[str, str]
    pods: BrokerPods
    readiness_user: str
    # Seen before the grant containers started: each sidecar's /ready, and the bootstrap
    # principals' ACLs on the cluster.
    unready_before_grants: dict[int, tuple[int, str]]
    acls_before_grants: frozenset[Binding]

    @cached_property
    def superuser(self) -> AdminClient:
        """An admin client that is the broker (the only super user), one for the module."""
        configs: dict[str, str | int | float | bool] = {**self.cluster.superuser_configs()}
        return AdminClient(configs)

    def logs(self) -> dict[Path, str]:
        """Every log file so far: the sidecars' and the brokers' (console and log4j files)."""
        paths = [*self.pods.logs()]
        for node in self.cluster.nodes:
            paths += [node.console_path, *sorted(node.log_dir.glob("*.log"))]
        return {p: p.read_text(errors="replace") for p in paths if p.is_file()}


def _only(objects: list[dict[str, Any]], what: str) -> dict[str, Any]:
    assert len(objects) == 1, f"the {STACK} stack renders {len(objects)} {what}, expected one"
    return objects[0]


def _topic_job(manifests: Manifests) -> dict[str, Any]:
    """The Job that reconciles the topics (`python -m app.admin.reconcile`)."""
    return _only(
        [
            job
            for job in manifests.of_kind("Job")
            if any(
                "app.admin.reconcile" in c.get("args", [])
                for c in job["spec"]["template"]["spec"]["containers"]
            )
        ],
        "topic reconciler Jobs",
    )


def _processor_set(manifests: Manifests) -> dict[str, Any]:
    return _only(
        [
            sts
            for sts in manifests.of_kind("StatefulSet")
            if any(
                "app.processor" in c.get("args", [])
                for c in sts["spec"]["template"]["spec"]["containers"]
            )
        ],
        "processor StatefulSets",
    )


def _job_user_secrets(job: Mapping[str, Any]) -> dict[str, str]:
    """Secret name -> user, from the folder the Job reads passwords from (one file per user)."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    folder = args[args.index("--scram-passwords-dir") + 1]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return {
        source["secret"]["name"]: item["path"]
        for source in volume["projected"]["sources"]
        for item in source["secret"]["items"]
    }


def _job_config(manifests: Manifests) -> dict[str, str]:
    """The topic Job's ConfigMap: its topics, users and ACLs, its client settings."""
    (specs,) = [
        v for v in _topic_job(manifests)["spec"]["template"]["spec"]["volumes"] if "configMap" in v
    ]
    return manifests.config_maps()[specs["configMap"]["name"]]


def broker_configs(rendered: Mapping[str, str], tls_dir: Path) -> dict[str, str]:
    """The rendered broker settings the cluster runs: all but the dropped keys, TLS in `tls_dir`."""
    # Checked before any broker starts: a cluster that cannot form would say less than this.
    supers = {p.strip() for p in rendered.get("super.users", "").split(";")}
    assert BROKER_PRINCIPAL in supers, (
        f"the rendered super.users={rendered.get('super.users')!r} does not name "
        f"{BROKER_PRINCIPAL}, the principal of the brokers' certificate (devkit.local_tls, and "
        "prod's from infra/kafka_credentials.py): the brokers would refuse each other on the "
        "INTERNAL and CONTROLLER listeners"
    )
    configs = {k: v for k, v in rendered.items() if k not in BROKER_KEYS_DROPPED}
    for key in BROKER_KEYS_REWRITTEN:
        path = PurePosixPath(rendered[key])
        assert path.parent == BROKER_TLS_MOUNT and path.name in CLUSTER_TLS_FILES, (
            f"the rendered {key}={path} is not one of the files the brokers' TLS Secret "
            f"mounts in {BROKER_TLS_MOUNT}: {sorted(CLUSTER_TLS_FILES)}"
        )
        configs[key] = str(tls_dir / path.name)
    return configs


def _answers(pod: BrokerPod, path: str, status: int) -> bool:
    return pod.answer(path)[0] == status


def _says(log_file: Path, text: str) -> bool:
    return log_file.is_file() and text in log_file.read_text(errors="replace")


def _kafka_pod(manifests: Manifests) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The brokers' pod spec and its containers by name."""
    pod = manifests.get("StatefulSet", "kafka")["spec"]["template"]["spec"]
    return pod, {c["name"]: c for c in pod["containers"]}


def _pod_helpers(
    manifests: Manifests, cluster: KraftCluster, kubelet: Kubelet, workdir: Path
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Each node's rendered readiness sidecar arguments and grant-acls command, on this host:
    their mounts are local folders (the kubelet's files), the broker is the node's listener
    (the sidecar's CLIENT, the grant script's INTERNAL), `$(KAFKA_NODE_ID)` the node's id."""
    pod, containers = _kafka_pod(manifests)
    sidecar, grant = containers["broker-readiness"], containers["grant-acls"]
    assert sidecar["args"][:3] == ["python", "-m", "app.admin.broker_readiness"], sidecar["args"]
    assert grant["command"][:2] == ["sh", "-c"], grant["command"]
    sidecars, grants = {}, {}
    for node in cluster.nodes:
        root = workdir / f"pod-{node.node_id}"
        mounts = kubelet.mount(pod, sidecar, root / "broker-readiness")
        args = [localize(arg, mounts) for arg in sidecar["args"][3:]]
        args = [a.replace("$(KAFKA_NODE_ID)", str(node.node_id)) for a in args]
        server = args.index("--bootstrap-server") + 1
        assert args[server] == f"localhost:{CLIENT_PORT}", args
        args[server] = f"127.0.0.1:{node.broker_port}"
        port = args.index("--port")
        sidecars[node.node_id] = args[:port] + args[port + 2 :]  # a free port instead
        mounts = kubelet.mount(pod, grant, root / "grant-acls")
        grants[node.node_id] = grant_command(
            grant["command"][2], cluster, node.node_id, mounts, mounts["/tmp"]
        )
    return sidecars, grants


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    workdir = tmp_path_factory.mktemp("rendered-prod")
    render(STACK, workdir / "manifests")
    manifests = Manifests.load(workdir / "manifests")
    bootstrap = manifests.get("ConfigMap", "kafka-bootstrap")["data"]
    (broker, *_) = manifests.get("StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in broker["env"]}
    rendered = load_properties(env[container_commands.SERVER_PROPERTIES_VARIABLE])
    job = _topic_job(manifests)
    user_secrets = _job_user_secrets(job)
    passwords = {user: f"{user}-{uuid.uuid4().hex}" for user in user_secrets.values()}
    reconciler = _reconciler(manifests)
    readiness = load_properties(bootstrap["readiness-client.properties"])["sasl.username"]
    # The reconciler's and the readiness sidecars' users exist from the start (bootstrapped at
    # format, as prod's init container does with every user); the reconciler creates the others.
    security = ClusterSecurity(
        scram_users={user: passwords[user] for user in (reconciler, readiness)}
    )
    cluster_dir = workdir / "cluster"
    configs = broker_configs(rendered, cluster_dir / "tls")
    with KraftCluster(security=security, broker_configs=configs, work_dir=cluster_dir) as cluster:
        assert cluster.tls_dir == cluster_dir / "tls"
        kubelet = Kubelet(manifests, cluster.tls_dir, passwords, user_secrets)
        sidecars, grants = _pod_helpers(manifests, cluster, kubelet, workdir)
        principals = [u.principal for u in acl_specs.loads(bootstrap["bootstrap-acls.json"])]
        superuser = AdminClient({**cluster.superuser_configs()})
        with broker_pods(cluster, sidecars, grants, workdir, DEADLINE_S, grant=False) as pods:
            # Before the grants, no sidecar is ready, and says why.
            unready = {}
            for pod in pods.pods:
                wait_until(partial(_answers, pod, "/ready", 503), DEADLINE_S,
                           f"the sidecar of node {pod.node_id} to judge",
                           interval_s=0.5)  # fmt: skip
                status, body = pod.answer("/ready")
                unready[pod.node_id] = (status, body.decode())
            before = read_bindings(superuser, principals)
            pods.start_grants()
            pods.wait_ready(DEADLINE_S)
            yield Deployed(
                manifests, cluster, kubelet, workdir, rendered, configs, pods, readiness,
                unready, before,
            )  # fmt: skip


@pytest.fixture(scope="module")
def topic_job(deployed: Deployed) -> subprocess.CompletedProcess[str]:
    """The rendered topic Job's container, run once on the fresh cluster."""
    return _run_topic_job(deployed, deployed.kubelet, deployed.workdir / "job")


def _run_topic_job(
    deployed: Deployed, kubelet: Kubelet, root: Path
) -> subprocess.CompletedProcess[str]:
    """The rendered topic Job's container, its volumes as `kubelet` fills them under `root`."""
    job = _topic_job(deployed.manifests)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "command" not in container, "the image's entrypoint runs the container's args"
    mounts = kubelet.mount(pod, container, root)
    args = [localize(arg, mounts) for arg in container["args"]]
    assert args[0] == "python", args
    args[0] = sys.executable
    args[args.index("--bootstrap-servers") + 1] = deployed.cluster.bootstrap_servers
    meta = job["metadata"]
    env = downward_env(container, f"{meta['name']}-0", meta["namespace"])
    return subprocess.run(
        args,
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )


def test_the_rendered_broker_settings_reach_the_brokers_unchanged(deployed: Deployed) -> None:
    certificate = x509.load_pem_x509_certificate(
        (deployed.cluster.tls_dir / TLS_CERT_FILE).read_bytes()
    )
    # The principal the rendered super.users names (checked before the brokers started) is
    # the one the cluster's certificate gives the brokers.
    assert f"User:{certificate.subject.rfc4514_string()}" == BROKER_PRINCIPAL
    expected = deployed.broker_configs
    for key in BROKER_KEYS_REWRITTEN:
        assert Path(expected[key]).is_file(), f"{key}: the cluster wrote no {expected[key]}"
    for node in deployed.cluster.nodes:
        written = load_properties(node.config_path.read_text(encoding="utf-8"))
        wrong = {k: (v, written.get(k)) for k, v in expected.items() if written.get(k) != v}
        assert not wrong, f"node {node.node_id} was given other values than rendered: {wrong}"
        # One broker per request: a broker describes its own settings only.
        resource = ConfigResource(ResourceType.BROKER, str(node.node_id))
        (future,) = deployed.superuser.describe_configs([resource]).values()
        described = future.result(30)
        roles = described["process.roles"].value
        assert roles == deployed.rendered_broker["process.roles"], f"node {node.node_id}: {roles}"
        shown = {k: e.value for k, e in described.items() if k in expected and not e.is_sensitive}
        wrong = {k: (expected[k], v) for k, v in shown.items() if v != expected[k]}
        assert not wrong, f"broker {node.node_id} runs other values than rendered: {wrong}"
        # What a broker does not describe: per-listener settings, and secrets it masks.
        unseen = sorted(k for k in set(expected) - set(shown) if not k.startswith("listener.name."))
        assert all(described[k].is_sensitive for k in unseen), f"not described: {unseen}"
    print(
        f"{len(expected)} rendered broker settings on the brokers ({len(shown)} read back from "
        f"each); dropped {sorted(BROKER_KEYS_DROPPED)}, rewritten {sorted(BROKER_KEYS_REWRITTEN)}"
    )


def test_the_rendered_topic_job_creates_the_rendered_topics_users_and_acls(
    deployed: Deployed, topic_job: subprocess.CompletedProcess[str]
) -> None:
    output = topic_job.stdout + topic_job.stderr
    assert topic_job.returncode == 0, (
        f"the topic Job exited {topic_job.returncode}:\n{output[-5000:]}"
    )
    for password in deployed.kubelet.passwords.values():
        assert password not in output  # no secret in the Job's log
    config = _job_config(deployed.manifests)
    specs = topic_specs.loads(config["topics.json"])
    users = acl_specs.loads(config["acls.json"])
    admin = deployed.superuser
    topics = admin.list_topics(timeout=30).topics
    for spec in specs:
        assert spec.name in topics, f"topic {spec.name} not created; topics: {sorted(topics)}"
        partitions = topics[spec.name].partitions
        assert len(partitions) == spec.partitions, spec.name
        assert {len(p.replicas) for p in partitions.values()} == {spec.replication_factor}
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs]
    for spec, future in zip(specs, admin.describe_configs(resources).values(), strict=True):
        described = future.result(30)
        assert {k: described[k].value for k in spec.configs} == dict(spec.configs), spec.name
    names = [u.name for u in users]
    assert existing_credentials(admin, names) == set(names)
    present = read_bindings(admin, [u.principal for u in users])
    assert present == {Binding.of(acl) for user in users for acl in user.acls}
    print(
        "topics "
        + ", ".join(f"{s.name} ({s.partitions}x{s.replication_factor})" for s in specs)
        + f"; users {names}"
    )


def test_the_rendered_metadata_version_job_logs_in_as_the_reconciler_and_finalizes(
    deployed: Deployed,
) -> None:
    """The Java client settings the Job's ConfigMap holds (SCRAM over TLS, the password read by
    Kafka's DirectoryConfigProvider from the user Secret's file, the CA as a PEM trust store)
    log in, and the reconciler's bootstrap ACLs allow UpdateFeatures: on a cluster already at
    the release, the Job's command finds nothing to raise and exits 0."""
    (job,) = [
        j
        for j in deployed.manifests.of_kind("Job")
        if j["spec"]["template"]["spec"]["containers"][0]["name"] == container_commands.FINALIZE
    ]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = deployed.kubelet.mount(pod, container, deployed.workdir / "finalize")
    tool = container_commands.kafka_tool(container_commands.FEATURE_COMMAND)
    assert container["command"][: len(tool)] == list(tool), container["command"]
    mounts.update(release_mounts(deployed.cluster))
    command = [localize(word, mounts) for word in container["command"]]
    command[command.index("--bootstrap-server") + 1] = deployed.cluster.bootstrap_servers
    finished = subprocess.run(command, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, f"the Job's command exited {finished.returncode}:\n{output}"
    for password in deployed.kubelet.passwords.values():
        assert password not in output
    assert "metadata.version" in output, output
    said = "; ".join(
        line for line in output.splitlines() if "upgraded" in line or "already" in line
    )
    print(f"the metadata.version Job on the secured cluster: {said}")


def test_the_brokers_are_ready_only_after_their_grant_containers_granted_the_bootstrap_acls(
    deployed: Deployed,
) -> None:
    """The sidecars, on their own user, said not ready while no ACL existed, and why; the
    grant containers (the rendered script, as the broker) granted every bootstrap ACL; then
    every sidecar answered ready."""
    bootstrap = deployed.manifests.get("ConfigMap", "kafka-bootstrap")["data"]
    users = acl_specs.loads(bootstrap["bootstrap-acls.json"])
    assert {u.name for u in users} >= {deployed.readiness_user}
    assert deployed.acls_before_grants == frozenset()  # a fresh cluster: deny by default
    for node_id, (status, body) in deployed.unready_before_grants.items():
        assert status == 503, (node_id, body)
        assert "grant-acls container" in body, (node_id, body)
    present = read_bindings(deployed.superuser, [u.principal for u in users])
    assert present == {Binding.of(acl) for user in users for acl in user.acls}
    for pod in deployed.pods.pods:
        assert pod.ready()
        assert pod.grant_log is not None
        wait_until(
            partial(_says, pod.grant_log, "granted every ACL of"),
            DEADLINE_S,
            f"{pod.grant_log} to report its grants",
            seen=pod.grant_log.read_text,
            interval_s=0.5,
        )
        assert "ready: in sync on all" in pod.sidecar_log.read_text()
    # The sidecar's own identity: its folders hold its password and the CA, no private key.
    for folder in (deployed.workdir / "pod-1" / "broker-readiness").iterdir():
        for file in folder.iterdir():
            assert "PRIVATE KEY" not in file.read_text(errors="replace"), file


def test_the_readiness_user_may_describe_and_nothing_more(
    deployed: Deployed, topic_job: subprocess.CompletedProcess[str]
) -> None:
    assert topic_job.returncode == 0, topic_job.stderr[-3000:]
    user = deployed.readiness_user
    configs = deployed.cluster.client_configs(user, deployed.kubelet.passwords[user])
    admin = AdminClient({**configs})
    specs = topic_specs.loads(_job_config(deployed.manifests)["topics.json"])
    seen = admin.list_topics(timeout=30).topics
    assert {spec.name for spec in specs} <= set(seen)  # DESCRIBE: it judges their ISR
    # No ACL administration (CreateAcls needs ALTER on the cluster).
    acl = AclBinding(ResourceType.TOPIC, specs[0].name, ResourcePatternType.LITERAL,
                     f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([acl])[acl].result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # No data: a produce is refused.
    errors: list[KafkaError] = []
    producer = Producer({**configs, "acks": "all"})
    producer.produce(specs[0].name, b"x", on_delivery=lambda err, _msg: errors.append(err))  # type: ignore[arg-type]
    assert producer.flush(60) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors


def test_the_sidecars_serve_the_expiry_of_the_certificate_the_broker_serves(
    deployed: Deployed,
) -> None:
    pod = deployed.pods.pods[0]
    status, body = pod.answer("/metrics")
    assert status == 200, body
    values = {
        line.split()[0]: float(line.split()[1])
        for line in body.decode().splitlines()
        if line and not line.startswith("#")
    }
    metric = "kafka_tls_certificate_expiration_timestamp_seconds"
    files = {"broker": TLS_CERT_FILE, "ca": TLS_CA_FILE}
    for certificate, name in files.items():
        pem = (deployed.cluster.tls_dir / name).read_bytes()
        expires = x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
        assert values[f'{metric}{{certificate="{certificate}"}}'] == expires, values
    # The broker's is what it serves: the same as a handshake of this test's own.
    context = ssl.create_default_context(cafile=str(deployed.cluster.ca_file))
    node = deployed.cluster.node(pod.node_id)
    with (
        socket.create_connection(("127.0.0.1", node.broker_port), timeout=30) as sock,
        context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        peer = tls.getpeercert()
    assert peer, "the broker served no certificate"
    served = ssl.cert_time_to_seconds(str(peer["notAfter"]))
    assert values[f'{metric}{{certificate="broker"}}'] == served


def _on_this_host(properties: str, bootstrap_servers: str) -> str:
    """The processor's properties with the brokers' loopback listeners, without the pod's
    health.port (the harness appends a free one)."""
    lines = []
    for line in properties.splitlines():
        key = line.partition("=")[0].strip()
        if key == "health.port":
            continue
        lines.append(
            f"bootstrap.servers={bootstrap_servers}" if key == "bootstrap.servers" else line
        )
    return "\n".join(lines) + "\n"


def test_the_rendered_processor_counts_exactly_once_and_stops_cleanly(
    deployed: Deployed, topic_job: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    assert topic_job.returncode == 0, topic_job.stderr[-3000:]
    sts = _processor_set(deployed.manifests)
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # What ProcessorProcess runs, with the properties file the pod mounts.
    args = container["args"]
    assert args[:4] == ["python", "-m", "app.processor", "--properties"], args
    name, namespace = f"{sts['metadata']['name']}-0", sts["metadata"]["namespace"]
    mounts = deployed.kubelet.mount(pod, container, tmp_path / "pod")
    mounted = Path(localize(args[4], mounts)).read_text(encoding="utf-8")
    properties = _on_this_host(mounted, deployed.cluster.bootstrap_servers)
    env = downward_env(container, name, namespace)
    processor = ProcessorProcess(tmp_path, name, properties, env=env)
    try:
        (text,) = [d["processor.properties"] for d in deployed.manifests.config_maps().values()
                   if "processor.properties" in d]  # fmt: skip
        rendered = load_properties(text)
        ran = load_properties(processor.properties_path.read_text(encoding="utf-8"))
        changed = {k for k in rendered.keys() | ran.keys() if rendered.get(k) != ran.get(k)}
        assert changed == set(PROCESSOR_KEYS_CHANGED), (
            f"the processor runs {sorted(changed)} changed, not {sorted(PROCESSOR_KEYS_CHANGED)}"
        )
        superuser = deployed.cluster.superuser_configs()
        truth = produce_page_views(superuser, ran["input.topic"], VIEWS, 50, seed=27)
        took = wait_for_counts(processor, superuser, ran["output.topic"], truth, DEADLINE_S)
        print(f"{VIEWS} page views counted exactly once after {took:.1f} s")
        assert "AUTHORIZATION_FAILED" not in processor.log(), processor.log()[-5000:]
        code, stopped = processor.terminate(float(pod["terminationGracePeriodSeconds"]))
        assert code == 0, f"the processor exited {code}:\n{processor.log()[-5000:]}"
        print(f"stopped in {stopped:.1f} s")
    finally:
        processor.ensure_stopped()
    logs = {processor.log_path: processor.log(), **deployed.logs()}
    for user, password in deployed.kubelet.passwords.items():
        leaked = [str(path) for path, log in logs.items() if password in log]
        assert not leaked, f"the password of {user} is in {leaked}"


def test_a_sidecar_started_mid_rotation_logs_in_with_the_previous_revisions_credential(
    deployed: Deployed, tmp_path: Path
) -> None:
    """A broker restarted after a rotation wrote the new password, before the reconciler set
    it: the rendered fallback login (the previous mechanism's password, still valid) makes its
    sidecar ready, so the roll never waits on the Job that waits on the roll."""
    user = deployed.readiness_user
    previous = load_properties(
        deployed.manifests.get("ConfigMap", "kafka-bootstrap")["data"][
            "readiness-previous-client.properties"
        ]
    )
    mechanism, previous_password = previous["sasl.mechanism"], f"previous-{uuid.uuid4().hex}"
    upsert = UserScramCredentialUpsertion(
        user,
        ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 4096),
        previous_password.encode(),
    )
    deployed.superuser.alter_user_scram_credentials([upsert])[user].result(30)
    sidecars, _ = _pod_helpers(deployed.manifests, deployed.cluster, deployed.kubelet, tmp_path)
    node_id = deployed.cluster.nodes[0].node_id
    secret_files = tmp_path / f"pod-{node_id}" / "broker-readiness" / "kafka-user"
    # The new revision's password, which the cluster does not know yet.
    (secret_files / "password").write_text(f"not-set-yet-{uuid.uuid4().hex}")
    (secret_files / previous["sasl.password"].rsplit(":", 1)[1].rstrip("}")).write_text(
        previous_password
    )
    port, log_file = free_port(), tmp_path / "sidecar.log"
    with log_file.open("wb") as out:
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "app.admin.broker_readiness", *sidecars[node_id],
             "--port", str(port), "--host", "127.0.0.1"],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    pod = BrokerPod(node_id, port, log_file)
    try:
        wait_until(pod.ready, DEADLINE_S, "the mid-rotation sidecar to answer 200 on /ready",
                   seen=log_file.read_text, interval_s=0.5)  # fmt: skip
    finally:
        sidecar.terminate()
        sidecar.wait(30)
    assert "connected with the previous revision's credentials" in log_file.read_text()


def test_kept_volumes_adopted_by_a_new_stack_take_the_new_stacks_passwords(
    deployed: Deployed, topic_job: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    """A destroy that keeps the claims, then a new stack on them (docs/operations.md, "What
    destroy leaves"): every user gets a new password, the brokers start on storage an earlier
    stack formatted (so the format step writes nobody), and the rendered grant containers set
    the bootstrap users' credentials as the broker; so the readiness sidecars become ready and
    the reconciler logs in with the new stack's passwords, and sets everyone else's. Last in the
    module: the cluster's users keep the new passwords."""
    assert topic_job.returncode == 0, "the first stack's topic Job did not set its users up"
    cluster, old = deployed.cluster, dict(deployed.kubelet.passwords)
    new = {user: f"{user}-{uuid.uuid4().hex}" for user in old}
    # The first stack goes: its pods' helpers and its brokers stop; the storage stays.
    deployed.pods.stack.close()
    for node in cluster.nodes:
        cluster.stop_node(node.node_id)
    for node in cluster.nodes:
        cluster.start_node(node.node_id)
    cluster.wait_until_ready()
    admin = deployed.superuser
    logins = {user: cluster.client_configs(user, new[user]) for user in new}
    assert not any(authenticates(logins[user], 30) for user in new), (
        "a new stack's password logs in before anything set it: the storage was not kept"
    )
    # The new stack: its Secrets hold the new passwords; its pods start on the kept storage.
    kubelet = Kubelet(deployed.manifests, cluster.tls_dir, new, deployed.kubelet.user_secrets)
    sidecars, grants = _pod_helpers(deployed.manifests, cluster, kubelet, tmp_path)
    with broker_pods(cluster, sidecars, grants, tmp_path, DEADLINE_S) as pods:
        bootstrap = {deployed.readiness_user, _reconciler(deployed.manifests)}
        for user in bootstrap:
            assert authenticates(logins[user], 30), f"{user}: the new password does not log in"
            assert not authenticates(cluster.client_configs(user, old[user]), 30), (
                f"{user}: the old stack's password still logs in"
            )
        job = _run_topic_job(deployed, kubelet, tmp_path / "job")
        output = job.stdout + job.stderr
        assert job.returncode == 0, f"the new stack's topic Job exited {job.returncode}:\n{output}"
        for user in set(new) - bootstrap:
            assert authenticates(logins[user], 30), f"{user}: the reconciler did not set it"
        logs = {**deployed.logs(), **{p: p.read_text() for p in pods.logs() if p.is_file()}}
        for user, password in new.items():
            leaked = [str(path) for path, log in logs.items() if password in log]
            assert not leaked and password not in output, f"the password of {user} is in {leaked}"
    print(
        f"adopted: {sorted(bootstrap)} set by the grant containers, "
        f"{sorted(set(new) - bootstrap)} by the reconciler; existing credentials "
        f"{sorted(existing_credentials(admin, sorted(new)))}"
    )


def _reconciler(manifests: Manifests) -> str:
    """The topic Job's SCRAM user, from its rendered client settings."""
    return load_properties(_job_config(manifests)["client.properties"])["sasl.username"]
