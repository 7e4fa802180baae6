"""Fixtures for the application tests: a real Kafka-protocol broker, never a mock."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.embedded_broker import EmbeddedBroker

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
