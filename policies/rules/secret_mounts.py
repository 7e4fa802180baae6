"""Each workload reads only its own Kafka credentials: its user's Secret and the CA of the brokers'
TLS Secret. The brokers alone read their private key and, to format their storage with the SCRAM
users, every user's password: in a broker's pod, only the containers the workload declaration
gives a mount of that key material (`contract.workload_shapes.key_holders`: the broker, its
format step, the container that grants the bootstrap ACLs), by name, never by an image or an env
var a change can give any container; any other container (the readiness sidecar) is held to the
workloads' rule. Which images they run is `image-sources`', which keys of which Secret a volume
takes `workload-shapes`'.

The Secrets are known the way the Pulumi program names them after the Kafka cluster (its
StatefulSet `<cluster>`): `<cluster>-tls` (cert-manager's layout: `tls.key`, `tls.crt`,
`ca.crt`) and `<cluster>-user-<user>`; any other Secret the brokers mount counts as theirs too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs

from contract.workload_shapes import BROKERS, SecretRole, key_holders

from .acls import acls_of
from .config import MANDATORY, stack_rule
from .manifests import (
    SECRET,
    all_containers,
    get,
    items,
    label,
    name_of,
    namespace_of,
    pod_spec,
)
from .messages import violation
from .stack_view import StackView

CA_KEY = "ca.crt"
# AlterUserScramCredentials (and CreateAcls) need ALTER on the cluster: a user holding it may
# set any user's password, so reading the passwords gives it nothing it does not have.
CREDENTIAL_ADMIN_OPERATIONS = frozenset({"ALTER", "ALL"})

Finding = tuple[str, str | None]
KEY_HOLDERS = key_holders(BROKERS)
_HOLDERS = "the broker's own containers (" + ", ".join(KEY_HOLDERS) + ")"


@dataclass(frozen=True)
class SecretUse:
    """One place a pod takes keys of a Secret from: a volume, a projection, an env var."""

    secret: str
    keys: frozenset[str] | None  # None: every key of the Secret
    where: str  # how a message names the place
    volume: str | None = None  # the pod volume it comes from (None: a container's env)
    container: str | None = None  # the container whose env takes it (None: a volume)

    def reaches(self, container: Mapping[str, Any]) -> bool:
        """Whether `container` reads it: mounts its volume, or takes it into its env."""
        if self.volume is not None:
            mounted = {get(m, "name") for m in items(container, "volumeMounts")}
            return self.volume in mounted
        return self.container == container.get("name", "?")


def secret_uses(spec: Mapping[str, Any] | None) -> list[SecretUse]:
    """Every Secret a pod spec reads, with the keys it takes (volumes, projections and env)."""
    uses = []
    for volume in items(spec, "volumes"):
        name = get(volume, "name", default="?")
        secret = get(volume, "secret")
        if secret is not None:
            uses.append(
                SecretUse(
                    str(get(secret, "secretName", default="")),
                    _keys(secret),
                    f"volume {name}",
                    volume=str(name),
                )
            )
        for source in items(volume, "projected", "sources"):
            projected = get(source, "secret")
            if projected is not None:
                uses.append(
                    SecretUse(
                        str(get(projected, "name", default="")),
                        _keys(projected),
                        f"projected volume {name}",
                        volume=str(name),
                    )
                )
    for container in all_containers(spec):
        cname = container.get("name", "?")
        for var in items(container, "env"):
            ref = get(var, "valueFrom", "secretKeyRef")
            if ref is not None:
                uses.append(
                    SecretUse(
                        str(get(ref, "name", default="")),
                        frozenset({str(get(ref, "key", default=""))}),
                        f"container {cname} env {get(var, 'name', default='?')}",
                        container=cname,
                    )
                )
        for source in items(container, "envFrom"):
            ref = get(source, "secretRef")
            if ref is not None:
                uses.append(
                    SecretUse(
                        str(get(ref, "name", default="")),
                        None,
                        f"container {cname} envFrom",
                        container=cname,
                    )
                )
    return uses


def _keys(source: Mapping[str, Any]) -> frozenset[str] | None:
    """The keys a secret volume or projection takes: its `items`, or (none listed) every key."""
    listed = items(source, "items")
    return frozenset(str(get(i, "key", default="")) for i in listed) if listed else None


class KafkaSecrets:
    """The Kafka clusters' Secrets in a stack: whose password each user Secret holds, and which
    Secrets hold the brokers' key material."""

    def __init__(self, view: StackView) -> None:
        self._declared = {
            (namespace_of(r.props), name_of(r.props)): r for r in view.of_type(SECRET)
        }
        self._clusters: dict[str, set[str]] = {}
        broker_mounted: set[tuple[str, str]] = set()
        for broker in view.kafka_clusters():
            namespace = namespace_of(broker.props)
            self._clusters.setdefault(namespace, set()).add(name_of(broker.props))
            spec = pod_spec(broker.resource_type, broker.props)
            broker_mounted |= {(namespace, use.secret) for use in secret_uses(spec)}
        self._broker_secrets = {
            (namespace, f"{cluster}-tls")
            for namespace, clusters in self._clusters.items()
            for cluster in clusters
        } | {key for key in broker_mounted if self.user_of(*key) is None}

    def cluster_of(self, namespace: str, secret: str) -> str | None:
        """The Kafka cluster a Secret is named after (`<cluster>-tls`, `<cluster>-user-<user>`)."""
        for cluster in sorted(self._clusters.get(namespace, ()), key=len, reverse=True):
            if secret == f"{cluster}-tls" or secret.startswith(f"{cluster}-user-"):
                return cluster
        return None

    def user_of(self, namespace: str, secret: str) -> str | None:
        """The SCRAM user whose password a Secret holds (`<cluster>-user-<user>`), else None."""
        for cluster in self._clusters.get(namespace, ()):
            prefix = f"{cluster}-user-"
            if secret.startswith(prefix) and len(secret) > len(prefix):
                return secret[len(prefix) :]
        return None

    def role_of(self, namespace: str, secret: str) -> SecretRole | None:
        """Whose Secret it is by its name (`contract.workload_shapes.SecretRole`), if a Kafka
        cluster's of the namespace."""
        if self.user_of(namespace, secret) is not None:
            return SecretRole.USER
        if any(secret == f"{cluster}-tls" for cluster in self._clusters.get(namespace, ())):
            return SecretRole.BROKER_TLS
        return None

    def user_secret(self, namespace: str, user: str) -> str:
        """The name of a user's Secret, as a message suggests it."""
        clusters = sorted(self._clusters.get(namespace, ())) or ["kafka"]
        return f"{clusters[0]}-user-{user}"

    def is_broker_secret(self, namespace: str, secret: str) -> bool:
        """Whether a Secret is the brokers' (their TLS Secret, or one they mount)."""
        return (namespace, secret) in self._broker_secrets

    def keys_of(self, namespace: str, secret: str) -> list[str]:
        """The keys of a Secret the stack declares (empty when it does not)."""
        declared = self._declared.get((namespace, secret))
        if declared is None:
            return []
        keys = {
            *get(declared.props, "data", default={}),
            *get(declared.props, "stringData", default={}),
        }
        return sorted(map(str, keys))


