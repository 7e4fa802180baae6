"""Rules for the brokers' security: encrypted listeners, and an authorizer that denies by default.

Both read the broker configs of the Kafka StatefulSet's rendered server.properties (its broker
container's `SERVER_PROPERTIES`): `listeners`, `listener.security.protocol.map`,
`inter.broker.listener.name`, `controller.listener.names`, `sasl.enabled.mechanisms` (and its
`listener.name.` form), `authorizer.class.name`, `allow.everyone.if.no.acl.found`,
`super.users`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs

from contract.kafka_security import BROKER_PRINCIPAL, SCRAM_MECHANISMS
from contract.tls_settings import tls_weakenings

from .config import MANDATORY, Threshold, resource_rule
from .kafka_cluster import SERVER_PROPERTIES, broker_configs, is_kafka_statefulset
from .manifests import fmt, label
from .messages import violation

# TLS on the wire: the only protocols a listener between brokers or controllers may use.
ENCRYPTED_PROTOCOLS = ("SSL", "SASL_SSL")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"

_CLIENT_FIX = (
    "map it to SASL_SSL (TLS and SCRAM; the stack setting security.clientListener: "
    "SASL_SSL renders CLIENT:SASL_SSL), or require client certificates on an SSL listener: on "
    "PLAINTEXT any pod that reaches the port reads and writes every topic without proving who "
    "it is, SASL_PLAINTEXT authenticates but sends every record in clear, and SSL without "
    "client authentication encrypts for anyone"
)
_BROKER_FIX = (
    "map it to SSL with ssl.client.auth=required, or SASL_SSL (the stack setting "
    "security.clientListener: SASL_SSL renders INTERNAL:SSL,CONTROLLER:SSL): replication carries "
    "every record and the controller listener the cluster's metadata, readable and forgeable by "
    "anyone on the network otherwise"
)


def listener_ports(listeners: str) -> dict[str, int | None]:
    """`CLIENT://:9092,INTERNAL://:9094` -> {CLIENT: 9092, INTERNAL: 9094} (names upper-cased)."""
    ports: dict[str, int | None] = {}
    for entry in listeners.split(","):
        name, separator, address = entry.strip().partition("://")
        if separator:
            port = address.rpartition(":")[2]
            ports[name.upper()] = int(port) if port.isdigit() else None
    return ports


def protocol_map(text: str) -> dict[str, str]:
    """`CLIENT:SASL_SSL,INTERNAL:SSL` -> {CLIENT: SASL_SSL, INTERNAL: SSL} (upper-cased)."""
    protocols: dict[str, str] = {}
    for entry in text.split(","):
        name, separator, protocol = entry.partition(":")
        if separator:
            protocols[name.strip().upper()] = protocol.strip().upper()
    return protocols


def _protocol(protocols: Mapping[str, str], listener: str) -> str:
    """A listener's protocol as a message shows it; a listener the map lacks never starts."""
    return protocols.get(listener, "absent from listener.security.protocol.map")


def _client_auth(configs: Mapping[str, str], listener: str) -> str:
    """`ssl.client.auth` as the listener applies it (its `listener.name.` override first)."""
    scoped = f"listener.name.{listener.lower()}.ssl.client.auth"
    return configs.get(scoped, configs["ssl.client.auth"]).strip().lower()


