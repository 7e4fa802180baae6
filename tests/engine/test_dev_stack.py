"""The dev stack through `pulumi preview` with the pack, `up`, a change that rolls, a disk resize,
`refresh` and `destroy`, in Pulumi's engine against a real API server.

One stack, one story: the tests run in file order, each on what the one before left (a second
`up` of everything would only cost time). Every figure comes from the engine's events or the
API server's objects; the tests print the timelines they judge.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from pulumi import automation as auto

from app.clients.waiting import wait_until
from devkit.kube.engine_stack import ROOT, EngineStack
from devkit.kube.go_tools import PULUMI_KUBERNETES_RELEASE
from devkit.kube.kubectl import kubectl_json
from infra.presets import KAFKA_IMAGE
from offline.policy_check import preview_skips
from offline.render import record_stack
from policies.evaluate import AnalyzerProcess, load_policy_config
from tests.engine import day2_plans
from tests.infra.conftest import PREVIOUS_KAFKA_IMAGE, names_of

NAMESPACE = "engine-dev"
# The random provider is served by no registry here, so the stack names its KRaft cluster id.
CLUSTER_ID = "q0SnoXu-RZ6ec4kCzx2w3A"
# The processor's StatefulSet, as the dev stack file names its pipeline.
PROCESSOR = names_of("dev").application_id
# The provider built here (devkit/kube/go_tools.py) is 4.25.0: its preview of a replacement dry-runs
# the new StatefulSet as an apply over the old one, which the API server refuses (the claim
# templates are immutable); 4.29 and later preview the replacement (pulumi-kubernetes #4328).
# `up` itself replaces it on both.
PROVIDER_PREVIEWS_CLAIM_TEMPLATE_REPLACEMENTS = tuple(
    int(part) for part in PULUMI_KUBERNETES_RELEASE.lstrip("v").split(".")[:2]
) >= (4, 29)
# What the program reads and does not manage.
READ_ONLY_TYPES = {"pulumi:pulumi:StackReference", "kubernetes:storage.k8s.io/v1:StorageClass"}
# The story starts on the release this project ran before, and upgrades to the current one.
SETTINGS: dict[str, Any] = {
    "namespace": NAMESPACE,
    "kafka": {"clusterId": CLUSTER_ID, "image": PREVIOUS_KAFKA_IMAGE},
}


def stamp(text: str) -> float:
    """An API server timestamp (whole seconds) as Unix time."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def dev(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineStack]:
    yield EngineStack(tmp_path_factory.mktemp("engine-dev"), "dev", kubeconfig, SETTINGS)


@pytest.fixture(scope="module")
def deployed(dev: EngineStack) -> EngineStack:
    run = dev.up()
    assert run.errors() == [], run.errors()
    print(f"up of a new dev stack: {run.seconds:.1f} s, {run.changes}")
    return dev


