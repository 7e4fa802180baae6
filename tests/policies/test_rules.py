"""Every rule, one compliant and at least one violating case, through the pack's own process as
the engine runs it (pulumi_policy's argument objects: proxy props, numbers as floats)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from contract import container_commands
from tests.policies.conftest import SHAPES_RULE
from tests.policies.handmade_stack import (
    Resource,
    changed,
    first_container,
    handmade_stack,
    with_acl,
    with_broker_setting,
    with_env,
    with_properties,
)

STS = "StatefulSet"


def _topics(edit_topics: Callable[[list[dict[str, Any]]], None]) -> Callable[[Resource], None]:
    import json

    def edit(r: Resource) -> None:
        data = json.loads(r.props["data"]["topics.json"])
        edit_topics(data["topics"])
        r.props["data"]["topics.json"] = json.dumps(data)

    return edit


def _changelog(key: str, value: str) -> Callable[[list[dict[str, Any]]], None]:
    def edit(topics: list[dict[str, Any]]) -> None:
        topics[2]["configs"][key] = value

    return edit


def _set(path: str, value: Any) -> Callable[[Resource], None]:
    """Set a dotted path under props (`spec.replicas`)."""

    def edit(r: Resource) -> None:
        target = r.props
        *parents, last = path.split(".")
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


def _format_storage_on_the_processors_image(r: Resource) -> None:
    """An init container of the brokers' (`kafka.image`) on the processor's image."""
    pod = r.props["spec"]["template"]["spec"]
    init = {k: v for k, v in pod["containers"][0].items() if k not in ("args", "ports")}
    init_runs = container_commands.format_storage()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        init.pop(probe, None)
    pod["initContainers"] = [{**init, "name": init_runs.name, "command": list(init_runs.command)}]


def _bound_to_cluster_admin(r: Resource) -> None:
    """The processor's service account, bound to cluster-admin instead of declared."""
    account = r.props["metadata"]
    r.type = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
    r.props = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "debug", "namespace": account["namespace"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": account["name"]}],
    }


