"""Each workload's NetworkPolicy restricts both directions: only named peers reach its pods, and
they reach only the brokers they need and the cluster DNS; the processor's health and metrics
port is open to one namespace, the stack setting `processor.metricsNamespace`."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import build_stack_config
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import k8s_object, names_of

BROKERS = {"app.kubernetes.io/instance": "kafka", "app.kubernetes.io/name": "kafka"}
DNS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
}


def _policy(stack: RecordedStack, name: str) -> dict[str, Any]:
    return k8s_object(stack, "NetworkPolicy", name)["spec"]


def _processor_policy(stack: RecordedStack) -> dict[str, Any]:
    """The processor's policy, named after the application id the stack sets."""
    return _policy(stack, names_of(stack).application_id)


def _to_brokers(*ports: int) -> dict[str, Any]:
    return {
        "to": [{"podSelector": {"matchLabels": BROKERS}}],
        "ports": [{"port": port, "protocol": "TCP"} for port in ports],
    }


def test_every_policy_restricts_ingress_and_egress(stack: RecordedStack) -> None:
    for name in ("kafka", "topics", names_of(stack).application_id):
        assert _policy(stack, name)["policyTypes"] == ["Ingress", "Egress"], name


def test_brokers_reach_only_each_other_and_dns(stack: RecordedStack) -> None:
    # 9092: the readiness sidecar's admin client follows the metadata to the other brokers.
    assert _policy(stack, "kafka")["egress"] == [_to_brokers(9092, 9093, 9094), DNS]


@pytest.mark.parametrize("client", ["topics", "processor"])
def test_clients_reach_only_the_brokers_client_port_and_dns(
    stack: RecordedStack, client: str
) -> None:
    # The processor's name is the stack's application id, known only once a stack is chosen.
    policy = _processor_policy(stack) if client == "processor" else _policy(stack, client)
    assert policy["egress"] == [_to_brokers(9092), DNS]


def test_the_topic_job_accepts_no_connection(stack: RecordedStack) -> None:
    assert "ingress" not in _policy(stack, "topics")


def test_metrics_are_open_to_the_monitoring_namespace_by_default(stack: RecordedStack) -> None:
    assert build_stack_config(stack.stack, {}).processor.metrics_namespace == "monitoring"
    (rule,) = _processor_policy(stack)["ingress"]
    assert rule == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }


def test_the_metrics_namespace_is_a_stack_setting() -> None:
    recorded = record_stack("prod", {"processor": {"metricsNamespace": "observability"}})
    (rule,) = _processor_policy(recorded)["ingress"]
    observability = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    ]
    assert rule["from"] == observability
    # The brokers' readiness sidecars' /metrics: the same namespace, their port only.
    (brokers,) = [r for r in _policy(recorded, "kafka")["ingress"] if r["from"] == observability]
    assert brokers["ports"] == [{"port": 8090, "protocol": "TCP"}]


@pytest.mark.parametrize("value", ["", "Monitoring", "monitoring/prometheus", {"team": "obs"}])
def test_a_metrics_namespace_that_is_not_a_namespace_name_is_refused(value: Any) -> None:
    with pytest.raises(StackConfigError) as error:
        build_stack_config("prod", {"processor": {"metricsNamespace": value}})
    message = str(error.value)
    assert message.startswith(f"stateful-streaming:processor.metricsNamespace = {value!r}: ")
    assert "pulumi config set --path 'stateful-streaming:processor.metricsNamespace'" in message
