"""The rules that span settings: each raises the one error (`setting_error`) that names the setting
to change, its value and what is allowed. The processor judges its properties by the same contract
(`contract/`) at start, and the pack in review."""

from __future__ import annotations

import re

from contract import membership
from contract.container_commands import RELEASE
from contract.credential_values import find_credentials
from contract.images import is_digest_pinned
from contract.java_properties import is_credential_key, is_reference
from contract.kafka_security import owned_by_security, scram_mechanism
from contract.processor_keys import (
    INSTANCE_ID_KEY,
    PAIR_CONTROL_TOPIC_KEY,
    PAIR_SIDE_KEY,
    PROTOCOL_CONSUMER,
    key_problems,
)
from contract.tls_settings import tls_weakenings
from contract.topic_specs import (
    TopicRole,
    TopicSpecError,
)
from infra.metadata_version import image_release, release_order
from infra.processor_properties import processor_properties
from infra.stack_settings import (
    KafkaConfig,
    ProcessorConfig,
    SecurityConfig,
    StackConfig,
    quantity,
    setting_error,
)

# 16 bytes in URL-safe base64 without padding: the last character carries 2 bits, so it is one of
# the 16 whose low 4 bits are zero (Kafka's Uuid.fromString refuses anything else).
_KAFKA_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate(config: StackConfig) -> None:
    """Rules that span settings; each raises the one error that names the setting to change."""
    kafka, topics, processor = config.kafka, config.topics, config.processor
    if kafka.cluster_id and not _KAFKA_CLUSTER_ID.fullmatch(kafka.cluster_id):
        raise setting_error(
            "kafka.clusterId",
            kafka.cluster_id,
            "must be a KRaft cluster id: 22 characters of URL-safe base64 (16 bytes), as "
            "`kafka-storage.sh random-uuid` prints it, or empty to generate one at the first up",
        )
    if config.profile == "prod" and not config.keep_data_on_destroy:
        # The pack cannot see retainOnDelete: only the stack holds prod to it.
        raise setting_error(
            "keepDataOnDestroy",
            config.keep_data_on_destroy,
            "a prod stack keeps its data on destroy: deleting the brokers' and processors' claims "
            "is a separate, deliberate step after `pulumi destroy --run-program "
            "--exclude-protected`: `kubectl delete namespace <namespace>` (docs/operations.md, "
            '"What destroy leaves"). Allowed in prod: true',
        )
    if config.profile == "prod" and kafka.replicas < 3:
        raise setting_error(
            "kafka.replicas",
            kafka.replicas,
            "a prod stack needs at least 3 brokers (replication factor 3, min.insync.replicas 2)",
        )
    if kafka.replicas < 1 or kafka.replicas % 2 == 0:
        raise setting_error(
            "kafka.replicas",
            kafka.replicas,
            "must be odd (1, 3, 5): every node is a KRaft controller and a quorum needs a majority",
        )
    if config.profile == "prod" and kafka.anti_affinity != "required":
        raise setting_error(
            "kafka.antiAffinity", kafka.anti_affinity, "must be required in prod: one broker a node"
        )
    if topics.replication_factor > kafka.replicas:
        raise setting_error(
            "topics.replicationFactor",
            topics.replication_factor,
            f"must be at most kafka.replicas ({kafka.replicas})",
        )
    highest = max(1, topics.replication_factor - 1)
    if not 1 <= topics.min_insync_replicas <= highest:
        raise setting_error(
            "topics.minInsyncReplicas",
            topics.min_insync_replicas,
            f"must be between 1 and {highest} (replicationFactor - 1) "
            "so that producers with acks=all keep writing while one broker rolls",
        )
    roles = [role.value for role in TopicRole]
    for role in topics.configs:
        if role not in roles:
            raise setting_error(
                f"topics.configs.{role}", topics.configs[role], f"roles: {', '.join(roles)}"
            )
    try:
        config.topic_specs  # noqa: B018 - building the specs is the check
    except TopicSpecError as err:
        raise setting_error("topics", "...", str(err)) from err
    if processor.replicas < 1 or processor.replicas > topics.partitions:
        raise setting_error(
            "processor.replicas",
            processor.replicas,
            f"must be between 1 and topics.partitions ({topics.partitions}): "
            "a member beyond the partition count owns nothing",
        )
    if not 0 <= processor.partition <= processor.replicas:
        raise setting_error(
            "processor.partition", processor.partition, f"must be 0..{processor.replicas}"
        )
    if not DNS_LABEL.match(processor.application_id):
        raise setting_error(
            "processor.applicationId", processor.application_id, "must be a DNS label"
        )
    if not DNS_LABEL.match(processor.metrics_namespace):
        raise setting_error(
            "processor.metricsNamespace",
            processor.metrics_namespace,
            "must be the name of the namespace Prometheus scrapes from (a DNS label); only its "
            "pods may reach the processor's health and metrics port",
        )
    for key in ("cpu", "memory", "storage"):
        for section, obj in (("kafka", kafka), ("processor", processor)):
            try:
                quantity(getattr(obj, key))
            except ValueError as err:
                raise setting_error(f"{section}.{key}", getattr(obj, key), str(err)) from err
    _validate_processor_properties(config)
    standby = membership.standby_breach(
        standby_replicas=processor.num_standby_replicas, replicas=processor.replicas
    )
    if standby is not None:
        raise setting_error(
            "processor.numStandbyReplicas", processor.num_standby_replicas, standby.message()
        )
    _validate_security(config)
    _validate_pair_images(processor)
    _validate_images(config)
    _validate_metadata_version(kafka)