# (rule, resource name, edit, text the message must contain)
VIOLATIONS: list[tuple[str, str, Callable[[Resource], None], str]] = [
    ("kafka-quorum-size", "kafka", _set("spec.replicas", 4), "spec.replicas is 4"),
    ("kafka-quorum-size", "kafka", _set("spec.replicas", 1), "an odd number >= 3"),
    (
        "kafka-parallel-pod-management",
        "kafka",
        _set("spec.podManagementPolicy", "OrderedReady"),
        "spec.podManagementPolicy is OrderedReady",
    ),
    (
        "kafka-durability-configs",
        "kafka",
        with_broker_setting("min.insync.replicas", "1"),
        "min.insync.replicas (env SERVER_PROPERTIES) is 1; required: >= 2",
    ),
    (
        "kafka-durability-configs",
        "kafka",
        with_broker_setting("default.replication.factor", None),
        "default.replication.factor (env SERVER_PROPERTIES) is 1",
    ),
    (
        "kafka-durability-configs",
        "kafka",
        with_broker_setting("unclean.leader.election.enable", "true"),
        "unclean.leader.election.enable (env SERVER_PROPERTIES) is true",
    ),
    (
        "kafka-auto-create-topics-disabled",
        "kafka",
        with_broker_setting("auto.create.topics.enable", None),
        "auto.create.topics.enable (env SERVER_PROPERTIES) is true",
    ),
    (
        "kafka-initial-rebalance-delay",
        "kafka",
        with_broker_setting("group.initial.rebalance.delay.ms", "0"),
        "is 0; required: >= 3000 ms",
    ),
    (
        "kafka-heap-size",
        "kafka",
        with_env("KAFKA_HEAP_OPTS", "-Xmx2g"),
        "KAFKA_HEAP_OPTS is -Xmx2g; required: between 0.25 and 0.75 of limits.memory (2Gi)",
    ),
    (
        "kafka-grace-period",
        "kafka",
        _set("spec.template.spec.terminationGracePeriodSeconds", 10),
        "terminationGracePeriodSeconds is 10; required: >= 60",
    ),
    (
        "kafka-headless-service-publishes-not-ready",
        "kafka-headless",
        _set("spec.publishNotReadyAddresses", False),
        "Service streaming/kafka-headless: spec.publishNotReadyAddresses is false",
    ),
    (
        "topic-durability",
        "topics-specs",
        _topics(lambda t: t[0].update(replication_factor=2)),
        "topic page-views: replication_factor is 2; required: >= 3",
    ),
    (
        "topic-durability",
        "topics-specs",
        _topics(lambda t: t[1]["configs"].update({"min.insync.replicas": "1"})),
        "topic page-view-counts: configs[min.insync.replicas] is 1",
    ),
    (
        "kafka-tls-verification",
        "processor-config",
        with_properties({"consumer.enable.ssl.certificate.verification": "false"}),
        "consumer.enable.ssl.certificate.verification is false; required: true",
    ),
    (
        "topic-durability",
        "topics-specs",
        _topics(_changelog("unclean.leader.election.enable", "true")),
        "configs[unclean.leader.election.enable] is true; required: false or absent",
    ),
    (
        "changelog-compacted",
        "topics-specs",
        _topics(_changelog("cleanup.policy", "delete")),
        "configs[cleanup.policy] is delete; required: a list that includes compact",
    ),
    (
        "changelog-segment-size",
        "topics-specs",
        _topics(_changelog("segment.bytes", "1073741824")),
        "configs[segment.bytes] is 1073741824; required: <= 67108864",
    ),
    (
        "topics-co-partitioned",
        "topics-specs",
        _topics(lambda t: t[2].update(partitions=12)),
        "page-view-counter-counts-changelog=12",
    ),
    (
        "processor-min-ready-seconds",
        "processor",
        _set("spec.minReadySeconds", 0),
        "spec.minReadySeconds is 0; required: >= 30",
    ),
    (
        "processor-state-volume",
        "processor",
        lambda r: first_container(r)["volumeMounts"].pop(0),
        "volumeMounts of a volumeClaimTemplate at state.dir (/var/lib/processor)",
    ),
    (
        "processor-replicas-within-partitions",
        "processor",
        _set("spec.replicas", 7),
        "StatefulSet streaming/page-view-counter: spec.replicas is 7; required: <= the "
        "partition count of its input topic page-views (6)",
    ),
    (
        "topic-durability",
        "topics-specs",
        _topics(lambda t: t[2]["configs"].update({"min.insync.replicas": "3"})),
        "configs[min.insync.replicas] is 3; required: >= 2 and below the replication factor (3). "
        "Fix: set min.insync.replicas=2 (replication factor - 1): when it equals the replication "
        "factor, one broker down or rolling",
    ),
    (
        "pinned-images",
        "processor",
        lambda r: first_container(r).update(image="ghcr.io/example/processor"),
        "container processor image is ghcr.io/example/processor; required: a digest pin",
    ),
    (
        "processor-grace-period",
        "processor",
        _set("spec.template.spec.terminationGracePeriodSeconds", 30),
        "terminationGracePeriodSeconds is 30; required: >= longest batch 60 s + shutdown 15 s",
    ),
    (
        "processor-state-store",
        "processor-config",
        with_properties({"spark.sql.streaming.stateStore.providerClass": None}),
        "spark.sql.streaming.stateStore.providerClass is absent",
    ),
    (
        "group-static-membership",
        "processor-config",
        with_properties({"consumer.group.instance.id": None}),
        "consumer.group.instance.id is absent",
    ),
    (
        "group-static-membership",
        "processor-config",
        with_properties({"stateful": "false"}),
        "required: absent for a stateless processor",
    ),
    (
        "processor-settings-contract",
        "processor-config",
        with_properties({"health.port": "70000"}),
        "health.port is 70000; required: what its row in the contract accepts (out of range; "
        "allowed: 0..65535)",
    ),
    (
        "group-session-timeout",
        "processor-config",
        with_properties({"consumer.session.timeout.ms": "45000"}),
        "consumer.session.timeout.ms is 45000; required: at least the restart budget, 180000 ms "
        "(terminationGracePeriodSeconds 90 + startupProbe budget 60 + minReadySeconds 30 = 180 s",
    ),
    (
        "group-heartbeat-interval",
        "processor-config",
        with_properties({"consumer.heartbeat.interval.ms": "90000"}),
        "consumer.heartbeat.interval.ms is 90000; required: at most a third of "
        "consumer.session.timeout.ms=200000 (<= 66666)",
    ),
    (
        "group-max-poll-interval",
        "processor-config",
        with_properties({"consumer.max.poll.interval.ms": "150000"}),
        "consumer.max.poll.interval.ms is 150000; required: at least "
        "consumer.session.timeout.ms=200000",
    ),
    (
        "group-cooperative-assignor",
        "processor-config",
        with_properties({"consumer.partition.assignment.strategy": "range"}),
        "consumer.partition.assignment.strategy is range; required: cooperative-sticky",
    ),
    (
        "group-read-committed",
        "processor-config",
        with_properties({"consumer.isolation.level": "read_uncommitted"}),
        "consumer.isolation.level is read_uncommitted",
    ),
    (
        "statefulset-rolling-update",
        "kafka",
        _set(
            "spec.updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}
        ),
        "maxUnavailable is 2; required: absent or 1",
    ),
    (
        "statefulset-rolling-update",
        "processor",
        _set("spec.updateStrategy", {"type": "OnDelete"}),
        "spec.updateStrategy.type is OnDelete",
    ),
    (
        "statefulset-volume-retention",
        "kafka",
        _set("spec.persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Delete"}),
        "whenDeleted is Delete; required: Retain",
    ),
    (
        "statefulset-spread",
        "kafka",
        _set("spec.template.spec.topologySpreadConstraints", []),
        "topologySpreadConstraints is absent; required: a constraint on "
        "topology.kubernetes.io/zone",
    ),
    (
        "statefulset-probes",
        "processor",
        lambda r: first_container(r).pop("startupProbe"),
        "container processor startupProbe is absent",
    ),
    (
        "statefulset-probes",
        "kafka",
        lambda r: first_container(r).update(readinessProbe={"tcpSocket": {"port": 9092}}),
        "container kafka readinessProbe is a tcpSocket check",
    ),
    (
        "statefulset-resources",
        "kafka",
        lambda r: first_container(r)["resources"]["requests"].update(memory="1Gi"),
        "resources.requests.memory is 1Gi; required: equal to limits.memory (2Gi)",
    ),
    (
        "statefulset-update-timeout",
        "processor",
        lambda r: setattr(r, "custom_timeouts", {"update": "5m"}),
        "Pulumi customTimeouts.update is 300 s; required: >= replicas 3 x",
    ),
    (
        "statefulset-roll-wait",
        "kafka",
        lambda r: r.props["metadata"]["annotations"].pop("pulumi.com/waitFor"),
        "metadata.annotations[pulumi.com/waitFor] is absent; required: JSONPath conditions on "
        "status.updatedReplicas and status.availableReplicas",
    ),
    (
        "pod-security",
        "processor",
        lambda r: first_container(r)["securityContext"].update(allowPrivilegeEscalation=True),
        "container processor securityContext.allowPrivilegeEscalation is true; required: false",
    ),
    (
        "namespace-pod-security",
        "namespace",
        lambda r: r.props["metadata"]["labels"].update(
            {"pod-security.kubernetes.io/enforce": "baseline"}
        ),
        "Namespace streaming: metadata.labels[pod-security.kubernetes.io/enforce] is baseline; "
        "required: restricted",
    ),
    (
        "secret-mounts-least-privilege",
        "processor",
        lambda r: r.props["spec"]["template"]["spec"]["volumes"][2]["secret"].pop("items"),
        "volume kafka-ca is Secret kafka-tls, the whole Secret (ca.crt, tls-combined.pem, "
        "tls.crt, tls.key); required: only ca.crt of the brokers' TLS Secret",
    ),
    (
        "image-sources",
        "processor",
        _format_storage_on_the_processors_image,
        "container format-storage image is ghcr.io/example/processor:0.1.0@sha256:",
    ),
    (
        "workload-rbac",
        "processor-account",
        _bound_to_cluster_admin,
        "subjects[0] is service account streaming/page-view-counter, bound to ClusterRole "
        "cluster-admin",
    ),
    (
        "network-policy-coverage",
        "processor-network",
        _set("spec.policyTypes", ["Ingress"]),
        "StatefulSet streaming/page-view-counter: Egress NetworkPolicy is absent",
    ),
    (
        "network-policy-no-open-rules",
        "processor-network",
        _set("spec.ingress", [{"from": [{"namespaceSelector": {}}], "ports": [{"port": 8080}]}]),
        "spec.ingress[0].from[0] is namespaceSelector {} without a podSelector (every pod of "
        "every namespace), on port 8080/TCP",
    ),
    (
        "services-cluster-internal",
        "kafka-headless",
        _set("spec.type", "LoadBalancer"),
        "Service streaming/kafka-headless: spec.type is LoadBalancer; required: ClusterIP",
    ),
    (
        "pinned-images",
        "kafka",
        lambda r: first_container(r).update(image="apache/kafka:latest"),
        "container kafka image is apache/kafka:latest; required: a digest pin",
    ),
    (
        "statefulset-pdb",
        "kafka",
        _set("spec.maxUnavailable", 2),
        "PodDisruptionBudget streaming/kafka: spec is maxUnavailable 2 (allows 2 of 3 pods down)",
    ),
    (
        "statefulset-headless-service",
        "kafka",
        _set("spec.serviceName", "kafka-missing"),
        "spec.serviceName is kafka-missing (no such Service in this stack)",
    ),
    (
        "standby-state",
        "processor-config",
        with_properties({"num.standby.replicas": None}),
        "num.standby.replicas in its properties is absent",
    ),
    (
        "processor-pair",
        "processor-config",
        with_properties({"pair.side": "a", "pair.control.topic": "page-view-counter-pair-control"}),
        "ConfigMap streaming/page-view-counter-config data[processor.properties]: pair.side is a, "
        "with no side b in the stack for it; required: a partner",
    ),
    (
        "kafka-listener-encryption",
        "kafka",
        with_broker_setting(
            "listener.security.protocol.map", "CLIENT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL"
        ),
        "client listener CLIENT on port 9092 (listeners, "
        "listener.security.protocol.map, env SERVER_PROPERTIES) is PLAINTEXT; required: SASL_SSL, "
        "or SSL with "
        "listener.name.client.ssl.client.auth=required",
    ),
    (
        "kafka-authorizer",
        "kafka",
        with_broker_setting("allow.everyone.if.no.acl.found", "true"),
        "broker config allow.everyone.if.no.acl.found (env SERVER_PROPERTIES) "
        "is true; required: false (deny by default)",
    ),
    (
        "credentials-in-secrets",
        "processor-config",
        with_properties({"sasl.password": "hunter2"}),
        "ConfigMap streaming/page-view-counter-config: data[processor.properties] sasl.password "
        "(line 24) is a literal credential (value not shown); required: a "
        "${dir:DIRECTORY:FILE} or ${env:NAME} reference",
    ),
    (
        "container-commands",
        "processor",
        lambda r: first_container(r)["args"].append("--debug-shell"),
        "container processor args is python -m app.processor --properties "
        "/etc/processor/processor.properties --debug-shell (word 6 '--debug-shell' is more than "
        "the contract has); required: exactly python -m app.processor --properties "
        "/etc/processor/processor.properties",
    ),
    (
        "kafka-least-privilege",
        "topics-specs",
        with_acl("TOPIC", "*", "READ"),
        "ConfigMap streaming/topics-specs data[acls.json]: ACL User:page-view-counter READ TOPIC * "
        "(LITERAL) is a wildcard resource name, more than the processor's user page-view-counter "
        "needs",
    ),
]