def check_listener_encryption(
    args: ResourceValidationArgs, cfg: Mapping[str, Any]
) -> Iterator[str]:
    """Every listener TLS with authenticated peers, and no setting that weakens the TLS."""
    if not is_kafka_statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    configs = broker_configs(args.resource_type, args.props)
    protocols = protocol_map(configs["listener.security.protocol.map"])
    port = cfg["clientPort"]
    ports = listener_ports(configs["listeners"])
    on_client_port = [n for n, p in ports.items() if p == port]
    if not on_client_port:
        yield violation(
            subject,
            f"the listener on the client port {fmt(port)} (listeners, {SERVER_PROPERTIES})",
            f"absent (listeners {configs['listeners']})",
            f"a SASL_SSL listener on port {fmt(port)}",
            "bind the client listener to the client port, or set this rule's clientPort in "
            "policies/config.<stack>.json to the port the clients use, so it is checked",
        )
    # Each listener once, by the role that explains best why it must be secured.
    roles: dict[str, tuple[str, str, str]] = {
        name: (f"client listener {name} on port {fmt(port)}", "listeners", _CLIENT_FIX)
        for name in on_client_port
    }
    inter_broker = configs.get("inter.broker.listener.name", "").strip().upper()
    if inter_broker:
        roles.setdefault(
            inter_broker,
            (
                f"inter-broker listener {inter_broker}",
                "inter.broker.listener.name",
                _BROKER_FIX,
            ),
        )
    else:
        # Without a listener name the brokers talk over the listener named after this protocol.
        key = "security.inter.broker.protocol"
        protocol = configs[key].strip().upper()
        if protocol not in ENCRYPTED_PROTOCOLS:
            yield violation(
                subject,
                f"broker config {key} ({SERVER_PROPERTIES})",
                protocol,
                " or ".join(ENCRYPTED_PROTOCOLS),
                _BROKER_FIX,
            )
    for name in configs.get("controller.listener.names", "").split(","):
        if name.strip():
            roles.setdefault(
                name.strip().upper(),
                (
                    f"controller listener {name.strip().upper()}",
                    "controller.listener.names",
                    _BROKER_FIX,
                ),
            )
    for name, listener_port in ports.items():
        roles.setdefault(
            name,
            (
                f"listener {name} on port {fmt(listener_port)}, beside the client, "
                "inter-broker and controller listeners",
                "listeners",
                "remove the listener, or secure it like the client listener: " + _CLIENT_FIX,
            ),
        )
    for name, (role, env, fix) in roles.items():
        protocol = _protocol(protocols, name)
        client_auth = _client_auth(configs, name)
        if protocol == "SASL_SSL" or (protocol == "SSL" and client_auth == "required"):
            continue
        auth_key = f"listener.name.{name.lower()}.ssl.client.auth"
        yield violation(
            subject,
            f"{role} ({env}, listener.security.protocol.map, {SERVER_PROPERTIES})",
            f"SSL with ssl.client.auth={client_auth}" if protocol == "SSL" else protocol,
            f"SASL_SSL, or SSL with {auth_key}=required ({SERVER_PROPERTIES})",
            fix,
        )
    for name in on_client_port:
        if protocols.get(name) == "SASL_SSL":
            yield from _mechanism_findings(subject, configs, name)
    for weakening in tls_weakenings(configs):
        yield violation(
            subject,
            f"broker config {weakening.key} ({SERVER_PROPERTIES})",
            weakening.value or "empty",
            weakening.required,
            f"remove {weakening.key} from the brokers' settings: {weakening.why}",
        )


def _mechanism_findings(subject: str, configs: Mapping[str, str], listener: str) -> Iterator[str]:
    """The SASL_SSL client listener offers SCRAM-SHA-256 and/or SCRAM-SHA-512, nothing else
    (unset, Kafka offers GSSAPI)."""
    scoped = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
    key = scoped if scoped in configs else "sasl.enabled.mechanisms"
    mechanisms = [m.strip().upper() for m in configs[key].split(",") if m.strip()]
    if mechanisms and all(m in SCRAM_MECHANISMS for m in mechanisms):
        return
    others = [m for m in mechanisms if m not in SCRAM_MECHANISMS]
    yield violation(
        subject,
        f"client listener {listener}'s SASL mechanisms, broker config {key} ({SERVER_PROPERTIES})",
        configs[key] or "empty",
        f"{' and/or '.join(SCRAM_MECHANISMS)}, nothing else",
        f"set {scoped}={','.join(SCRAM_MECHANISMS)} "
        f"(contract/kafka_security.py renders it), without "
        f"{', '.join(others) or 'an empty list'}: the workloads are SCRAM users "
        "(contract/acl_specs.py), SCRAM never sends a password to the broker, and a "
        'rotation moves them from one SCRAM mechanism to the other (docs/security.md, "Rotated.")',
    )