def credential_admins(view: StackView) -> set[str]:
    """Users that may set any user's SCRAM credential: ALTER (or ALL) on the cluster."""
    admins = set()
    for resource in view.resources:
        acls = acls_of(resource)
        if not isinstance(acls, list):
            continue
        for acl in acls:
            if acl.resource_type == "CLUSTER" and acl.operation in CREDENTIAL_ADMIN_OPERATIONS:
                admins.add(acl.principal.removeprefix("User:"))
    return admins


def _readers(
    workload: PolicyResource, uses: list[SecretUse], broker: bool
) -> Iterator[tuple[str, list[SecretUse]]]:
    """Who in a workload's pods is held to the rule, with the Secret keys each reads.

    A workload's whole pod is one reader. In a broker's pod, each container is one but the
    broker's own (`KEY_HOLDERS`), which hold its key and, for the format, every password.
    """
    if not broker:
        yield "", uses
        return
    for container in all_containers(pod_spec(workload.resource_type, workload.props)):
        name = container.get("name", "?")
        if name not in KEY_HOLDERS:
            yield (
                f"container {name} (not one of {_HOLDERS}): ",
                [use for use in uses if use.reaches(container)],
            )


def check_secret_mounts(args: StackValidationArgs, _: Mapping[str, Any]) -> Iterator[Finding]:
    """Outside the brokers' own image: only the reader's own user's Secret and `ca.crt` of the
    TLS one."""
    view = StackView(args.resources)
    secrets = KafkaSecrets(view)
    admins = credential_admins(view)
    brokers = {id(b) for b in view.kafka_clusters()}
    for workload in view.workloads():
        namespace = namespace_of(workload.props)
        subject = label(workload.resource_type, workload.props)
        own = view.kafka_user(workload)
        uses = secret_uses(pod_spec(workload.resource_type, workload.props))
        for reader, read in _readers(workload, uses, id(workload) in brokers):
            for message in _findings(subject, reader, read, own, namespace, secrets, admins):
                yield message, workload.urn
        if id(workload) in brokers:
            for message in _other_clusters(workload, uses, namespace, secrets):
                yield message, workload.urn


