"""Network isolation (docs/security.md), on the real pulumi_policy objects: every workload has
an ingress and an egress NetworkPolicy (`network-policy-coverage`), no rule is open to every
source or destination (`network-policy-no-open-rules`), and no Service publishes the stack's pods
outside the cluster (`services-cluster-internal`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from policies.evaluate import Violation
from tests.infra.conftest import names_of
from tests.policies.conftest import Evaluate, stack_config
from tests.policies.handmade_stack import DNS_EGRESS, Resource, changed, handmade_stack, tcp

COVERAGE = "network-policy-coverage"
OPEN_RULES = "network-policy-no-open-rules"
SERVICES = "services-cluster-internal"
NETWORK_RULES = {COVERAGE, OPEN_RULES, SERVICES}

Edit = Callable[[Resource], None]


def _caught(run: Evaluate, stack: list[Any], rule: str) -> list[Violation]:
    """`rule` alone fires, mandatory with dev's and prod's configs, with a fix."""
    for config in ("dev", "prod"):
        violations = run(stack, stack_config(config))
        assert {v.policy for v in violations} == {rule}, violations
        assert all(v.mandatory and "Fix: " in v.message for v in violations)
    return violations


def _policy(name: str, edit: Callable[[dict[str, Any]], None]) -> list[Resource]:
    """The handmade stack with the spec of its NetworkPolicy `name` (kafka, processor) edited."""
    return changed(handmade_stack(), f"{name}-network", lambda r: edit(r.props["spec"]))


def _ingress(rules: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.update(ingress=rules)


def _egress(rules: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.update(egress=rules)


@pytest.mark.parametrize(
    ("name", "edit", "expected"),
    [
        (
            "kafka",
            _ingress([{}]),
            "NetworkPolicy streaming/kafka: spec.ingress[0].from is absent (every source, on "
            "every port); required: named sources",
        ),
        (
            "kafka",
            _ingress([{"ports": tcp(9092)}]),
            "spec.ingress[0].from is absent (every source, on port 9092/TCP)",
        ),
        (
            "kafka",
            _ingress([{"from": [{"namespaceSelector": {}}], "ports": tcp(9092)}]),
            "spec.ingress[0].from[0] is namespaceSelector {} without a podSelector (every pod of "
            "every namespace), on port 9092/TCP",
        ),
        (
            "kafka",
            _ingress([{"from": [{"namespaceSelector": {}, "podSelector": {}}]}]),
            "spec.ingress[0].from[0] is namespaceSelector {} without a podSelector",
        ),
        (
            "kafka",
            _ingress([{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": tcp(9092)}]),
            "spec.ingress[0].from[0] is ipBlock 0.0.0.0/0 (every address), on port 9092/TCP",
        ),
        (
            "processor",
            _egress([{"to": [{"ipBlock": {"cidr": "::/0"}}]}, DNS_EGRESS]),
            "NetworkPolicy streaming/page-view-counter: spec.egress[0].to[0] is ipBlock ::/0",
        ),
        (
            "processor",
            _egress([{}]),
            "spec.egress[0].to is absent (every destination, on every port); required: named "
            "destinations",
        ),
        (
            "processor",
            _egress([{"ports": [{"port": 53, "protocol": "UDP"}]}]),
            "spec.egress[0].to is absent (every destination, on port 53/UDP)",
        ),
        (
            "processor",
            _ingress([{"from": [{"namespaceSelector": {"matchLabels": {}}}], "ports": tcp(8080)}]),
            "spec.ingress[0].from[0] is namespaceSelector {} without a podSelector (every pod of "
            "every namespace), on port 8080/TCP",
        ),
        (
            "processor",
            _ingress(
                [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/metadata.name", "operator": "Exists"}
                                    ]
                                }
                            }
                        ],
                        "ports": tcp(8080),
                    }
                ]
            ),
            "spec.ingress[0].from[0] is namespaceSelector {kubernetes.io/metadata.name Exists} "
            "without a podSelector (every pod of every namespace), on port 8080/TCP",
        ),
        (
            "kafka",
            _ingress(
                [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchExpressions": [
                                        {"key": "team", "operator": "NotIn", "values": ["none"]}
                                    ]
                                },
                                "podSelector": {"matchLabels": {"app": "x"}},
                            }
                        ],
                        "ports": tcp(9092),
                    }
                ]
            ),
            "spec.ingress[0].from[0] is namespaceSelector {team NotIn none} (every namespace) "
            "with podSelector {app: x}, labels any pod of any namespace may carry",
        ),
        (
            "kafka",
            _ingress(
                [
                    {
                        "from": [
                            {
                                "namespaceSelector": {},
                                "podSelector": {
                                    "matchLabels": {"stateful-streaming.io/kafka-client": "true"}
                                },
                            }
                        ],
                        "ports": tcp(9092),
                    }
                ]
            ),
            "spec.ingress[0].from[0] is namespaceSelector {} (every namespace) with podSelector "
            "{stateful-streaming.io/kafka-client: true}, labels any pod of any namespace may carry",
        ),
        (
            "kafka",
            _ingress([{"from": [{"podSelector": {}}]}]),
            "spec.ingress[0].from[0] is podSelector {} (every pod of the namespace), on every port",
        ),
    ],
    ids=[
        "ingress-[{}]",
        "ingress-rule-without-from",
        "namespaceSelector-{}-on-9092",
        "every-pod-of-every-namespace",
        "ipBlock-0.0.0.0/0",
        "egress-ipBlock-::/0",
        "egress-[{}]",
        "dns-to-anywhere",
        "metrics-open-to-every-namespace",
        "namespaces-by-an-expression-every-one-matches",
        "namespaces-by-NotIn-with-a-pod-label",
        "every-namespace-with-a-pod-label",
        "podSelector-{}-on-every-port",
    ],
)
def test_a_rule_open_to_all_is_caught(run, name: str, edit, expected: str) -> None:
    violations = _caught(run, _policy(name, edit), OPEN_RULES)
    assert any(expected in v.message for v in violations), [v.message for v in violations]


def _to(*cidrs: str, ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": c}} for c in cidrs]}
    return {**rule, "ports": ports} if ports is not None else rule


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (
            [_to("0.0.0.0/1"), _to("128.0.0.0/1")],
            "spec.egress is ipBlocks 0.0.0.0/1, 128.0.0.0/1 together (every IPv4 address), on "
            "every port",
        ),
        (
            [_to("0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/2")],
            "ipBlocks 0.0.0.0/1, 128.0.0.0/2, 192.0.0.0/2 together (every IPv4 address)",
        ),
        ([_to("::/1"), _to("8000::/1")], "ipBlocks 8000::/1, ::/1 together (every IPv6 address)"),
        (
            [_to("0.0.0.0/1"), _to("128.0.0.0/1", ports=tcp(443))],
            "ipBlocks 0.0.0.0/1, 128.0.0.0/1 together (every IPv4 address), on port 443/TCP",
        ),
    ],
    ids=["two-halves", "three-blocks-in-one-rule", "ipv6-halves", "a-port-open-by-union"],
)
def test_blocks_that_together_cover_every_address_are_caught(
    run, rules: list[dict[str, Any]], expected: str
) -> None:
    violations = _caught(run, _policy("processor", _egress([*rules, DNS_EGRESS])), OPEN_RULES)
    assert any(expected in v.message for v in violations), [v.message for v in violations]


def test_blocks_that_cover_every_address_only_on_different_ports_pass(run) -> None:
    halves = [_to("0.0.0.0/1", ports=tcp(443)), _to("128.0.0.0/1", ports=tcp(80)), DNS_EGRESS]
    assert run(_policy("processor", _egress(halves))) == []


def test_dns_egress_to_kube_system_and_named_peers_pass(run) -> None:
    processor = next(r for r in handmade_stack() if r.name == "processor-network")
    assert DNS_EGRESS in processor.props["spec"]["egress"]
    narrow = _ingress([{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": tcp(9092)}])
    assert run(_policy("kafka", narrow)) == []


@pytest.mark.parametrize(
    ("edit", "direction"),
    [
        (lambda spec: spec.update(policyTypes=["Ingress"], egress=[]), "Egress"),
        (lambda spec: spec.update(policyTypes=["Egress"], ingress=[]), "Ingress"),
        (lambda spec: spec.update(podSelector={"matchLabels": {"app": "other"}}), "Ingress"),
    ],
    ids=["no-egress-policy", "no-ingress-policy", "selector-misses-the-pods"],
)
def test_a_workload_without_an_ingress_or_egress_policy_is_caught(run, edit, direction) -> None:
    violations = _caught(run, _policy("kafka", edit), COVERAGE)
    assert any(
        v.message.startswith(f"StatefulSet streaming/kafka: {direction} NetworkPolicy is absent")
        for v in violations
    ), [v.message for v in violations]


def test_a_namespace_wide_default_deny_covers_every_workload(run) -> None:
    """`podSelector: {}` selects every pod of its namespace; matchExpressions select too."""
    stack = [r for r in handmade_stack() if not r.name.endswith("-network")]
    default_deny = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": "streaming"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    egress = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "dns", "namespace": "streaming"},
        "spec": {
            "podSelector": {
                "matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["kafka", "page-view-counter"]}
                ]
            },
            "policyTypes": ["Egress"],
            "egress": [DNS_EGRESS],
        },
    }
    policy = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    covered = [*stack, Resource(policy, "deny", default_deny), Resource(policy, "dns", egress)]
    assert run(covered) == []
    uncovered = [*stack, Resource(policy, "deny", default_deny)]
    messages = [v.message for v in _caught(run, uncovered, COVERAGE)]
    assert len(messages) == 2
    assert all("Egress NetworkPolicy is absent" in m for m in messages)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda spec: spec.update(type="LoadBalancer"),
            "Service streaming/kafka-headless: spec.type is LoadBalancer; required: ClusterIP",
        ),
        (lambda spec: spec.update(type="NodePort"), "spec.type is NodePort"),
        (
            lambda spec: spec.update(externalIPs=["203.0.113.7"]),
            "spec.externalIPs is 203.0.113.7; required: absent",
        ),
    ],
    ids=["LoadBalancer", "NodePort", "externalIPs"],
)
def test_a_service_publishing_kafka_outside_the_cluster_is_caught(run, edit, expected) -> None:
    stack = changed(handmade_stack(), "kafka-headless", lambda r: edit(r.props["spec"]))
    (violation,) = _caught(run, stack, SERVICES)
    assert expected in violation.message
    assert "it selects the pods of StatefulSet streaming/kafka" in violation.message


def test_a_service_selecting_nothing_of_the_stack_is_not_this_rules_business(run) -> None:
    def elsewhere(r: Resource) -> None:
        r.props["spec"].update(type="LoadBalancer", selector={"app": "ingress-gateway"})

    stack = changed(handmade_stack(), "kafka-headless", elsewhere)
    assert not [v for v in run(stack) if v.policy == SERVICES]


# --- the rendered stacks --------------------------------------------------------------------


def _find(resources: list[Any], type_suffix: str, name: str) -> Any:
    (found,) = [r for r in resources if r.type.endswith(type_suffix) and r.name == name]
    return found


def _prod(run: Evaluate, recorded_stacks, target: tuple[str, str], edit) -> list[Violation]:
    resources = copy.deepcopy(list(recorded_stacks["prod"].resources))
    edit(_find(resources, *target).props)
    return [v for v in run(resources, stack_config("prod")) if v.policy in NETWORK_RULES]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rendered_stacks_are_isolated(run, recorded_stacks, stack: str) -> None:
    violations = run(recorded_stacks[stack].resources, stack_config(stack))
    assert [v for v in violations if v.policy in NETWORK_RULES] == []


def test_every_rendered_workload_has_both_directions(recorded_stacks) -> None:
    policies = [
        r.props["spec"]
        for r in recorded_stacks["prod"].resources
        if r.type.endswith(":NetworkPolicy")
    ]
    assert len(policies) == 4  # the brokers, the processor, the two kinds of Job
    assert all(p["policyTypes"] == ["Ingress", "Egress"] for p in policies)


def test_the_metrics_port_open_to_every_namespace_is_caught_in_prod(run, recorded_stacks) -> None:
    """The review's finding: the processor's 8080 with `namespaceSelector: {}`."""
    processor = names_of(recorded_stacks["prod"]).application_id

    def open_metrics(props: dict[str, Any]) -> None:
        props["spec"]["ingress"][0]["from"] = [{"namespaceSelector": {}}]

    (violation,) = _prod(run, recorded_stacks, (":NetworkPolicy", processor), open_metrics)
    assert violation.policy == OPEN_RULES and violation.mandatory
    assert violation.message.startswith(
        f"NetworkPolicy streaming/{processor}: spec.ingress[0].from[0] is namespaceSelector "
        "{} without a podSelector (every pod of every namespace), on port 8080/TCP"
    )


def test_a_kafka_load_balancer_in_prod_is_caught(run, recorded_stacks) -> None:
    (violation,) = _prod(
        run, recorded_stacks, (":Service", "kafka"), lambda p: p["spec"].update(type="LoadBalancer")
    )
    assert violation.policy == SERVICES
    assert "Service streaming/kafka: spec.type is LoadBalancer" in violation.message


def test_the_brokers_without_their_egress_policy_are_caught_in_prod(run, recorded_stacks) -> None:
    def ingress_only(props: dict[str, Any]) -> None:
        props["spec"]["policyTypes"] = ["Ingress"]
        del props["spec"]["egress"]

    (violation,) = _prod(run, recorded_stacks, (":NetworkPolicy", "kafka"), ingress_only)
    assert violation.policy == COVERAGE
    assert violation.message.startswith(
        "StatefulSet streaming/kafka: Egress NetworkPolicy is absent"
    )


@pytest.mark.parametrize(
    "peer",
    [
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["monitoring"],
                    }
                ]
            }
        },
        {"namespaceSelector": {"matchExpressions": [{"key": "monitoring", "operator": "Exists"}]}},
        {"podSelector": {}},
    ],
    ids=["namespace-by-name-In", "namespaces-with-a-label", "every-pod-of-the-namespace-on-8080"],
)
def test_a_peer_that_names_its_namespaces_or_ports_passes(run, peer: dict[str, Any]) -> None:
    stack = _policy("processor", _ingress([{"from": [peer], "ports": tcp(8080)}]))
    assert [v for v in run(stack) if v.policy == OPEN_RULES] == []