# Mutations that also (rightly) trip a second rule.
ALSO_FIRES = {
    ("kafka-quorum-size", "spec.replicas is 1"): {"statefulset-spread"},
    ("kafka-durability-configs", "is 1; required: >= 2"): set(),
    ("group-static-membership", "absent for a stateless"): set(),
    ("statefulset-pdb", "maxUnavailable 2"): set(),
}


@pytest.fixture(scope="module")
def compliant() -> list[Resource]:
    return handmade_stack()


def test_the_handmade_stack_complies_with_every_rule(run, compliant, policies) -> None:
    assert run(compliant) == []
    assert len(policies) == 51


def test_every_rule_has_a_violating_case(policies) -> None:
    covered = {rule for rule, *_ in VIOLATIONS}
    assert covered | {SHAPES_RULE} == {p.name for p in policies}


@pytest.mark.parametrize(
    ("rule", "name", "edit", "expected"),
    VIOLATIONS,
    ids=[f"{rule}-{i}" for i, (rule, *_) in enumerate(VIOLATIONS)],
)
def test_rule_reports_the_violation_with_what_was_found_and_required(
    run, compliant, rule, name, edit, expected
) -> None:
    suffix = ":ConfigMap" if name.endswith(("-config", "-specs")) else ""
    if name in ("kafka", "processor") and rule not in ("statefulset-pdb",):
        suffix = ":StatefulSet"
    if rule == "statefulset-pdb":
        suffix = ":PodDisruptionBudget"
    violations = run(changed(compliant, name, edit, suffix))
    fired = {v.policy for v in violations}
    allowed = {rule} | next(
        (extra for (r, text), extra in ALSO_FIRES.items() if r == rule and text in expected),
        set(),
    )
    assert rule in fired, violations
    assert fired <= allowed, f"unexpected rules {fired - allowed}: {violations}"
    messages = [v.message for v in violations if v.policy == rule]
    assert any(expected in m for m in messages), messages
    assert all("Fix: " in m for m in messages)


