"""A change to what a StatefulSet's pods mount by a fixed name updates it in place, in Pulumi's
engine against a real API server, and never replaces the StatefulSet.

The brokers mount the `kafka-bootstrap` ConfigMap and the SCRAM users' Secrets, all with fixed
names, whose data a credentials rotation changes. The provider replaces such an object unless
Pulumi.yaml's `kubernetes:enableConfigMapMutable` and `kubernetes:enableSecretMutable` say
otherwise, deleting it first (its name is taken), and a StatefulSet whose spec depends on a
deleted object is replaced with it: every pod at once. The prod stack that has these objects
needs the random and tls providers, which no registry here serves, so this proves the mechanism
on a program of the same shape: a StatefulSet with the project's claim-template options
(`infra.stateful_volumes`) that mounts a fixed-name ConfigMap and Secret by their outputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest

from devkit.kube.engine_stack import EngineStack
from devkit.kube.kubectl import kubectl_json
from infra import stateful_volumes, workload

NAMESPACE = "engine-in-place"
APP = "brokers"
# The test's own setting: what the ConfigMap and the Secret hold.
REVISION = "inplace:revision"


def program() -> None:
    """A fixed-name ConfigMap and Secret, mounted by a StatefulSet of 3 with claim templates."""
    revision = pulumi.Config("inplace").require("revision")
    namespace = k8s.core.v1.Namespace(
        "namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE)
    )
    in_namespace = pulumi.ResourceOptions(depends_on=[namespace])

    def meta(name: str) -> k8s.meta.v1.ObjectMetaArgs:
        return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=NAMESPACE)

    files = k8s.core.v1.ConfigMap(
        "bootstrap", metadata=meta("bootstrap"), data={"revision": revision}, opts=in_namespace
    )
    user = k8s.core.v1.Secret(
        "user",
        metadata=meta("user"),
        string_data={"password": f"password-of-revision-{revision}"},
        opts=in_namespace,
    )
    volumes = stateful_volumes.StatefulVolumes(
        "inplace",
        APP,
        NAMESPACE,
        [stateful_volumes.ClaimTemplate("data", "standard", "1Gi")],
        {},
        namespace,
    )
    mounts = {"bootstrap": "/etc/bootstrap", "user": "/etc/user", "data": "/var/lib/data"}
    k8s.apps.v1.StatefulSet(
        APP,
        metadata=meta(APP),
        spec=k8s.apps.v1.StatefulSetSpecArgs(
            service_name=APP,
            replicas=3,
            pod_management_policy="Parallel",
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=workload.selector(APP)),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=workload.selector(APP)),
                spec=k8s.core.v1.PodSpecArgs(
                    containers=[
                        k8s.core.v1.ContainerArgs(
                            name="broker",
                            image="apache/kafka:4.3.1",
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name=name, mount_path=path)
                                for name, path in mounts.items()
                            ],
                        )
                    ],
                    # By their outputs, as the brokers' pod template mounted the bootstrap
                    # ConfigMap before: the provider settings alone keep the StatefulSet.
                    volumes=[
                        k8s.core.v1.VolumeArgs(
                            name="bootstrap",
                            config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                                name=files.metadata.name
                            ),
                        ),
                        k8s.core.v1.VolumeArgs(
                            name="user",
                            secret=k8s.core.v1.SecretVolumeSourceArgs(
                                secret_name=user.metadata.name
                            ),
                        ),
                    ],
                ),
            ),
            volume_claim_templates=volumes.claim_templates(),
        ),
        opts=pulumi.ResourceOptions.merge(in_namespace, volumes.options()),
    )


@pytest.fixture(scope="module")
def stack(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineStack]:
    workdir: Path = tmp_path_factory.mktemp("engine-in-place")
    engine = EngineStack(workdir, "dev", kubeconfig, {REVISION: "1"}, program=program)
    run = engine.up()
    assert run.errors() == [], run.errors()
    yield engine
    engine.destroy(run_program=True)


def pod_uids(kubeconfig: str) -> dict[str, str]:
    found = kubectl_json(kubeconfig, "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={APP}")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in found["items"]}


def test_changed_data_is_updated_in_place_and_the_statefulset_keeps_its_pods(
    stack: EngineStack, kubeconfig: str
) -> None:
    pods = pod_uids(kubeconfig)
    assert len(pods) == 3, pods
    sts = kubectl_json(kubeconfig, "statefulset", APP, "-n", NAMESPACE)["metadata"]["uid"]
    stack.set(**{REVISION: "2"})
    preview = stack.preview()
    assert preview.errors() == [], preview.errors()
    planned = {**preview.ops(":ConfigMap"), **preview.ops(":Secret"), **preview.ops(":StatefulSet")}
    assert planned == {"bootstrap": {"update"}, "user": {"update"}, APP: {"same"}}, planned
    run = stack.up()
    assert run.errors() == [], run.errors()
    data = kubectl_json(kubeconfig, "configmap", "bootstrap", "-n", NAMESPACE)["data"]
    assert data == {"revision": "2"}
    assert kubectl_json(kubeconfig, "statefulset", APP, "-n", NAMESPACE)["metadata"]["uid"] == sts
    assert pod_uids(kubeconfig) == pods, "a pod was replaced"
    print(f"revision 1 -> 2 with Pulumi.yaml's provider settings: {run.changes}; pods kept")


def test_without_the_provider_settings_the_same_change_would_replace_the_statefulset(
    stack: EngineStack,
) -> None:
    """What Pulumi.yaml's settings prevent, and what the program refuses to run without
    (`infra.provider_settings`): the provider's default replaces both objects, deleting each
    first, and the engine replaces the StatefulSet that depends on them."""
    stack.set(
        **{
            REVISION: "3",
            "kubernetes:enableConfigMapMutable": False,
            "kubernetes:enableSecretMutable": False,
        }
    )
    preview = stack.preview()
    assert preview.errors() == [], preview.errors()
    planned = {**preview.ops(":ConfigMap"), **preview.ops(":Secret"), **preview.ops(":StatefulSet")}
    for name in ("bootstrap", "user", APP):
        assert "delete-replaced" in planned[name], planned
    print(f"revision 2 -> 3 with the provider's defaults, planned: {planned}")
