"""The generated CA's rollover in three `pulumi up`s, as the program renders each of them.

What Kafka makes of each phase (and of a one-step switch) runs in tests/app/test_ca_rollover.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import build_stack_config
from infra.stack_settings import StackConfigError
from offline.render import RecordedStack, record_stack
from tests.infra.conftest import k8s_object, names_of

CA = "tls:index/selfSignedCert:SelfSignedCert"
BROKER_CERTIFICATE = "tls:index/locallySignedCert:LocallySignedCert"
TRUST = "stateful-streaming.io/trust"
CERTIFICATE = "stateful-streaming.io/certificate"


def phase(generation: int, trusted: list[int]) -> RecordedStack:
    return record_stack(
        "prod", {"security": {"caGeneration": generation, "trustedCaGenerations": trusted}}
    )


def ca_names(stack: RecordedStack) -> list[str]:
    return sorted(r.name for r in stack.resources if r.type == CA)


def trust_bundle(stack: RecordedStack) -> str:
    """`ca.crt` of the brokers' TLS Secret (a Pulumi secret: the whole `stringData` is one)."""
    string_data = stack.find("kubernetes:core/v1:Secret", "kafka-credentials-tls").props[
        "stringData"
    ]
    return (string_data.get("value") or string_data)["ca.crt"]


def signer(stack: RecordedStack) -> str:
    """The CA certificate the brokers' certificate is signed with."""
    (certificate,) = [r for r in stack.resources if r.type == BROKER_CERTIFICATE]
    return certificate.props["caCertPem"]


def pod_annotations(stack: RecordedStack, name: str) -> dict[str, Any]:
    return k8s_object(stack, "StatefulSet", name)["spec"]["template"]["metadata"]["annotations"]


def test_one_ca_by_default_keeps_the_name_it_had_before_generations(
    prod: RecordedStack,
) -> None:
    assert ca_names(prod) == ["kafka-credentials-ca"]
    assert trust_bundle(prod) == signer(prod)


def test_phase_1_trusts_both_cas_rolls_brokers_and_clients_and_keeps_the_signer(
    prod: RecordedStack,
) -> None:
    trusting = phase(1, [1, 2])
    old = signer(prod)
    assert ca_names(trusting) == ["kafka-credentials-ca", "kafka-credentials-ca-2"]
    assert signer(trusting) == old  # the same CA resource: the stack keeps its CA
    new = trust_bundle(trusting).removeprefix(old)
    assert new.startswith("-----BEGIN CERTIFICATE-----") and new != old
    processor = names_of(prod).application_id
    for workload, annotation in (("kafka", CERTIFICATE), (processor, TRUST)):
        before, after = pod_annotations(prod, workload), pod_annotations(trusting, workload)
        assert before[annotation] != after[annotation], f"{workload} would not reload its CAs"


def test_phase_2_signs_with_the_new_ca_and_phase_3_drops_the_old_one(prod: RecordedStack) -> None:
    trusting, signing, done = phase(1, [1, 2]), phase(2, [1, 2]), phase(2, [2])
    new = trust_bundle(trusting).removeprefix(signer(prod))
    assert trust_bundle(signing) == trust_bundle(trusting)
    assert signer(signing) == new
    assert (
        pod_annotations(signing, "kafka")[CERTIFICATE]
        != (pod_annotations(trusting, "kafka")[CERTIFICATE])
    )
    assert ca_names(done) == ["kafka-credentials-ca-2"]
    assert trust_bundle(done) == signer(done) == new


@pytest.mark.parametrize(
    ("security", "expected"),
    [
        ({"caGeneration": 2, "trustedCaGenerations": [1]}, "must hold caGeneration (2)"),
        ({"caGeneration": 1, "trustedCaGenerations": [1, 3]}, "two consecutive generations"),
        ({"caGeneration": 2, "trustedCaGenerations": [1, 2, 3]}, "two consecutive generations"),
        ({"caGeneration": 0}, "security.caGeneration = 0"),
        ({"trustedCaGenerations": "1,2"}, "must be a list"),
        (
            {"certificates": "cert-manager", "issuerName": "ca", "caGeneration": 2},
            "rolled over in cert-manager",
        ),
    ],
)
def test_a_rollover_setting_that_is_no_phase_fails_naming_it(
    security: dict[str, Any], expected: str
) -> None:
    with pytest.raises(StackConfigError, match="security") as raised:
        build_stack_config("prod", {"security": security})
    assert expected in str(raised.value)