def _other_clusters(
    broker: PolicyResource, uses: list[SecretUse], namespace: str, secrets: KafkaSecrets
) -> Iterator[str]:
    """A broker's own containers hold its own cluster's key and passwords, never another's:
    a workload is a broker by what it runs, which any new StatefulSet can run."""
    own = name_of(broker.props)
    subject = label(broker.resource_type, broker.props)
    for use in uses:
        cluster = secrets.cluster_of(namespace, use.secret)
        if cluster is not None and cluster != own:
            yield violation(
                subject,
                use.where,
                f"Secret {use.secret}, of Kafka cluster {cluster}",
                f"only the Secrets of its own cluster ({own}-tls, {own}-user-<user>)",
                f"remove it: with {cluster}'s key a pod poses as one of {cluster}'s brokers, a "
                "super user of that cluster",
            )


def _findings(
    subject: str,
    reader: str,
    uses: Sequence[SecretUse],
    own: str | None,
    namespace: str,
    secrets: KafkaSecrets,
    admins: set[str],
) -> Iterator[str]:
    """One message per Secret key a reader takes beyond its own password and the CA."""
    for use in uses:
        user = secrets.user_of(namespace, use.secret)
        if user is not None and user != own and own not in admins:
            yield violation(
                subject,
                reader + use.where,
                f"Secret {use.secret} (user {user}'s password)",
                "only the Secret of the Kafka user it connects as"
                + (f" ({own}: {secrets.user_secret(namespace, own)})" if own else ""),
                f"mount only its own user's Secret: with {user}'s password this "
                f"workload can act as {user}, with every ACL {user} holds (only a user "
                "with ALTER on the cluster, which may set any password, may read them)",
            )
        elif user is None and secrets.is_broker_secret(namespace, use.secret):
            if use.keys is None:
                extra = secrets.keys_of(namespace, use.secret) or ["every key"]
            else:
                extra = sorted(use.keys - {CA_KEY})
            if not extra:
                continue
            whole = "the whole Secret" if use.keys is None else "keys"
            yield violation(
                subject,
                reader + use.where,
                f"Secret {use.secret}, {whole} ({', '.join(extra)})",
                f"only {CA_KEY} of the brokers' TLS Secret",
                f"take only the CA: secret.items: [{{key: {CA_KEY}, path: {CA_KEY}}}]; "
                "the other keys are the brokers' private key, with which anyone can "
                "pose as a broker (a super user) or read the cluster's TLS traffic; only "
                f"{_HOLDERS} may hold it (a sidecar connects as a SCRAM user of its own)",
            )


POLICIES = [
    stack_rule(
        name="secret-mounts-least-privilege",
        description=(
            "Each workload mounts only its own Kafka user's Secret and only ca.crt of the "
            "brokers' TLS Secret: the brokers alone hold their private key and (to format their "
            "storage) every user's password, and in a broker's pod only the broker's own "
            "containers (those contract/workload_shapes.py gives a mount of them: "
            "format-storage, kafka, grant-acls; any other container is held to the same rule); "
            "a user that may set passwords (ALTER on the cluster) may read them."
        ),
        level=MANDATORY,
        check=check_secret_mounts,
    ),
]
