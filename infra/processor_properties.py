"""The processor's properties file (`processor.properties`), rendered from the stack config.

The layout follows Kafka Streams: common keys plain, consumer settings prefixed `consumer.`,
producer settings `producer.`, Spark settings under their own `spark.` names. `${env:NAME}` is
Kafka's EnvVarConfigProvider syntax, resolved by the processor from the pod's environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from contract.processor_keys import (
    CLASSIC_PROTOCOL_ONLY,
    CRASH_SAFE_TRANSACTION_TIMEOUT_MS,
    DEFAULTS,
    INSTANCE_ID_KEY,
    PAIR_CONTROL_TOPIC_KEY,
    PAIR_SIDE_KEY,
    PROTOCOL_CONSUMER,
    TRANSACTIONAL_ID_KEY,
)
from contract.topic_specs import DeploymentNames, TopicRole
from contract.workload_shapes import HEALTH_PORT, PROCESSOR_STATE_DIR
from infra.stack_settings import StackConfig

STATE_DIR = PROCESSOR_STATE_DIR

# Of the grace period, what Spark and the JVM need to stop after the last batch committed.
SPARK_STOP_SECONDS = 15


def processor_properties(
    config: StackConfig,
    bootstrap_servers: str,
    client_security: Mapping[str, str],
    deployment: DeploymentNames | None = None,
) -> dict[str, str]:
    """Every processor setting of one of the stack's processor deployments (`deployment`, by
    default its first: the only one, or side a of a pair), the stack's `properties` overrides
    applied last.

    The processor's own defaults (`contract/processor_keys.py`) are written out too, so the
    ConfigMap shows every effective value and the policy pack checks what really runs.
    `client_security` are its user's connection settings (none on a PLAINTEXT cluster).
    """
    processor = config.processor
    deployment = deployment or processor.deployments[0]
    topics = {spec.role: spec.name for spec in config.topic_specs}
    session_timeout_ms = processor.computed_session_timeout_ms
    # A side of a pair: which one, and where the active side is named. A single deployment has
    # neither key (the contract gives them no default), so its file renders as before pairs.
    pair = (
        {PAIR_SIDE_KEY: deployment.side, PAIR_CONTROL_TOPIC_KEY: topics[TopicRole.PAIR_CONTROL]}
        if deployment.side is not None
        else {}
    )
    stack = {
        "application.id": deployment.application_id,
        "bootstrap.servers": bootstrap_servers,
        **client_security,
        "input.topic": topics[TopicRole.INPUT],
        "output.topic": topics[TopicRole.OUTPUT],
        "changelog.topic": deployment.changelog_topic,
        "dlq.topic": topics[TopicRole.DLQ],
        **pair,
        "stateful": str(processor.stateful).lower(),
        "membership.mode": processor.membership_mode,
        "num.standby.replicas": str(processor.num_standby_replicas),
        "state.dir": STATE_DIR,
        "health.port": str(HEALTH_PORT),
        # SIGTERM's wait for the running batch ends before the kubelet's SIGKILL does.
        "shutdown.timeout.ms": str(
            max(0, processor.termination_grace_period_seconds - SPARK_STOP_SECONDS) * 1000
        ),
        "consumer.group.protocol": processor.group_protocol,
        # Computed from this StatefulSet: a static member that restarts is never dropped. (Under
        # KIP-848 the two are the group's own configs instead, `ProcessorConfig.group_configs`.)
        "consumer.session.timeout.ms": str(session_timeout_ms),
        "consumer.heartbeat.interval.ms": str(processor.heartbeat_interval_ms),
        # librdkafka refuses a max.poll.interval.ms below the session timeout, and so does the
        # processor at start: a long restart budget raises it too (above the 300 s default).
        "consumer.max.poll.interval.ms": str(
            max(int(DEFAULTS["consumer.max.poll.interval.ms"]), session_timeout_ms)
        ),
        TRANSACTIONAL_ID_KEY: "${env:POD_NAME}",
        # A crashed pod's open transaction blocks its partitions' next owner this long at most.
        "producer.transaction.timeout.ms": str(CRASH_SAFE_TRANSACTION_TIMEOUT_MS),
        "spark.master": f"local[{processor.cores}]",
        # One per core: the stateful tasks run in one wave (see the processor's defaults).
        # Fixed in the checkpoint at first start.
        "spark.sql.shuffle.partitions": str(processor.cores),
    }
    if processor.stateful and processor.membership_mode == "static":
        # Static membership: a pod that restarts within the session timeout keeps its partitions.
        stack[INSTANCE_ID_KEY] = "${env:POD_NAME}"
    defaults = dict(DEFAULTS)
    if processor.group_protocol == PROTOCOL_CONSUMER:
        # The broker owns them (librdkafka refuses them with this protocol).
        for key in CLASSIC_PROTOCOL_ONLY:
            stack.pop(key, None)
            defaults.pop(key, None)
    effective = {**defaults, **stack, **processor.properties}
    # What this stack decides first, then the processor's defaults, as a reviewer reads it.
    return {**{key: effective[key] for key in stack}, **effective}
