"""Fixtures for the application tests: a real Kafka-protocol broker, never a mock."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.embedded_broker import EmbeddedBroker
from app.kraft_cluster import KAFKA_HOME_ENV, KraftCluster

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """`bootstrap.servers` under test: $KAFKA_BOOTSTRAP_SERVERS, else the embedded broker."""
    configured = os.environ.get(BOOTSTRAP_ENV)
    if configured:
        yield configured
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


# -- A real Apache Kafka, for the behaviour the embedded broker lacks ----------------------
#
# Contract (three variables, each with one meaning):
#   KAFKA_BOOTSTRAP_SERVERS         the broker for the ordinary tests (any Kafka-protocol
#                                   broker; the embedded Tansu broker when unset). Never
#                                   taken as proof of Apache Kafka.
#   KAFKA_APACHE_BOOTSTRAP_SERVERS  a running Apache Kafka (4.x) for `apache_kafka` tests.
#   KAFKA_HOME                      an Apache Kafka distribution: the tests start a 3-node
#                                   KRaft cluster from it, once per session.
# To run everything against one Apache cluster, set both bootstrap variables to it.

APACHE_BOOTSTRAP_ENV = "KAFKA_APACHE_BOOTSTRAP_SERVERS"


@pytest.fixture(scope="session")
def kraft_cluster(request: pytest.FixtureRequest) -> Iterator[KraftCluster]:
    """A 3-node Apache Kafka KRaft cluster started from $KAFKA_HOME for the session (skips
    when unset). Tests that stop a node must bring it back (`restart_node`/`start_node` and
    `wait_until_fully_replicated`) before they return: the cluster is shared."""
    if not os.environ.get(KAFKA_HOME_ENV):
        pytest.skip(f"needs {KAFKA_HOME_ENV}: an Apache Kafka 4.x distribution to start")
    cluster = KraftCluster.from_env()
    with cluster:
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
def _apache_bootstrap(request: pytest.FixtureRequest) -> str | None:
    """$KAFKA_APACHE_BOOTSTRAP_SERVERS, else the session's KRaft cluster, else None."""
    if configured := os.environ.get(APACHE_BOOTSTRAP_ENV):
        return configured
    if os.environ.get(KAFKA_HOME_ENV):
        cluster: KraftCluster = request.getfixturevalue("kraft_cluster")
        return cluster.bootstrap_servers
    return None


@pytest.fixture
def apache_kafka(request: pytest.FixtureRequest, _apache_bootstrap: str | None) -> str:
    """`bootstrap.servers` of a real Apache Kafka, for tests of behaviour the embedded broker
    lacks (group coordinator, transaction fencing). Skips when none is configured, naming the
    behaviour from the test's marker: `@pytest.mark.apache_kafka(reason="...")`."""
    if _apache_bootstrap is None:
        marker = request.node.get_closest_marker("apache_kafka")
        lacks = marker.kwargs.get("reason") if marker else None
        pytest.skip(
            f"needs a real Apache Kafka: set {KAFKA_HOME_ENV} to an Apache Kafka 4.x "
            f"distribution or {APACHE_BOOTSTRAP_ENV} to a running cluster"
            + (f"; the embedded broker lacks {lacks}" if lacks else "")
        )
    return _apache_bootstrap