# Node settings the cluster component derives from the StatefulSet (identity, quorum, storage).
_NODE_OWNED_KEYS = frozenset(
    {"process.roles", "node.id", "broker.id", "controller.quorum.voters", "log.dirs", "log.dir"}
)


# Contract keys that stack settings render (key -> ProcessorConfig field): a breach of them names
# the setting and its value, not the key.
_STACK_FIELD_OF = {
    "stateful": "stateful",
    "membership.mode": "membership_mode",
    "num.standby.replicas": "num_standby_replicas",
    "replicas": "replicas",
}


def _validate_processor_properties(config: StackConfig) -> None:
    """The properties the program renders pass the contract's rows and membership rules.

    The processor checks the same at start, and the pack in review: a stack that renders
    settings its own processor refuses fails here, at `pulumi up`.
    """
    processor = config.processor
    for key, problem in key_problems(processor.properties):
        raise setting_error(f"processor.properties.{key}", processor.properties[key], problem)
    for key in (PAIR_SIDE_KEY, PAIR_CONTROL_TOPIC_KEY):
        if key in processor.properties:
            raise setting_error(
                f"processor.properties.{key}",
                processor.properties[key],
                f"set processor.pair instead (now {str(processor.pair).lower()}; allowed: true, "
                "false): the program then renders both sides of the pair, each with its own "
                "application id, user and changelog, its pair.side and the pair's control topic; "
                "one deployment cannot be a side on its own",
            )
    protocol = processor.properties.get("consumer.group.protocol", processor.group_protocol)
    if protocol != processor.group_protocol:
        raise setting_error(
            "processor.properties.consumer.group.protocol",
            protocol,
            f"set processor.groupProtocol instead (now {processor.group_protocol}; allowed: "
            "classic, consumer): the program then renders the client settings the protocol "
            "allows and, under consumer, the group's own session and heartbeat",
        )
    rendered = processor_properties(config, bootstrap_servers="", client_security={})
    stateful, mode = processor.stateful, processor.membership_mode
    breaches = [
        *membership.instance_id_breaches(
            stateful=stateful, mode=mode, instance_id=rendered.get(INSTANCE_ID_KEY)
        ),
        *membership.handoff_breaches(
            stateful=stateful,
            mode=mode,
            standby_replicas=processor.num_standby_replicas,
            replicas=processor.replicas,
        ),
        *membership.classic_only_breaches(protocol, processor.properties),
    ]
    brokers = config.broker_configs
    if protocol == PROTOCOL_CONSUMER:
        group = processor.group_configs
        for breach in membership.kip848_bound_breaches(group, brokers):
            raise setting_error(f"kafka.configs.{breach.key}", breach.found, breach.message())
        session = int(group[membership.GROUP_SESSION_TIMEOUT_KEY])
        heartbeat = int(group[membership.GROUP_HEARTBEAT_INTERVAL_KEY])
        (low_key, low), (high_key, high) = membership.KIP848_BOUNDS[
            membership.GROUP_SESSION_TIMEOUT_KEY
        ]
        low, high = int(brokers.get(low_key, low)), int(brokers.get(high_key, high))
    else:
        session = int(rendered["consumer.session.timeout.ms"])
        heartbeat = int(rendered["consumer.heartbeat.interval.ms"])
        low = int(
            brokers.get("group.min.session.timeout.ms", membership.BROKER_MIN_SESSION_TIMEOUT_MS)
        )
        high = int(
            brokers.get("group.max.session.timeout.ms", membership.BROKER_MAX_SESSION_TIMEOUT_MS)
        )
    breaches += membership.session_breaches(
        stateful=stateful,
        mode=mode,
        session_ms=session,
        budget=processor.restart_budget,
        broker_min_ms=low,
        broker_max_ms=high,
    )
    optional = [
        membership.heartbeat_breach(session_ms=session, heartbeat_ms=heartbeat),
        membership.poll_interval_breach(
            session_ms=session, max_poll_ms=int(rendered["consumer.max.poll.interval.ms"])
        ),
    ]
    breaches += [b for b in optional if b is not None]
    for breach in breaches:
        field = _STACK_FIELD_OF.get(breach.key)
        if field is not None:
            alias = ProcessorConfig.model_fields[field].alias
            raise setting_error(f"processor.{alias}", getattr(processor, field), breach.message())
        overridden = breach.key in processor.properties
        fix = "" if overridden else " (computed from the StatefulSet's restart budget)"
        raise setting_error(
            f"processor.properties.{breach.key}",
            processor.properties.get(breach.key, breach.found),
            f"{breach.message()}{fix}",
        )


