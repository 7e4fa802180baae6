"""A SCRAM rotation as the program renders it: the mechanism follows the credentials revision,
the brokers enable both, the reconciler Job can log in with the previous revision's credential,
and the retire Job runs after every workload that logs in has rolled.

On Apache Kafka: tests/app/test_scram_rotation_apache_kafka.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from contract.java_properties import load_properties
from infra.config import build_stack_config
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import broker_settings, k8s_object, names_of

RECONCILER = "topic-reconciler"
RETIREMENT = "stateful-streaming:topics:ScramRetirement"


@pytest.fixture(scope="module")
def rotated() -> RecordedStack:
    """The prod stack one rotation later: revision 2, SCRAM-SHA-256."""
    return record_stack("prod", {"security": {"credentialsRevision": 2}})


def _named(stack: RecordedStack, kind: str, prefix: str) -> list[dict[str, Any]]:
    return [
        o
        for o in stack.kubernetes_objects()
        if o["kind"] == kind and o["metadata"]["name"].startswith(prefix)
    ]


def _jobs(stack: RecordedStack) -> dict[str, dict[str, Any]]:
    """The reconciler's Job and the retire Job, by their container's name."""
    return {
        job["spec"]["template"]["spec"]["containers"][0]["name"]: job
        for job in _named(stack, "Job", "topics-")
    }


def _specs(stack: RecordedStack) -> dict[str, str]:
    (config_map,) = _named(stack, "ConfigMap", "topics-")
    return dict(config_map["data"])


def _volumes(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}


def _processor_properties(stack: RecordedStack) -> dict[str, str]:
    (config_map,) = _named(stack, "ConfigMap", f"{names_of(stack).application_id}-config-")
    return load_properties(config_map["data"]["processor.properties"])


@pytest.mark.parametrize(("revision", "mechanism", "previous"), [
    (1, "SCRAM-SHA-512", "SCRAM-SHA-256"),
    (2, "SCRAM-SHA-256", "SCRAM-SHA-512"),
])  # fmt: skip
def test_the_rendered_mechanism_follows_the_revision(
    prod: RecordedStack, rotated: RecordedStack, revision: int, mechanism: str, previous: str
) -> None:
    stack = {1: prod, 2: rotated}[revision]
    assert _processor_properties(stack)["sasl.mechanism"] == mechanism
    specs = _specs(stack)
    assert load_properties(specs["client.properties"])["sasl.mechanism"] == mechanism
    # The reconciler's way in before its own new credential exists: the previous revision's.
    assert load_properties(specs["previous-client.properties"]) == {
        "sasl.mechanism": previous,
        "sasl.password": "${dir:/etc/kafka-user:previous-password}",
    }
    args = _jobs(stack)["reconcile"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--scram-mechanism") + 1] == mechanism
    retire = _jobs(stack)["retire"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert retire[retire.index("--retire") + 1] == previous
    # A new cluster's users are created with the revision's mechanism.
    bootstrap = k8s_object(stack, "ConfigMap", "kafka-bootstrap")["data"]
    assert bootstrap["scram-mechanism"] == mechanism


def test_the_brokers_enable_both_mechanisms_and_do_not_roll_on_a_rotation(
    prod: RecordedStack, rotated: RecordedStack
) -> None:
    kafka = k8s_object(prod, "StatefulSet", "kafka")
    env = broker_settings(kafka)
    assert env["listener.name.client.sasl.enabled.mechanisms"] == ("SCRAM-SHA-256,SCRAM-SHA-512")
    for mechanism in ("scram-sha-256", "scram-sha-512"):
        key = f"listener.name.client.{mechanism}.sasl.jaas.config"
        assert env[key] == "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    # A broker roll would wait for brokers whose sidecars need a credential that only the
    # reconciler's Job, which runs after the roll, sets.
    assert (
        kafka["spec"]["template"] == k8s_object(rotated, "StatefulSet", "kafka")["spec"]["template"]
    )


def test_each_user_secret_holds_a_password_per_mechanism_and_pods_mount_their_own(
    prod: RecordedStack, rotated: RecordedStack
) -> None:
    app = names_of(prod).application_id
    secret = k8s_object(prod, "Secret", f"kafka-user-{app}")
    assert set(secret["stringData"]) == {"username", "password", "scram-sha-256", "scram-sha-512"}
    for stack, key in ((prod, "scram-sha-512"), (rotated, "scram-sha-256")):
        # The key of the pod's own mechanism: a rotation updates the Secret in place, and the
        # kubelet the files of running pods, but never this key under a pod not yet rolled.
        user = _volumes(k8s_object(stack, "StatefulSet", app))["kafka-user"]["secret"]
        assert user["items"] == [{"key": key, "path": "password"}]
        retire = _volumes(_jobs(stack)["retire"])["kafka-user"]["secret"]
        assert retire["items"] == [{"key": key, "path": "password"}]
    reconcile = _volumes(_jobs(rotated)["reconcile"])["kafka-user"]["secret"]
    assert reconcile["secretName"] == f"kafka-user-{RECONCILER}"
    assert reconcile["items"] == [
        {"key": "scram-sha-256", "path": "password"},
        {"key": "scram-sha-512", "path": "previous-password"},
    ]


def test_the_retire_job_runs_after_every_workload_that_logs_in_has_rolled(
    prod: RecordedStack,
) -> None:
    retirement = next(r for r in prod.resources if r.type == RETIREMENT)
    for kind, name in (
        ("kubernetes:apps/v1:StatefulSet", "processor"),
        ("kubernetes:apps/v1:StatefulSet", "kafka"),
        ("kubernetes:batch/v1:Job", "topics"),
    ):
        assert prod.find(kind, name).urn in retirement.dependencies, name
    job = prod.find("kubernetes:batch/v1:Job", "scram-retirement")
    assert job.parent == retirement.urn
    jobs = _jobs(prod)
    # Named after the reconciler's Job: a new revision is a new pair of Jobs.
    assert jobs["retire"]["metadata"]["name"].startswith(jobs["reconcile"]["metadata"]["name"])
    # The reconciler's pods, so the reconciler's NetworkPolicy covers it.
    labels = [j["spec"]["template"]["metadata"]["labels"] for j in jobs.values()]
    assert labels[0] == labels[1]
    assert jobs["retire"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "python", "-m", "app.admin.scram_retire",
        "--bootstrap-servers", "kafka.streaming.svc.cluster.local:9092",
        "--acls", "/etc/topics/acls.json",
        "--command-config", "/etc/topics/client.properties",
        "--retire", "SCRAM-SHA-256",
    ]  # fmt: skip


def test_a_plaintext_stack_has_no_retire_job(dev: RecordedStack) -> None:
    assert not [r for r in dev.resources if r.type == RETIREMENT]


def test_a_pinned_mechanism_is_refused_naming_the_setting() -> None:
    with pytest.raises(StackConfigError) as refused:
        build_stack_config(
            "prod", {"processor": {"properties": {"sasl.mechanism": "SCRAM-SHA-512"}}}
        )
    message = str(refused.value)
    assert "processor.properties.sasl.mechanism" in message
    assert "set by the program from security.credentialsRevision" in message