def _kip_848(broker_env: dict[str, str], properties: dict[str, str | None]) -> list[Resource]:
    stack = handmade_stack()
    for name, value in broker_env.items():
        stack = changed(stack, "kafka", with_broker_setting(name, value), ":StatefulSet")
    client_side = {
        "consumer.session.timeout.ms": None,
        "consumer.heartbeat.interval.ms": None,
        "consumer.partition.assignment.strategy": None,
        "consumer.group.protocol": "consumer",
    }
    return changed(stack, "processor-config", with_properties({**client_side, **properties}))


BROKER_SESSION = {
    "group.consumer.session.timeout.ms": "200000",
    "group.consumer.max.session.timeout.ms": "300000",
}


def test_kip_848_processor_is_checked_against_the_broker_session_timeout(run) -> None:
    assert run(_kip_848(BROKER_SESSION, {})) == []
    violations = run(_kip_848({}, {}))
    assert {v.policy for v in violations} == {"group-session-timeout"}
    assert (
        "StatefulSet streaming/kafka broker config: group.consumer.session.timeout.ms "
        "(env SERVER_PROPERTIES) is 45000" in violations[0].message
    )
    assert "required: at least the restart budget" in violations[0].message


def test_kip_848_processor_must_leave_session_and_assignor_to_the_broker(run) -> None:
    violations = run(_kip_848(BROKER_SESSION, {"consumer.partition.assignment.strategy": "range"}))
    assert {v.policy for v in violations} == {"group-session-timeout"}
    assert "consumer.partition.assignment.strategy is range; required: absent with " in (
        violations[0].message
    )