def _validate_pair_images(processor: ProcessorConfig) -> None:
    """`processor.pairImages` names images of a pair's sides, and only of a pair's."""
    images = processor.pair_images.set_images()
    if images and not processor.pair:
        raise setting_error(
            "processor.pairImages",
            images,
            "allowed only with processor.pair: true (now false): a single deployment runs "
            "processor.image; remove processor.pairImages, or set processor.pair to true",
        )
    for side, image in images.items():
        if not image.strip():
            raise setting_error(
                f"processor.pairImages.{side}",
                image,
                f"must be an image reference; remove the key for side {side} to run "
                "processor.image",
            )


def _validate_metadata_version(kafka: KafkaConfig) -> None:
    """The release the cluster is finalized at after a roll is one the image runs."""
    image = image_release(kafka.image)
    if kafka.metadata_version and not RELEASE.fullmatch(kafka.metadata_version):
        raise setting_error(
            "kafka.metadataVersion",
            kafka.metadata_version,
            "must be an Apache Kafka release as X.Y (4.3), or empty for the image's release",
        )
    if not kafka.metadata_version and image is None:
        raise setting_error(
            "kafka.image",
            kafka.image,
            "its tag names no Apache Kafka release (X.Y.Z), so the program cannot tell which "
            "metadata.version to finalize after a roll: tag it with its release, or set "
            "kafka.metadataVersion to the release it runs (X.Y)",
        )
    if (
        kafka.metadata_version
        and image is not None
        and release_order(kafka.metadata_version) > release_order(image)
    ):
        raise setting_error(
            "kafka.metadataVersion",
            kafka.metadata_version,
            f"must be at most the release of kafka.image ({image}): a broker cannot run at a "
            "newer release's metadata.version; leave it empty to follow the image",
        )


def _validate_images(config: StackConfig) -> None:
    """Prod runs images pinned by digest: a tag can move, and a roll would then mix versions."""
    if config.profile != "prod":
        return
    images = {
        "kafka.image": config.kafka.image,
        "processor.image": config.processor.image,
        **{
            f"processor.pairImages.{side}": image
            for side, image in config.processor.pair_images.set_images().items()
        },
    }
    for key, image in images.items():
        if not is_digest_pinned(image):
            raise setting_error(
                key,
                image,
                "a prod stack runs images pinned by digest, image[:tag]@sha256:<64 hex digits> "
                "(the digest `docker push` or `docker buildx imagetools inspect` prints); a tag "
                "can be pushed again, and a rolling restart would then run two versions",
            )


def _validate_ca_rollover(security: SecurityConfig) -> None:
    """The generated CAs form one of a rollover's states: one CA, or two consecutive ones."""
    generation, trusted = security.ca_generation, security.trusted_cas
    if generation < 1:
        raise setting_error("security.caGeneration", generation, "must be at least 1")
    if security.certificates == "cert-manager" and (generation, trusted) != (1, (1,)):
        raise setting_error(
            "security.caGeneration",
            generation,
            "applies to the generated CA; with certificates: cert-manager the issuer's CA is "
            'rolled over in cert-manager (docs/security.md, "Certificates"); remove caGeneration '
            "and trustedCaGenerations",
        )
    if generation not in trusted:
        raise setting_error(
            "security.trustedCaGenerations",
            list(security.trusted_ca_generations),
            f"must hold caGeneration ({generation}): the brokers would serve a certificate "
            "that no trust store accepts",
        )
    if trusted[0] < 1 or len(trusted) > 2 or trusted[-1] - trusted[0] > 1:
        raise setting_error(
            "security.trustedCaGenerations",
            list(security.trusted_ca_generations),
            f"must be [{generation}] or two consecutive generations with it, [{generation - 1}, "
            f"{generation}] or [{generation}, {generation + 1}]: a rollover moves one "
            "generation at a time",
        )