def check_authorizer(args: ResourceValidationArgs, cfg: Mapping[str, Any]) -> Iterator[str]:
    """StandardAuthorizer where required, denying what no ACL allows, the brokers super users."""
    if not is_kafka_statefulset(args):
        return
    subject = label(args.resource_type, args.props)
    configs = broker_configs(args.resource_type, args.props)
    authorizer = configs["authorizer.class.name"].strip()
    if cfg["requireAuthorizer"] and authorizer != STANDARD_AUTHORIZER:
        yield violation(
            subject,
            f"broker config authorizer.class.name ({SERVER_PROPERTIES})",
            authorizer or "absent (no authorization)",
            STANDARD_AUTHORIZER,
            f"set authorizer.class.name={STANDARD_AUTHORIZER} (the stack setting "
            "security.clientListener: SASL_SSL renders it, and the topic Job reconciles the "
            "ACLs of contract/acl_specs.py): without an authorizer every client that "
            "connects may read, write and delete every topic, group and transactional id",
        )
    if not authorizer:
        return  # nothing is authorised, so the two settings below have no effect
    allow_everyone = configs["allow.everyone.if.no.acl.found"]
    if allow_everyone.strip().lower() == "true":
        yield violation(
            subject,
            f"broker config allow.everyone.if.no.acl.found ({SERVER_PROPERTIES})",
            allow_everyone,
            "false (deny by default)",
            "set allow.everyone.if.no.acl.found=false (Kafka's default): with true every "
            "resource no ACL names (a new topic, any consumer group) is open to every client, "
            "unauthenticated ones included",
        )
    yield from _super_user_findings(subject, configs["super.users"], cfg)


def _super_user_findings(subject: str, value: str, cfg: Mapping[str, Any]) -> Iterator[str]:
    """super.users holds the brokers' own principal(s) (threshold superUsers) and nothing else."""
    allowed = [str(principal).strip() for principal in cfg["superUsers"]]
    setting = f"broker config super.users ({SERVER_PROPERTIES})"
    required = (
        f"only {', '.join(allowed) or 'no principal'} (the brokers' own principal, "
        f"this rule's superUsers), never {ANONYMOUS} or a wildcard"
    )
    fix = (
        f"set super.users={';'.join(allowed)} (the subject of the broker certificate, as "
        "contract/kafka_security.py renders it)"
    )
    super_users = [u.strip() for u in value.split(";") if u.strip()]
    if cfg["requireAuthorizer"] and not super_users:
        yield violation(
            subject,
            setting,
            "absent",
            required,
            f"{fix}: without the brokers among the super users replication and the controller "
            "quorum are denied",
        )
    for user in super_users:
        # Every entry bypasses every ACL: each one outside the brokers' own is its own finding.
        if user == ANONYMOUS:
            what, who = "every client that connects without credentials", "every such client"
        elif "*" in user:
            what, who = "a wildcard, every authenticated client", "every client"
        elif user not in allowed:
            what, who = "not a broker principal", f"whoever holds {user}'s credentials"
        else:
            continue
        yield violation(
            subject,
            f"{setting} entry {user}",
            f"{what} (super.users is {value})",
            required,
            f"{fix}, without {user}: a super user bypasses every ACL, so {who} may read, write "
            "and delete every topic and group and grant itself any ACL. Give a workload the "
            "ACLs it needs in pipeline_users (contract/acl_specs.py) instead; a further "
            "broker identity goes into this rule's superUsers in policies/config.<stack>.json",
        )


POLICIES = [
    resource_rule(
        name="kafka-listener-encryption",
        description=(
            "The Kafka listener on the client port is SASL_SSL (or SSL with client certificates "
            "required), and the inter-broker and controller listeners use TLS (SSL or SASL_SSL): "
            "no record, credential or metadata crosses the network in clear, and no client "
            "connects without proving who it is."
        ),
        level=MANDATORY,
        check=check_listener_encryption,
        thresholds=[
            Threshold("clientPort", "integer", 9092, "The port the clients connect to.", 1)
        ],
    ),
    resource_rule(
        name="kafka-authorizer",
        description=(
            "Where required (prod), the brokers run StandardAuthorizer with super users; "
            "wherever an authorizer runs, allow.everyone.if.no.acl.found is false (deny by "
            "default) and every super user is one of the brokers' own principals (superUsers), "
            "never User:ANONYMOUS, a wildcard or a workload's user."
        ),
        level=MANDATORY,
        check=check_authorizer,
        thresholds=[
            Threshold(
                "requireAuthorizer",
                "boolean",
                True,
                "Require StandardAuthorizer and super.users on this stack.",
            ),
            Threshold(
                "superUsers",
                "array",
                [BROKER_PRINCIPAL],
                "The brokers' own principals (their certificate subjects): the only entries "
                "super.users may hold.",
                items="string",
            ),
        ],
    ),
]
