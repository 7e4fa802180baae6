"""Fixtures for the application tests: Apache Kafka itself, never a mock or a stand-in.

One 3-node KRaft cluster of the project's Apache Kafka release (`devkit.kafka_release`, resolved
by `make setup`; `KAFKA_HOME` names another distribution) serves the session, with the production
broker settings: replication factor 3, `min.insync.replicas=2`. `KAFKA_BOOTSTRAP_SERVERS` points the
tests that only need a broker at a running Apache Kafka instead; the tests that stop, kill or secure
brokers always start their own.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator

import pytest

from devkit.kraft_cluster import KraftCluster
from tests.app.processor_harness import CALL_FAILED

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


@pytest.fixture(scope="session")
def kraft_cluster(request: pytest.FixtureRequest) -> Iterator[KraftCluster]:
    """The session's 3-node Apache Kafka KRaft cluster. Tests that stop a node must bring it
    back (`restart_node`/`start_node` and `wait_until_fully_replicated`) before they return:
    the cluster is shared."""
    with KraftCluster() as cluster:
        yield cluster
        if request.session.testsfailed:
            # Keep the files and show the brokers' side of whatever failed (teardown output
            # is captured, so write to the terminal itself).
            terminal = request.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_sep("-", "Apache Kafka test cluster: log tails")
                terminal.write_line(cluster.log_tails())
            cluster.close(keep_files=True)


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """`bootstrap.servers` under test: $KAFKA_BOOTSTRAP_SERVERS (a running Apache Kafka), else
    the session's KRaft cluster."""
    if configured := os.environ.get(BOOTSTRAP_ENV):
        return configured
    cluster: KraftCluster = request.getfixturevalue("kraft_cluster")
    return cluster.bootstrap_servers


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note whether a test's own call failed, for its fixtures' teardown (`call_failed`)."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report