def test_kip_848_heartbeat_is_read_from_the_broker(run) -> None:
    slow = {**BROKER_SESSION, "group.consumer.heartbeat.interval.ms": "90000"}
    violations = run(_kip_848(slow, {}))
    assert {v.policy for v in violations} == {"group-heartbeat-interval"}
    assert "group.consumer.heartbeat.interval.ms (env SERVER_PROPERTIES)" in (violations[0].message)


def test_session_timeout_above_the_broker_maximum_is_a_violation(run, compliant) -> None:
    stack = changed(
        compliant,
        "kafka",
        with_broker_setting("group.max.session.timeout.ms", "150000"),
        ":StatefulSet",
    )
    violations = run(stack)
    assert {v.policy for v in violations} == {"group-session-timeout"}
    assert "group.max.session.timeout.ms (150000)" in violations[0].message


def test_session_timeout_budget_follows_the_statefulset(run, compliant) -> None:
    """Raising minReadySeconds by 30 s raises the required session timeout by 30 s."""
    stack = changed(compliant, "processor", _set("spec.minReadySeconds", 60), ":StatefulSet")
    (violation,) = run(stack)
    assert violation.policy == "group-session-timeout"
    assert "at least the restart budget, 210000 ms" in violation.message
    assert "minReadySeconds 60 = 210 s" in violation.message


