"""Apache Kafka's released jars: resolved by Maven, checked at every use, fetched again when the
cache is partial or corrupt; a missing Java or a wrong `KAFKA_HOME` is named with what to do.

The cache under test is a copy of the one `make setup` resolved, beside the same Maven local
repository, so fetching again runs the real Maven without downloading anything twice.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devkit import kafka_release
from devkit.kafka_release import (
    KAFKA_VERSION,
    MANIFEST,
    KafkaReleaseError,
    cache_problem,
    ensure,
    java_command,
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the resolved release, its Maven repository shared with the real cache."""
    monkeypatch.delenv(kafka_release.KAFKA_HOME_ENV, raising=False)
    monkeypatch.delenv(kafka_release.CACHE_ENV, raising=False)
    resolved = ensure()
    copy = tmp_path / "kafka"
    shutil.copytree(resolved.home, copy / KAFKA_VERSION)
    (copy / "m2").symlink_to(resolved.home.parent / "m2")
    return copy


def test_the_resolved_release_holds_the_broker_its_storage_tool_and_a_log4j2_binding() -> None:
    release = ensure()
    jars = {jar.name for jar in release.libs.glob("*.jar")}
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in jars  # kafka.Kafka and kafka.tools.StorageTool
    assert f"kafka-clients-{KAFKA_VERSION}.jar" in jars
    assert any(name.startswith("log4j-slf4j-impl-") for name in jars)
    assert cache_problem(release.home) is None


def test_a_corrupt_jar_is_detected_and_fetched_again_with_a_message_that_says_so(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jar = cache / KAFKA_VERSION / "libs" / f"kafka-clients-{KAFKA_VERSION}.jar"
    jar.write_bytes(jar.read_bytes()[:1000])  # a download cut short
    assert "does not match its checksum" in (cache_problem(cache / KAFKA_VERSION) or "")

    release = ensure(cache)

    err = capsys.readouterr().err
    assert f"the cached Apache Kafka {KAFKA_VERSION} in {cache / KAFKA_VERSION} is unusable" in err
    assert "does not match its checksum" in err and "fetching it again" in err
    assert cache_problem(release.home) is None
    assert jar.stat().st_size > 1000


def test_a_cache_without_its_manifest_is_a_partial_fetch_and_is_fetched_again(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cache / KAFKA_VERSION / MANIFEST).unlink()
    (cache / KAFKA_VERSION / "libs" / f"kafka_2.13-{KAFKA_VERSION}.jar").unlink()

    release = ensure(cache)

    assert "an interrupted fetch" in capsys.readouterr().err
    assert (release.libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file()
    assert cache_problem(release.home) is None


def test_a_missing_java_is_named_with_the_version_kafka_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(KafkaReleaseError) as raised:
        java_command()
    message = str(raised.value)
    assert f"JAVA_HOME={tmp_path / 'no-jdk'}" in message
    assert "need Java 17" in message


def test_kafka_home_wins_and_one_without_a_broker_jar_is_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_jar = ensure().libs / f"kafka_2.13-{KAFKA_VERSION}.jar"
    monkeypatch.setenv(kafka_release.KAFKA_HOME_ENV, str(tmp_path))
    with pytest.raises(KafkaReleaseError) as raised:
        ensure()
    assert f"{tmp_path} holds no libs/kafka_2.13-<version>.jar" in str(raised.value)
    assert "unset KAFKA_HOME" in str(raised.value)

    (tmp_path / "libs").mkdir()
    shutil.copy(broker_jar, tmp_path / "libs")
    assert ensure() == kafka_release.KafkaRelease(tmp_path, KAFKA_VERSION)