def pods(kubeconfig: str, app: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/name={app}"
    found = kubectl_json(kubeconfig, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return sorted(found, key=lambda p: p["metadata"]["name"])


def uids(kubeconfig: str, app: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(kubeconfig, app)}


def ready_since(pod: dict[str, Any]) -> float:
    for condition in pod["status"].get("conditions", []):
        if condition["type"] == "Ready" and condition["status"] == "True":
            return stamp(condition["lastTransitionTime"])
    raise AssertionError(f"{pod['metadata']['name']} is not Ready")


def stateful_set(kubeconfig: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl_json(kubeconfig, "statefulset", name, "-n", NAMESPACE)
    return found


def test_a_preview_with_the_pack_runs_every_rule_as_the_offline_check_does(
    dev: EngineStack,
) -> None:
    config_path = ROOT / "policies" / "config.dev.json"
    run = dev.preview(config_path)
    assert run.errors() == [], run.errors()
    assert [p for p in run.policies if p.skipped] == [], "rules the engine skipped"
    assert run.ops("StatefulSet") == {"kafka": {"create"}, "processor": {"create"}}, run.steps
    # The CLI read the pack's name and version from PulumiPolicy.yaml beside policies/analyzer.
    packs = {key.split("|")[0]: version for key, version in run.policy_packs.items()}
    assert packs == {"stateful-streaming": "0.1.0"}, run.policy_packs
    # The offline check (offline.policy_check) finds what the engine found, resource by resource.
    recorded = record_stack("dev", SETTINGS, preview=True)
    with AnalyzerProcess() as pack:
        config = load_policy_config(config_path, pack.policies)
        offline = pack.evaluate(recorded.resources, config)
        offline += preview_skips("dev", pack, config)
    engine = sorted((p.policy, p.level, (p.urn or "").rsplit("::", 1)[-1]) for p in run.policies)
    assert engine == sorted((v.policy, v.level, (v.urn or "").rsplit("::", 1)[-1]) for v in offline)
    print(f"preview with the pack: {run.seconds:.1f} s; findings: {engine}")


def test_each_documented_day2_change_plans_what_the_docs_say_and_no_more(
    deployed: EngineStack,
) -> None:
    """docs/operations.md's table of dev: each documented change previewed on the running stack;
    no StatefulSet is replaced by any of them."""
    day2_plans.check_stack(deployed, 2, 6, secured=False)


def test_up_of_a_processor_change_returns_once_the_roll_is_over(
    deployed: EngineStack, kubeconfig: str
) -> None:
    sts = stateful_set(kubeconfig, PROCESSOR)
    replicas, min_ready = sts["spec"]["replicas"], sts["spec"]["minReadySeconds"]
    before = set(uids(kubeconfig, PROCESSOR).values())
    deployed.set(processor={"cpu": "1500m"})
    started = time.time()
    run = deployed.up()
    returned = time.time()
    assert run.errors() == [], run.errors()
    assert run.ops("StatefulSet").get("processor") == {"update"}, run.steps
    after = pods(kubeconfig, PROCESSOR)
    assert len(after) == replicas
    assert not before & {p["metadata"]["uid"] for p in after}, "a pod was not replaced"
    created = [stamp(p["metadata"]["creationTimestamp"]) for p in reversed(after)]
    assert created == sorted(created), f"not highest ordinal first: {created}"
    last_ready = max(ready_since(p) for p in after)
    timeline = (
        f"pods created at {[round(c - started, 1) for c in created]} s, the last Ready at "
        f"{last_ready - started:.1f} s, up returned at {returned - started:.1f} s "
        f"(minReadySeconds {min_ready}; server times in whole seconds)"
    )
    print(f"processor roll: {timeline}")
    # Whole seconds on the server's side: allow one.
    assert returned >= last_ready + min_ready - 1, (
        f"up returned before the roll was over: {timeline}"
    )


def finalize_jobs(kubeconfig: str) -> list[dict[str, Any]]:
    found = kubectl_json(kubeconfig, "jobs", "-n", NAMESPACE)["items"]
    return [j for j in found if j["metadata"]["name"].startswith("kafka-metadata-version-")]


def test_a_kafka_upgrade_rolls_the_brokers_then_finalizes_and_cannot_go_back(
    deployed: EngineStack, kubeconfig: str
) -> None:
    assert deployed.stack.outputs()["kafkaMetadataVersion"].value == "4.1"
    before = set(uids(kubeconfig, "kafka").values())
    deployed.set(kafka={"clusterId": CLUSTER_ID})  # the default image: the current release
    started, started_at = time.time(), time.monotonic()
    run = deployed.up()
    returned = time.time()
    assert run.errors() == [], run.errors()
    assert run.ops("StatefulSet").get("kafka") == {"update"}, run.steps
    assert run.outputs["kafkaMetadataVersion"] == KAFKA_IMAGE.split(":")[1].rsplit(".", 1)[0]
    after = pods(kubeconfig, "kafka")
    assert not before & {p["metadata"]["uid"] for p in after}, "a broker was not replaced"
    created = [stamp(p["metadata"]["creationTimestamp"]) for p in reversed(after)]
    assert created == sorted(created), f"not highest ordinal first: {created}"
    last_ready = max(ready_since(p) for p in after)
    (job,) = [j for j in finalize_jobs(kubeconfig) if KAFKA_IMAGE in json.dumps(j["spec"])]
    job_created = stamp(job["metadata"]["creationTimestamp"])
    finished = stamp(job["status"]["completionTime"])
    # The engine's own order: the StatefulSet's update (which returns once the roll is over,
    # its waitFor conditions) ended before the Job's step began.
    rolled_index, rolled_at = run.when("done", ":StatefulSet", "kafka")
    job_index, job_at = run.when("pre", ":Job", "kafka-metadata-version")
    timeline = (
        f"brokers created at {[round(c - started, 1) for c in created]} s, the last Ready at "
        f"{last_ready - started:.1f} s; the engine: the StatefulSet's update done at "
        f"{rolled_at - started_at:.1f} s, the Job's step begun at {job_at - started_at:.1f} s; "
        f"the Job created at {job_created - started:.1f} s and complete at "
        f"{finished - started:.1f} s; up returned at {returned - started:.1f} s (server times "
        "in whole seconds)"
    )
    print(f"Kafka upgrade 4.1.1 -> the current release: {timeline}")
    assert rolled_index < job_index, timeline
    # The finalize comes after the roll: every broker on the new release and Ready.
    assert job_created >= last_ready, timeline
    assert (
        job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
        == (run.outputs["kafkaMetadataVersion"])
    )
    # Finalized: the old image is refused at preview, naming the setting and the way out.
    deployed.set(kafka={"clusterId": CLUSTER_ID, "image": PREVIOUS_KAFKA_IMAGE})
    try:
        with pytest.raises(auto.CommandError) as refused:
            deployed.preview()
        message = str(refused.value)
        assert f"kafka.image = '{PREVIOUS_KAFKA_IMAGE}'" in message, message
        assert "an upgrade has no way back" in message
        print("preview refused:", next(x for x in message.splitlines() if "kafka.image" in x))
    finally:
        deployed.set(kafka={"clusterId": CLUSTER_ID})


def test_a_disk_resize_grows_every_claim_and_keeps_the_pods_running(
    deployed: EngineStack, kubeconfig: str
) -> None:
    sizes = {"kafka": ("data", "3Gi"), PROCESSOR: ("state", "2Gi")}
    pods_before = {app: uids(kubeconfig, app) for app in sizes}
    sets_before = {app: stateful_set(kubeconfig, app)["metadata"]["uid"] for app in sizes}
    deployed.set(
        kafka={"clusterId": CLUSTER_ID, "storage": "3Gi"},
        processor={"cpu": "1500m", "storage": "2Gi"},
    )
    if PROVIDER_PREVIEWS_CLAIM_TEMPLATE_REPLACEMENTS:
        preview = deployed.preview()
        assert preview.errors() == [], preview.errors()
        planned = preview.ops("StatefulSet")
        assert all("replace" in planned.get(name, set()) for name in ("kafka", "processor"))
    started = time.time()
    run = deployed.up()
    assert run.errors() == [], run.errors()
    # By their Pulumi names: the brokers' `kafka`, the processor's `processor`.
    replaced = run.ops("StatefulSet")
    assert sorted(name for name, ops in replaced.items() if "replace" in ops) == [
        "kafka",
        "processor",
    ], replaced
    for app, (template, size) in sizes.items():
        sts = stateful_set(kubeconfig, app)
        assert sts["metadata"]["uid"] != sets_before[app], f"{app} was not recreated"
        wanted = [
            t["spec"]["resources"]["requests"]["storage"]
            for t in sts["spec"]["volumeClaimTemplates"]
        ]
        assert wanted == [size]
        assert uids(kubeconfig, app) == pods_before[app], f"{app}: the resize restarted pods"
        for ordinal in range(sts["spec"]["replicas"]):
            claim = kubectl_json(
                kubeconfig, "persistentvolumeclaim", f"{template}-{app}-{ordinal}", "-n", NAMESPACE
            )
            assert claim["spec"]["resources"]["requests"]["storage"] == size, claim["spec"]
        recreated = stamp(sts["metadata"]["creationTimestamp"]) - started
        print(
            f"{app}: StatefulSet recreated {recreated:.0f} s into the up ({run.seconds:.1f} s); "
            f"pods {sorted(pods_before[app])} the same pods; claims at {size}"
        )


def storage_class_expands(kubeconfig: str, name: str, allowed: bool) -> None:
    patch = json.dumps({"allowVolumeExpansion": allowed})
    subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "patch", "storageclass", name, "-p", patch],
        capture_output=True,
        check=True,
        timeout=60,
    )


def test_a_disk_change_the_claims_cannot_take_is_refused_at_preview_naming_the_setting(
    deployed: EngineStack, kubeconfig: str
) -> None:
    grown = {"clusterId": CLUSTER_ID, "storage": "3Gi"}
    # The class the claims are on stops allowing expansion, as many provisioners' classes do.
    storage_class_expands(kubeconfig, "standard", False)
    try:
        deployed.set(kafka=grown, processor={"cpu": "1500m", "storage": "3Gi"})
        with pytest.raises(auto.CommandError) as refused:
            deployed.preview()
        message = str(refused.value)
        assert "stateful-streaming:processor.storage = '3Gi'" in message, message
        print("preview refused:", next(x for x in message.splitlines() if "storage = " in x))
        assert f"StatefulSet {NAMESPACE}/{PROCESSOR} are 2Gi on storage class 'standard'" in message
        assert "allowVolumeExpansion" in message and "keep processor.storage at 2Gi" in message
        deployed.set(kafka=grown, processor={"cpu": "1500m", "storage": "1Gi"})
        with pytest.raises(auto.CommandError) as refused:
            deployed.preview()
        assert "are 2Gi and a claim never shrinks. Keep 2Gi or more" in str(refused.value)
    finally:
        storage_class_expands(kubeconfig, "standard", True)
        deployed.set(kafka=grown, processor={"cpu": "1500m", "storage": "2Gi"})
    claims = kubectl_json(kubeconfig, "persistentvolumeclaims", "-n", NAMESPACE)["items"]
    sizes = {c["metadata"]["name"]: c["spec"]["resources"]["requests"]["storage"] for c in claims}
    assert {n: v for n, v in sizes.items() if n.startswith("state-")} == {
        f"state-{PROCESSOR}-{i}": "2Gi" for i in range(2)
    }, "a refused change touched a claim"
    print(f"refused at preview: a grow on a class without expansion, a shrink; claims {sizes}")


def test_a_rotation_that_skips_a_revision_is_refused_at_preview(deployed: EngineStack) -> None:
    # The stack's last `up` left revision 1 (its `security` output, read back at preview).
    deployed.set(security={"credentialsRevision": 3})
    try:
        with pytest.raises(auto.CommandError) as refused:
            deployed.preview()
        message = str(refused.value)
        assert "security.credentialsRevision = 3: the running stack is at revision 1" in message
        assert "Set 2, run `pulumi up`, and repeat." in message
    finally:
        deployed.overrides.pop("security")
        deployed.write_settings()


def test_refresh_finds_the_stack_as_up_left_it(deployed: EngineStack) -> None:
    run = deployed.refresh()
    assert run.errors() == [], run.errors()
    changed = sorted((s.type, s.name) for s in run.results if s.op != "same")
    # What the program only reads is read afresh: its own last outputs (the StackReference the
    # disk checks use) and the storage classes a resize looked at. Nothing it manages drifted.
    assert {type_ for type_, _ in changed} <= READ_ONLY_TYPES, changed
    print(f"refresh: {run.changes}; read afresh: {changed}")


def test_destroy_keeps_the_namespace_and_its_claims(deployed: EngineStack, kubeconfig: str) -> None:
    def claims() -> list[str]:
        found = kubectl_json(kubeconfig, "persistentvolumeclaims", "-n", NAMESPACE)["items"]
        return sorted(
            c["metadata"]["name"] for c in found if "deletionTimestamp" not in c["metadata"]
        )

    kept = claims()
    assert len(kept) == 5, kept  # 3 brokers' and 2 processors'
    run = deployed.destroy(run_program=True)
    assert run.errors() == [], run.errors()
    wait_until(
        lambda: not pods(kubeconfig, PROCESSOR) and not pods(kubeconfig, "kafka"),
        120,
        "every pod of the stack gone",
        interval_s=1.0,
        seen=lambda: [p["metadata"]["name"] for p in pods(kubeconfig, PROCESSOR)],
    )
    assert claims() == kept
    objects = kubectl_json(kubeconfig, "statefulsets,services,configmaps", "-n", NAMESPACE)
    left = [f"{o['kind']} {o['metadata']['name']}" for o in objects["items"]]
    # The API server's own CA bundle is in every namespace.
    assert left == ["ConfigMap kube-root-ca.crt"], left
    print(f"after destroy: namespace {NAMESPACE} with its claims {kept}, no pod, no other object")
