"""What each stack deploys and exports."""

from __future__ import annotations

from offline.render import RecordedStack
from tests.infra.conftest import names_of


def common(stack: RecordedStack) -> set[tuple[str, str]]:
    """What every stack deploys; the processor's objects are named after the application id
    that stack sets."""
    app = names_of(stack).application_id
    return {
        ("Namespace", "streaming"),
        ("Service", "kafka-headless"),
        ("Service", "kafka"),
        ("PodDisruptionBudget", "kafka"),
        ("ServiceAccount", "kafka"),
        ("NetworkPolicy", "kafka"),
        ("StatefulSet", "kafka"),
        ("NetworkPolicy", "topics"),
        ("NetworkPolicy", "kafka-metadata-version"),
        ("Service", app),
        ("PodDisruptionBudget", app),
        ("ServiceAccount", app),
        ("NetworkPolicy", app),
        ("StatefulSet", app),
    }


def inventory(stack: RecordedStack) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in stack.kubernetes_objects()}


def test_each_stack_deploys_the_kafka_cluster_topic_job_and_processor(stack: RecordedStack) -> None:
    kinds, expected = inventory(stack), common(stack)
    assert kinds >= expected
    extra = kinds - expected
    # The specs ConfigMap, the reconciler Job, the metadata.version Job and the processor
    # properties, named by content; a secured stack's SCRAM retire Job too, named after the
    # reconciler's, and the metadata.version Job's client settings.
    by_content = (kind for kind, name in extra if kind != "Secret" and name != "kafka-bootstrap")
    assert sorted(by_content) == sorted(
        ["ConfigMap", "ConfigMap", "Job", "Job"]
        + (["ConfigMap", "Job"] if stack.stack == "prod" else [])
    )
    # A secured stack adds its TLS Secret, a password Secret per user and what a new cluster
    # starts from (format settings, the reconciler's ACLs).
    secured = {
        ("Secret", "kafka-tls"),
        ("Secret", f"kafka-user-{names_of(stack).application_id}"),
        ("Secret", "kafka-user-topic-reconciler"),
        ("Secret", "kafka-user-observer"),
        ("ConfigMap", "kafka-bootstrap"),
    }
    assert (extra >= secured) == (stack.stack == "prod")
    assert len(kinds) == len(stack.kubernetes_objects()) == (26 if stack.stack == "prod" else 18)


def test_every_namespaced_object_lives_in_the_stack_namespace(stack: RecordedStack) -> None:
    for obj in stack.kubernetes_objects():
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "streaming", obj["metadata"]["name"]


def test_namespace_enforces_the_restricted_pod_security_standard(stack: RecordedStack) -> None:
    namespace = next(o for o in stack.kubernetes_objects() if o["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_stack_exports_bootstrap_servers_topics_and_processor_name(stack: RecordedStack) -> None:
    assert stack.outputs["bootstrapServers"] == "kafka.streaming.svc.cluster.local:9092"
    names = names_of(stack)
    assert stack.outputs["topics"] == {
        "input": names.input_topic,
        "output": names.output_topic,
        "changelog": names.changelog_topic,
        "dlq": names.dlq_topic,
    }
    assert stack.outputs["processorName"] == names.application_id
    assert stack.outputs["namespace"] == "streaming"


def test_components_parent_their_resources(stack: RecordedStack) -> None:
    components = {r.type for r in stack.resources if r.type.startswith("stateful-streaming:")}
    assert components == {
        "stateful-streaming:kafka:KafkaCluster",
        "stateful-streaming:topics:TopicReconciliation",
        "stateful-streaming:kafka:MetadataVersion",
        "stateful-streaming:processor:Processor",
        *(
            [
                "stateful-streaming:kafka:KafkaCredentials",
                "stateful-streaming:topics:ScramRetirement",
            ]
            if stack.stack == "prod"
            else []
        ),
    }
    for resource in stack.resources:
        if resource.type.startswith(("tls:", "random:index/randomPassword")):
            assert resource.parent and "KafkaCredentials" in resource.parent, resource.name
    statefulsets = [r for r in stack.resources if r.type == "kubernetes:apps/v1:StatefulSet"]
    assert all(r.parent and "stateful-streaming:" in r.parent for r in statefulsets)
