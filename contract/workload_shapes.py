"""Every workload the program deploys, declared once: its kind, its containers, and for each one
the stack setting of its image, its env var names and their sources, its ports, and where it
mounts which of its pod's volumes; its pod's volumes and claims, its service account, and the
peers and ports its NetworkPolicies allow in and out.

The pack judges by this allowlist (`workload-shapes`): anything rendered that it does not hold is
refused, by name, with where it was declared: an extra workload, container, env var, port,
volume or mount; an env var from another source; a container missing, or one in another list;
a service account other than the workload's own; a NetworkPolicy peer or port it does not
declare. Each item is declared for every stack, or only where the brokers' client listener is
secured (SASL_SSL: SCRAM users, ACLs and TLS), where it is then required; on a PLAINTEXT cluster
it must be absent. Each Secret a volume takes is declared by its role (the brokers' TLS Secret,
a Kafka user's) with the keys it may take; which user's Secret a workload may read is
`secret-mounts`' (its own, unless it may set every password). What each container runs is
`container_commands`.

The program renders from the same names (`infra/kafka_cluster.py`, `infra/processor.py`,
`infra/reconciler_jobs.py`, `infra/metadata_version.py`), and
`tests/infra/test_workload_shapes.py` holds it to the declaration both ways: every rendered
stack fits it, and every declared item is rendered by some stack. Change a workload here
first. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TypeVar

from contract.container_commands import (
    BOOTSTRAP_DIR,
    BROKER_READINESS,
    DATA_DIR,
    FEATURES_DIR,
    FINALIZE,
    FORMAT_STORAGE,
    GRANT_ACLS,
    IMAGE_SOURCES,
    KAFKA,
    PROCESSOR,
    PROPERTIES_DIR,
    READINESS_PORT,
    RECONCILE,
    RETIRE,
    SPECS_DIR,
    STATE_DIR,
    USERS_DIR,
)
from contract.kafka_security import PASSWORD_KEY, TLS_CA_FILE

DECLARED_IN = "contract/workload_shapes.py"

# The brokers' listeners: client and controller are container ports; the internal one
# (replication, and the `grant-acls` containers) is reached only by the brokers' own pods.
CLIENT_PORT = 9092
CONTROLLER_PORT = 9093
INTERNAL_PORT = 9094
# The processor's health and metrics server (`health.port`).
HEALTH_PORT = 8080
# The brokers' key, certificate and CA (the TLS Secret), read-only.
TLS_DIR = "/etc/kafka/tls"
# Where a client pod mounts its user's Secret and the cluster's CA.
USER_DIR = "/etc/kafka-user"
CA_DIR = "/etc/kafka-ca"
# The processor's state (its claim), as `state.dir` names it.
PROCESSOR_STATE_DIR = "/var/lib/processor"
# The pod's ordinal, set by the StatefulSet controller: node N is always pod kafka-N.
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"

# The pods that may reach the brokers' client listener carry this label (the processor, the
# topic reconciler, the metadata.version finalizer).
KAFKA_CLIENT_LABEL = {"stateful-streaming.io/kafka-client": "true"}
# The cluster DNS (CoreDNS or kube-dns, labelled k8s-app=kube-dns on kind, GKE, EKS and AKS):
# the one destination outside its namespace that every pod's egress policy allows.
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
DNS_PORT = 53
# Set by Kubernetes on every namespace (1.22+), immutable: selects a namespace by its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

STATEFUL_SET = "StatefulSet"
JOB = "Job"


class Presence(Enum):
    """Where an item is rendered: every stack, or exactly where the client listener is secured."""

    ALWAYS = "every stack"
    SECURED = "a stack whose brokers' client listener is secured (SASL_SSL)"

    def expected(self, secured: bool) -> bool:
        """Whether the item must be rendered on a stack so secured."""
        return self is Presence.ALWAYS or secured


ALWAYS, SECURED = Presence.ALWAYS, Presence.SECURED
# An env var's source: a literal value, or the downward API's field at this path.
VALUE = "value"


class SecretRole(Enum):
    """Whose Secret a volume takes, by the name the program gives it after the Kafka cluster."""

    BROKER_TLS = "the brokers' TLS Secret (<cluster>-tls)"
    USER = "a Kafka user's Secret (<cluster>-user-<user>)"


@dataclass(frozen=True)
class SecretSource:
    """A Secret a volume takes (a `secret` volume's, or one source of a projected one)."""

    role: SecretRole
    keys: frozenset[str] | None = None  # None: every key of the Secret


@dataclass(frozen=True)
class Volume:
    """A pod volume: its source kind, as the pod spec's key names it, and the Secrets it takes
    (a projected volume: only Secrets, each of a declared role)."""

    source: str  # emptyDir | configMap | secret | projected
    presence: Presence = ALWAYS
    secrets: tuple[SecretSource, ...] = ()

    @property
    def key_material(self) -> bool:
        """Whether it holds what only the brokers may: their private key (the whole TLS Secret)
        or every user's password (a projection of the users' Secrets)."""
        return any(
            (s.role is SecretRole.BROKER_TLS and s.keys is None)
            or (s.role is SecretRole.USER and self.source == "projected")
            for s in self.secrets
        )


@dataclass(frozen=True)
class Mount:
    """Where a container mounts one of its pod's volumes (or claims)."""

    path: str
    presence: Presence = ALWAYS


class PeerKind(Enum):
    """What a NetworkPolicy peer of a workload selects, as the program spells it."""

    BROKERS = "the brokers' pods (podSelector: their labels)"
    KAFKA_CLIENTS = f"the Kafka clients' pods (podSelector: {KAFKA_CLIENT_LABEL})"
    MONITORING = "one namespace by name (namespaceSelector: processor.metricsNamespace)"
    CLUSTER_DNS = f"the cluster DNS ({DNS_NAMESPACE} pods labelled {DNS_POD_LABELS})"


@dataclass(frozen=True)
class Peer:
    """A peer a workload's NetworkPolicy allows, with the (protocol, port)s it allows it."""

    kind: PeerKind
    ports: frozenset[tuple[str, int]]


def tcp(*ports: int) -> frozenset[tuple[str, int]]:
    """TCP ports of a peer."""
    return frozenset(("TCP", port) for port in ports)


DNS_PEER = Peer(PeerKind.CLUSTER_DNS, frozenset({("UDP", DNS_PORT), ("TCP", DNS_PORT)}))
BROKER_CLIENT_PEER = Peer(PeerKind.BROKERS, tcp(CLIENT_PORT))


@dataclass(frozen=True)
class ContainerShape:
    """One container: what it may carry beyond its command (`container_commands`)."""

    name: str
    init: bool = False
    presence: Presence = ALWAYS
    # name -> VALUE, or the downward API field path it comes from
    env: Mapping[str, str] = field(default_factory=dict)
    # name -> containerPort
    ports: Mapping[str, int] = field(default_factory=dict)
    # volume (or claim) name -> mount
    mounts: Mapping[str, Mount] = field(default_factory=dict)

    @property
    def image_setting(self) -> str:
        """The stack setting its image comes from (`container_commands.IMAGE_SOURCES`)."""
        return IMAGE_SOURCES[self.name]

    @property
    def list_name(self) -> str:
        """The pod spec's list it belongs in."""
        return "initContainers" if self.init else "containers"


@dataclass(frozen=True)
class WorkloadShape:
    """One workload the program deploys (per Kafka cluster, or per pair side for the processor)."""

    role: str  # how messages name it
    kind: str
    why: str  # why it is this kind: what a finding on its kind says
    # The container that makes a pod template this workload (its name is the contract's).
    anchor: str
    containers: tuple[ContainerShape, ...]
    volumes: Mapping[str, Volume]
    claims: frozenset[str] = frozenset()
    # Whether its pods run as a service account of the workload's own name (else the
    # namespace's default); either way without a token (`automountServiceAccountToken: false`).
    own_service_account: bool = False
    presence: Presence = ALWAYS
    # The peers its pods' NetworkPolicies allow in and out (nothing else: default deny).
    ingress: tuple[Peer, ...] = ()
    egress: tuple[Peer, ...] = (BROKER_CLIENT_PEER, DNS_PEER)

    def container(self, name: str) -> ContainerShape | None:
        """The declared container of that name, if any."""
        return next((c for c in self.containers if c.name == name), None)


T = TypeVar("T")


def _frozen(mapping: Mapping[str, T]) -> Mapping[str, T]:
    """A read-only copy: the declaration is shared by every import."""
    return MappingProxyType(dict(mapping))


_TMP = {"tmp": Mount(STATE_DIR)}
# A client's own user's Secret (which user: `secret-mounts`), and the CA alone of the brokers' TLS.
_CLIENT_VOLUMES = {
    "kafka-user": Volume("secret", SECURED, (SecretSource(SecretRole.USER),)),
    "kafka-ca": Volume(
        "secret", SECURED, (SecretSource(SecretRole.BROKER_TLS, frozenset({TLS_CA_FILE})),)
    ),
}
# Every user's password, one file per user: the brokers format their storage with them, and
# the reconciler (which may set any password) creates the users.
_PASSWORDS = Volume(
    "projected", SECURED, (SecretSource(SecretRole.USER, frozenset({PASSWORD_KEY})),)
)
_CLIENT_MOUNTS = {"kafka-user": Mount(USER_DIR, SECURED), "kafka-ca": Mount(CA_DIR, SECURED)}
_POD = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
_NODE = {**_POD, "CLUSTER_ID": VALUE, "KAFKA_NODE_ID": POD_INDEX_FIELD, "SERVER_PROPERTIES": VALUE}

BROKERS = WorkloadShape(
    role="the brokers",
    kind=STATEFUL_SET,
    why="a broker's node id is its pod's ordinal and its log is on a claim of its own: stable "
    "pod names and one volume per pod, kept through restarts",
    anchor=KAFKA,
    own_service_account=True,
    ingress=(
        Peer(PeerKind.BROKERS, tcp(CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT)),
        Peer(PeerKind.KAFKA_CLIENTS, tcp(CLIENT_PORT)),
        Peer(PeerKind.MONITORING, tcp(READINESS_PORT)),
    ),
    egress=(Peer(PeerKind.BROKERS, tcp(CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT)), DNS_PEER),
    claims=frozenset({"data"}),
    volumes=_frozen(
        {
            "tmp": Volume("emptyDir"),
            # the brokers' private key and certificate
            "tls": Volume("secret", SECURED, (SecretSource(SecretRole.BROKER_TLS),)),
            "users": _PASSWORDS,
            "bootstrap": Volume("configMap", SECURED),
            "bootstrap-users": _PASSWORDS,
            **_CLIENT_VOLUMES,
        }
    ),
    containers=(
        ContainerShape(
            FORMAT_STORAGE,
            init=True,
            presence=SECURED,
            env=_frozen(_NODE),
            mounts=_frozen(
                {
                    "data": Mount(DATA_DIR),
                    "bootstrap": Mount(BOOTSTRAP_DIR),
                    "users": Mount(USERS_DIR),
                    **_TMP,
                }
            ),
        ),
        ContainerShape(
            KAFKA,
            env=_frozen({**_NODE, "KAFKA_HEAP_OPTS": VALUE}),
            ports=_frozen({"client": CLIENT_PORT, "controller": CONTROLLER_PORT}),
            mounts=_frozen({"data": Mount(DATA_DIR), **_TMP, "tls": Mount(TLS_DIR, SECURED)}),
        ),
        ContainerShape(
            GRANT_ACLS,
            presence=SECURED,
            mounts=_frozen(
                {
                    "tls": Mount(TLS_DIR),
                    **_TMP,
                    "bootstrap-users": Mount(USERS_DIR),
                    "bootstrap": Mount(BOOTSTRAP_DIR),
                }
            ),
        ),
        ContainerShape(
            BROKER_READINESS,
            env=_frozen({"KAFKA_NODE_ID": POD_INDEX_FIELD}),
            ports=_frozen({"readiness": READINESS_PORT}),
            mounts=_frozen({**_CLIENT_MOUNTS, "bootstrap": Mount(BOOTSTRAP_DIR, SECURED)}),
        ),
    ),
)

PROCESSOR_WORKLOAD = WorkloadShape(
    role="the processor",
    kind=STATEFUL_SET,
    why="static group membership needs stable pod names, and local state one claim per pod: a "
    "Deployment's pods get new names and share no volume, so every restart would restore the "
    "whole state from the changelog",
    anchor=PROCESSOR,
    own_service_account=True,
    ingress=(Peer(PeerKind.MONITORING, tcp(HEALTH_PORT)),),
    claims=frozenset({"state"}),
    volumes=_frozen({"config": Volume("configMap"), "tmp": Volume("emptyDir"), **_CLIENT_VOLUMES}),
    containers=(
        ContainerShape(
            PROCESSOR,
            env=_frozen(_POD),
            ports=_frozen({"health": HEALTH_PORT}),
            mounts=_frozen(
                {
                    "state": Mount(PROCESSOR_STATE_DIR),
                    "config": Mount(PROPERTIES_DIR),
                    **_TMP,
                    **_CLIENT_MOUNTS,
                }
            ),
        ),
    ),
)

_RUNS_ONCE = "it runs to completion once per change of what it applies, and is not restarted"
_TOPIC_VOLUMES = {"specs": Volume("configMap"), "tmp": Volume("emptyDir"), **_CLIENT_VOLUMES}
_TOPIC_MOUNTS = {"specs": Mount(SPECS_DIR), **_TMP, **_CLIENT_MOUNTS}

TOPIC_RECONCILER = WorkloadShape(
    role="the topic reconciler",
    kind=JOB,
    why=_RUNS_ONCE,
    anchor=RECONCILE,
    volumes=_frozen({**_TOPIC_VOLUMES, "users": _PASSWORDS}),
    containers=(
        ContainerShape(
            RECONCILE, mounts=_frozen({**_TOPIC_MOUNTS, "users": Mount(USERS_DIR, SECURED)})
        ),
    ),
)

SCRAM_RETIREMENT = WorkloadShape(
    role="the SCRAM retirement",
    kind=JOB,
    why=_RUNS_ONCE,
    anchor=RETIRE,
    presence=SECURED,
    volumes=_frozen(_TOPIC_VOLUMES),
    containers=(ContainerShape(RETIRE, mounts=_frozen(_TOPIC_MOUNTS)),),
)

METADATA_VERSION = WorkloadShape(
    role="the metadata.version finalizer",
    kind=JOB,
    why=_RUNS_ONCE,
    anchor=FINALIZE,
    volumes=_frozen(
        {"tmp": Volume("emptyDir"), "client": Volume("configMap", SECURED), **_CLIENT_VOLUMES}
    ),
    containers=(
        ContainerShape(
            FINALIZE,
            mounts=_frozen({"client": Mount(FEATURES_DIR, SECURED), **_TMP, **_CLIENT_MOUNTS}),
        ),
    ),
)

# The names of the RBAC objects (roles and their bindings) the workloads need: none, as no pod
# mounts a token. A fork whose workload calls the Kubernetes API names them here, with why.
RBAC_NEEDED: tuple[str, ...] = ()

WORKLOADS = (BROKERS, PROCESSOR_WORKLOAD, TOPIC_RECONCILER, SCRAM_RETIREMENT, METADATA_VERSION)


def shape_of(container_names: set[str]) -> WorkloadShape | None:
    """The declared workload a pod template is, by the anchor among its containers' names."""
    found = [shape for shape in WORKLOADS if shape.anchor in container_names]
    return found[0] if len(found) == 1 else None


def key_holders(shape: WorkloadShape) -> tuple[str, ...]:
    """The containers of a workload that mount its key material (`Volume.key_material`), in
    their declared order."""
    return tuple(
        c.name
        for c in shape.containers
        if any(shape.volumes[v].key_material for v in c.mounts if v in shape.volumes)
    )