def test_stateless_processor_without_instance_id_passes(run, compliant) -> None:
    stack = changed(
        compliant,
        "processor-config",
        with_properties({"stateful": "false", "consumer.group.instance.id": None}),
    )
    assert run(stack) == []


HANDOFF_SESSION = {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "1000"}


def _handoff(stack, session: Mapping[str, str | None] = HANDOFF_SESSION):
    """The stack with its processor in membership.mode=handoff (no static member id)."""
    return changed(
        stack,
        "processor-config",
        with_properties(
            {"membership.mode": "handoff", "consumer.group.instance.id": None, **session}
        ),
    )


def test_a_handoff_members_session_must_end_soon_after_a_crash(run, compliant) -> None:
    # The static member's 200 s session, kept in hand-off mode: a crash would stop its
    # partitions for 200 s though a stopping member hands them over at once.
    (violation,) = run(_handoff(compliant, {}))
    assert violation.policy == "group-session-timeout"
    assert (
        "consumer.session.timeout.ms is 200000; required: <= 12000 with membership.mode=handoff"
        in violation.message
    )
    assert "one that crashes holds its partitions" in violation.message


def test_a_session_below_the_brokers_minimum_is_refused_in_every_mode(run, compliant) -> None:
    short = {"consumer.session.timeout.ms": "5000", "consumer.heartbeat.interval.ms": "1000"}
    for stack in (
        _handoff(compliant, short),
        changed(
            compliant,
            "processor-config",
            with_properties({"stateful": "false", "consumer.group.instance.id": None, **short}),
        ),
    ):
        (violation,) = run(stack)
        assert violation.policy == "group-session-timeout"
        assert "the brokers' group.min.session.timeout.ms (6000)" in violation.message
        assert "INVALID_SESSION_TIMEOUT" in violation.message


def test_handoff_processor_without_instance_id_passes(run, compliant) -> None:
    assert run(_handoff(compliant)) == []


def test_handoff_processor_with_a_static_member_id_is_refused(run, compliant) -> None:
    stack = changed(
        compliant,
        "processor-config",
        with_properties({"membership.mode": "handoff", **HANDOFF_SESSION}),
    )
    (violation,) = run(stack)
    assert violation.policy == "group-static-membership"
    assert "or with membership.mode=handoff" in violation.message


def test_a_stateless_processor_in_handoff_mode_is_refused(run, compliant) -> None:
    stack = changed(_handoff(compliant), "processor-config", with_properties({"stateful": "false"}))
    (violation,) = run(stack)
    assert violation.policy == "group-static-membership"
    assert "membership.mode is handoff; required: static with stateful=false" in violation.message
    assert "a stateless processor keeps none" in violation.message