def _validate_security(config: StackConfig) -> None:
    security = config.security
    if config.profile == "prod" and not security.secured:
        raise setting_error(
            "security.clientListener",
            security.client_listener,
            "a prod stack needs SASL_SSL (TLS on every listener, SCRAM users, ACLs that deny "
            "by default); PLAINTEXT lets every pod that reaches the brokers read and write "
            "every topic and is for a dev cluster on a laptop; allowed here: SASL_SSL",
        )
    for key, value in config.kafka.configs.items():
        owner = (
            "the listeners' security, from security.clientListener (contract/kafka_security.py)"
            if owned_by_security(key)
            else "the cluster's layout (infra/kafka_cluster.py)"
            if key in _NODE_OWNED_KEYS
            else None
        )
        if owner is not None:
            raise setting_error(
                f"kafka.configs.{key}",
                "****" if is_credential_key(key) else value,
                f"set by the program from {owner}; remove it. Allowed in kafka.configs: broker "
                "settings outside listeners, TLS, SASL, authorization and the node layout",
            )
    for key, value in config.processor.properties.items():
        for weakening in tls_weakenings({key: value}):
            raise setting_error(
                f"processor.properties.{key}",
                value,
                f"must be {weakening.required}: {weakening.why} (the processor refuses it at "
                "start); remove it",
            )
    if security.certificates == "cert-manager" and not security.issuer_name:
        raise setting_error(
            "security.issuerName",
            security.issuer_name,
            "certificates from cert-manager need the name of a CA issuer (its Secrets carry "
            "ca.crt, the clients' trust store); allowed: an Issuer or ClusterIssuer name",
        )
    if (
        config.profile == "prod"
        and security.certificates == "cert-manager"
        and security.issuer_kind == "ClusterIssuer"
    ):
        raise setting_error(
            "security.issuerKind",
            security.issuer_kind,
            "a prod stack needs a namespaced Issuer: a ClusterIssuer signs a CN=kafka-broker "
            "certificate for whoever asks in any namespace, and every such certificate is a "
            "super user of these brokers (super.users=User:CN=kafka-broker); allowed here: Issuer",
        )
    _validate_ca_rollover(security)
    if security.credentials_revision < 1:
        raise setting_error(
            "security.credentialsRevision", security.credentials_revision, "must be at least 1"
        )
    for key, value in config.processor.properties.items():
        # The revision picks the mechanism, so a rotation never replaces a password in use; a
        # pinned one would leave the processor with a retired credential after every second one.
        if security.secured and _names_client_setting(key, "sasl.mechanism"):
            raise setting_error(
                f"processor.properties.{key}",
                value,
                "set by the program from security.credentialsRevision "
                f"({scram_mechanism(1)} on odd revisions, {scram_mechanism(2)} on even ones: "
                "the gapless rotation in docs/security.md); remove it",
            )
        # The listener decides how a client talks to it: any other protocol fails at the first
        # connection, after the roll has started.
        if _names_client_setting(key, "security.protocol") and value != security.client_listener:
            raise setting_error(
                f"processor.properties.{key}",
                value,
                f"the brokers' client listener speaks {security.client_listener} "
                "(security.clientListener), and the program sets the processor's "
                "security.protocol from it; remove it. Allowed: "
                f"{security.client_listener}",
            )
    # A credential in Pulumi.<stack>.yaml is in git and in every preview: the processor reads
    # its secrets from its environment (`${env:NAME}`, from a Secret), never from the file.
    for key, value in config.processor.properties.items():
        if is_credential_key(key) and not is_reference(value):
            raise setting_error(
                f"processor.properties.{key}",
                "****",
                "a credential never goes into plain stack config; on a SASL_SSL cluster the "
                "program creates the processor's user and password (a Secret); your own "
                "secret goes into a Kubernetes Secret, mounted and referenced as "
                "${dir:DIRECTORY:FILE}",
            )
        # Also inside a value: `-Djavax.net.ssl.keyStorePassword=...` in JVM options.
        inside = find_credentials(value)
        if inside:
            raise setting_error(
                f"processor.properties.{key}",
                "****",
                f"holds a credential in clear in its {inside[0].key} (value not shown); a "
                "credential never goes into plain stack config: put it into a Kubernetes Secret, "
                f"mount it and write {inside[0].key}=${{dir:DIRECTORY:FILE}} in the value (the "
                "processor resolves a reference anywhere in a value)",
            )


def _names_client_setting(key: str, setting: str) -> bool:
    """Whether a processor property is `setting`, for all the processor's clients or for one
    (`consumer.sasl.mechanism`)."""
    return key == setting or key.endswith(f".{setting}")
