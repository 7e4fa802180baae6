"""The pack as the Pulumi CLI launches it: `python <pack dir>` with the pack directory as the
program directory (so `rules` must import without the repository on sys.path), serving the
Analyzer gRPC service on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import proto
from pulumi.runtime.proto import analyzer_pb2_grpc

from policies.bundle import LEFT_OUT, bundle
from tests.policies.handmade_stack import handmade_stack

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module", params=["policies", "published-pack-0.1.0"])
def analyzer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    """The pack served from the repository, and from a copy under another directory name, as
    `pulumi policy publish` unpacks the bundle `policies.bundle` writes (the rules and the
    contract must import either way)."""
    pack_dir = PACK_DIR
    if request.param != "policies":
        pack_dir = bundle(tmp_path_factory.mktemp("published") / request.param)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, str(pack_dir)],
        cwd=pack_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None  # both are PIPEs
    try:
        port = process.stdout.readline().strip()  # PolicyPack prints its port, then serves
        if not port.isdigit():
            process.kill()
            pytest.fail(f"pack did not start: {port!r} {process.stderr.read()}")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.kill()
        process.wait(timeout=10)


def test_pack_serves_every_policy_with_its_level_and_schema(analyzer, policies) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "stateful-streaming"
    served = {p.name: p for p in info.policies}
    assert set(served) == {p.name for p in policies}
    assert served["kafka-quorum-size"].enforcementLevel == proto.MANDATORY
    # The pack's own levels are prod's (fail closed): a preview without a config blocks what
    # prod blocks, and only config.dev.json relaxes them.
    assert all(
        p.enforcementLevel == proto.MANDATORY
        for p in served.values()
        if p.name
        in {"standby-state", "kafka-listener-encryption", "kafka-authorizer", "pinned-images"}
    )
    schema = json_format.MessageToDict(served["changelog-segment-size"].configSchema)
    assert schema["properties"]["maxSegmentBytes"]["default"] == 67108864


def test_pack_analyzes_a_resource_over_grpc(analyzer) -> None:
    kafka = next(r for r in handmade_stack() if r.name == "kafka")
    kafka.props["spec"]["replicas"] = 1
    properties = struct_pb2.Struct()
    properties.update(kafka.props)
    response = analyzer.Analyze(
        proto.AnalyzeRequest(type=kafka.type, properties=properties, urn=kafka.urn, name="kafka")
    )
    fired = {d.policyName: d for d in response.diagnostics}
    assert "kafka-quorum-size" in fired
    assert "spec.replicas is 1; required: an odd number >= 3" in fired["kafka-quorum-size"].message


def test_a_pack_directory_without_the_contract_exits_at_once_saying_how_to_bundle_it(
    tmp_path: Path,
) -> None:
    alone = tmp_path / "pack-alone"
    shutil.copytree(PACK_DIR, alone, ignore=LEFT_OUT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, str(alone)],
        cwd=alone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode != 0
    assert f"no contract/ in {alone} or beside it" in ran.stderr
    assert "python -m policies.bundle" in ran.stderr