def test_handoff_processor_needs_a_second_replica(run, compliant) -> None:
    stack = changed(_handoff(compliant), "processor", _set("spec.replicas", 1), ":StatefulSet")
    violations = [v for v in run(stack) if v.policy == "group-static-membership"]
    assert len(violations) == 1
    assert (
        "spec.replicas is 1; required: at least 2 with membership.mode=handoff"
        in violations[0].message
    )


def test_a_scale_in_below_the_standby_copies_is_refused(run, compliant) -> None:
    stack = changed(
        _handoff(compliant), "processor-config", with_properties({"num.standby.replicas": "2"})
    )
    stack = changed(stack, "processor", _set("spec.replicas", 2), ":StatefulSet")
    violations = [v for v in run(stack) if v.policy == "group-static-membership"]
    assert len(violations) == 1
    assert "num.standby.replicas is 2; required: 0..1 (replicas - 1)" in violations[0].message
    assert "before a scale-in" in violations[0].message
    assert "(stack setting processor.numStandbyReplicas)" in violations[0].message


@pytest.mark.parametrize("standby", ["0", None], ids=["zero", "absent"])
def test_handoff_processor_needs_a_standby_replica(run, compliant, standby) -> None:
    from tests.policies.conftest import stack_config

    stack = changed(
        _handoff(compliant), "processor-config", with_properties({"num.standby.replicas": standby})
    )
    (violation,) = run(stack, stack_config("dev"))  # dev does not require standby state itself
    assert (violation.policy, violation.level) == ("group-static-membership", "mandatory")
    assert violation.message.startswith(
        "ConfigMap streaming/page-view-counter-config data[processor.properties]: "
        f"num.standby.replicas is {standby or 'absent (default 0)'}; "
        "required: at least 1 with membership.mode=handoff. Fix: a hand-off moves partitions"
    )
    assert "(stack setting processor.numStandbyReplicas)" in violation.message
    assert "restores its whole changelog" in violation.message
    prod = {(v.policy, v.level) for v in run(stack, stack_config("prod"))}
    assert prod == {("group-static-membership", "mandatory"), ("standby-state", "mandatory")}


def test_standby_state_blocks_prod_and_is_not_required_in_dev(run, compliant) -> None:
    from tests.policies.conftest import stack_config

    stack = changed(compliant, "processor-config", with_properties({"num.standby.replicas": "0"}))
    assert run(stack, stack_config("dev")) == []
    (violation,) = run(stack, stack_config("prod"))
    assert (violation.policy, violation.level) == ("standby-state", "mandatory")
    assert "num.standby.replicas in its properties is 0; required: >= 1" in violation.message
    assert "not implement" not in violation.message


def test_thresholds_and_levels_come_from_the_config(run, compliant) -> None:
    from tests.policies.conftest import stack_config

    stack = changed(compliant, "processor", _set("spec.minReadySeconds", 10), ":StatefulSet")
    config = stack_config("prod")
    assert {v.policy for v in run(stack, config)} == {"processor-min-ready-seconds"}
    assert run(stack, stack_config("dev")) == []  # dev: minSeconds 10
    config["processor-min-ready-seconds"]["enforcementLevel"] = "advisory"
    (violation,) = run(stack, config)
    assert violation.level == "advisory"
    config["processor-min-ready-seconds"]["enforcementLevel"] = "disabled"
    assert run(stack, config) == []


PROBE_PACK = """
from collections.abc import Mapping, Sequence

from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy


def describe(args, report_violation):
    if args.resource_type.endswith("StatefulSet"):
        props = args.props
        containers = props["spec"]["template"]["spec"]["containers"]
        report_violation(
            f"mapping={isinstance(props, Mapping)} dict={isinstance(props, dict)} "
            f"sequence={isinstance(containers, Sequence)} list={isinstance(containers, list)} "
            f"replicas={type(props['spec']['replicas']).__name__}"
        )


PolicyPack(
    name="probe",
    policies=[ResourceValidationPolicy(name="probe", description="describes", validate=describe)],
    enforcement_level=EnforcementLevel.ADVISORY,
)
"""


def test_policies_receive_read_only_proxies_and_float_numbers(compliant, tmp_path) -> None:
    import sys

    from policies.evaluate import AnalyzerProcess

    pack_file = tmp_path / "probe_pack.py"
    pack_file.write_text(PROBE_PACK)
    with AnalyzerProcess([sys.executable, pack_file]) as probe:
        messages = {v.message for v in probe.evaluate(compliant, {})}
    assert messages == {"mapping=True dict=False sequence=True list=False replicas=float"}


def test_an_unknown_env_value_during_preview_leaves_the_other_kafka_rules_running(
    run, compliant
) -> None:
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    def unknown_cluster_id(r: Resource) -> None:
        first_container(r)["env"].append({"name": "CLUSTER_ID", "value": UNKNOWN_STRING_VALUE})

    stack = changed(compliant, "kafka", unknown_cluster_id, ":StatefulSet")
    assert run(stack) == []
    stack = changed(stack, "kafka", with_broker_setting("min.insync.replicas", "1"), ":StatefulSet")
    assert {v.policy for v in run(stack)} == {"kafka-durability-configs"}


@pytest.mark.parametrize("cleanup_policy", ["compact", "compact,delete", "delete, compact"])
def test_a_changelog_that_is_compacted_passes_with_or_without_a_retention_bound(
    run, compliant, cleanup_policy
) -> None:
    stack = changed(
        compliant, "topics-specs", _topics(_changelog("cleanup.policy", cleanup_policy))
    )
    assert run(stack) == []


def test_processor_replicas_up_to_the_partition_count_pass(run, compliant) -> None:
    stack = changed(compliant, "processor", _set("spec.replicas", 6), ":StatefulSet")
    assert run(stack) == []


def test_processor_replicas_are_not_compared_with_an_input_topic_the_stack_does_not_declare(
    run, compliant
) -> None:
    stack = changed(compliant, "processor", _set("spec.replicas", 7), ":StatefulSet")
    without_topics = [r for r in stack if r.name != "topics-specs"]
    assert "processor-replicas-within-partitions" not in {v.policy for v in run(without_topics)}


@pytest.mark.parametrize(
    ("rule", "edit"),
    [
        ("processor-grace-period", _set("spec.template.spec.terminationGracePeriodSeconds", 30)),
        (
            "pinned-images",
            lambda r: first_container(r).update(image="ghcr.io/example/processor:latest"),
        ),
        ("pinned-images", lambda r: first_container(r).update(image="ghcr.io/example/processor")),
    ],
    ids=["grace-period-30s", "image-latest", "image-untagged"],
)
def test_short_grace_period_and_unpinned_image_block_prod_and_warn_in_dev(
    run, compliant, rule, edit
) -> None:
    from tests.policies.conftest import stack_config

    stack = changed(compliant, "processor", edit, ":StatefulSet")
    levels = {
        name: {v.level for v in run(stack, stack_config(name)) if v.policy == rule}
        for name in ("dev", "prod")
    }
    assert levels == {"dev": {"advisory"}, "prod": {"mandatory"}}


@pytest.mark.parametrize(
    ("image", "levels"),
    [
        ("ghcr.io/example/processor:0.1.0", {"dev": set(), "prod": {"mandatory"}}),
        ("ghcr.io/example/processor:0.1.0@sha256:abc", {"dev": set(), "prod": {"mandatory"}}),
        (f"ghcr.io/example/processor@sha256:{'a' * 64}", {"dev": set(), "prod": set()}),
    ],
    ids=["version-tag", "truncated-digest", "digest"],
)
def test_prod_takes_only_a_full_digest_and_dev_a_version_tag(run, compliant, image, levels) -> None:
    from tests.policies.conftest import levels_of

    stack = changed(compliant, "processor", lambda r: first_container(r).update(image=image), STS)
    assert levels_of(run, stack, "pinned-images") == levels
