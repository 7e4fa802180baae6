"""Apache Kafka's released jars, resolved from Maven Central and cached in the environment.

Apache Kafka publishes every release's broker (`org.apache.kafka:kafka_2.13`) with its runtime
dependencies on Maven Central; the broker and `kafka.tools.StorageTool` run from those jars alone
(`java -cp 'libs/*' kafka.Kafka server.properties`), which is all `devkit.kraft_cluster` needs,
and `org.apache.kafka:kafka-tools` adds the command-line tools the brokers' pods run (`AclCommand`,
what the image's `kafka-acls.sh` starts), and `org.apache.kafka:kafka-streams` the reference the
benchmarks run beside the processor (`devkit.kafka_streams`). So the embedded default is the
real broker, resolved by Maven itself, the ordinary client:

    python -m devkit.kafka_release  # resolve (once) and print the folder
    release = kafka_release.ensure()    # the same from Python: a `KafkaRelease`

The cache is `.venv/kafka/<version>/` (Maven's local repository beside it, so nothing outside the
checkout is touched): `libs/` and a `MANIFEST.sha256` written last, after Maven has checked every
download against its published checksum (`--strict-checksums`). A cache without its manifest, or
whose jars differ from it, is reported and fetched again. `KAFKA_HOME` (an unpacked distribution)
wins over the cache; `KAFKA_BOOTSTRAP_SERVERS` (a running cluster) over both, where a caller
takes one.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# The pinned release; Kafka's log4j2 binding for its slf4j 1.7 API at the log4j the broker
# depends on (the distribution ships the same pair).
KAFKA_VERSION = "4.3.1"
# The release this project ran before: its stacks upgrade by a roll (test_kafka_upgrade.py).
PREVIOUS_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
KAFKA_HOME_ENV = "KAFKA_HOME"
CACHE_ENV = "KAFKA_RELEASE_CACHE"
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO_ROOT / ".venv" / "kafka"
MANIFEST = "MANIFEST.sha256"
MIN_JAVA = 17
MAVEN_TIMEOUT_S = 900.0


def required_jars(version: str) -> tuple[str, ...]:
    """The jars a usable release `version` holds: the broker (and StorageTool), the tools the
    brokers' pods run (kafka-acls.sh's AclCommand, kafka-features.sh's FeatureCommand), and
    Kafka Streams (the benchmarks' reference beside the processor; the distribution ships it
    too). A cache resolved before one was added is fetched again."""
    return (
        f"kafka_{SCALA_VERSION}-{version}.jar",
        f"kafka-tools-{version}.jar",
        f"kafka-streams-{version}.jar",
    )


_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by devkit/kafka_release.py: Apache Kafka {version}'s broker and tools. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.stateful-streaming</groupId>
  <artifactId>kafka-release</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-streams</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>{plugin}</version>
      </plugin>
    </plugins>
  </build>
</project>
"""


def pom(version: str) -> str:
    """The Maven project whose runtime dependencies are Apache Kafka `version`'s jars."""
    return _POM.format(
        version=version, scala=SCALA_VERSION, log4j=LOG4J_VERSION, plugin=DEPENDENCY_PLUGIN_VERSION
    )


class KafkaReleaseError(RuntimeError):
    """The release could not be resolved, or Java or Maven is missing."""


@dataclass(frozen=True)
class KafkaRelease:
    """A folder whose `libs/` holds a Kafka broker's jars (the cache, or `KAFKA_HOME`)."""

    home: Path
    version: str

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def classpath(self) -> str:
        """Every jar of `libs/`, in the JVM's wildcard form."""
        return str(self.libs / "*")


def release_version(home: Path) -> str:
    """The version of the broker jar in `home/libs` (`kafka_2.13-<version>.jar`)."""
    for jar in sorted((home / "libs").glob(f"kafka_{SCALA_VERSION}-*.jar")):
        match = re.fullmatch(rf"kafka_{SCALA_VERSION}-(\d+\.\d+\.\d+)\.jar", jar.name)
        if match:
            return match[1]
    raise KafkaReleaseError(
        f"{home} holds no libs/kafka_{SCALA_VERSION}-<version>.jar: not an Apache Kafka "
        f"distribution; unset {KAFKA_HOME_ENV} to use the project's own ({KAFKA_VERSION})"
    )


def java_command() -> str:
    """The `java` to run Kafka with ($JAVA_HOME/bin/java, else the one on PATH), Java 17+."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise KafkaReleaseError(
            f"no java found ({'JAVA_HOME=' + java_home if java_home else 'none on PATH'}): "
            f"Apache Kafka {KAFKA_VERSION} and Spark need Java {MIN_JAVA}; install it "
            "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    output = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', output)
    major = int(match[1]) if match else 0
    if major == 1 and match and match[2]:  # "1.8.0_..." is Java 8
        major = int(match[2])
    if major < MIN_JAVA:
        raise KafkaReleaseError(
            f"{java} is Java {major or 'of unknown version'}; Apache Kafka {KAFKA_VERSION} "
            f"needs Java {MIN_JAVA} or newer (set JAVA_HOME to one)"
        )
    return java


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _write_manifest(libs: Path) -> None:
    lines = [f"{_digest(jar)}  {jar.name}\n" for jar in sorted(libs.glob("*.jar"))]
    (libs.parent / MANIFEST).write_text("".join(lines), encoding="utf-8")


def cache_problem(home: Path, version: str = KAFKA_VERSION) -> str | None:
    """Why the cached release `version` at `home` cannot be used (None: complete and intact)."""
    manifest = home / MANIFEST
    if not manifest.is_file():
        return f"{manifest} is missing (an interrupted fetch)"
    expected = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        expected[name] = digest
    jars = {jar.name for jar in (home / "libs").glob("*.jar")}
    if missing := sorted(set(expected) - jars):
        return f"jars listed in {manifest} are missing: {', '.join(missing[:5])}"
    if extra := sorted(jars - set(expected)):
        return f"jars not in {manifest} were added: {', '.join(extra[:5])}"
    for name, digest in expected.items():
        if _digest(home / "libs" / name) != digest:
            return f"{home / 'libs' / name} does not match its checksum in {manifest}"
    for jar in required_jars(version):
        if jar not in expected:
            return f"{manifest} lists no {jar}"
    return None


def _resolve(cache: Path, version: str) -> None:
    """Resolve the release into `cache/<version>` with Maven (replacing whatever is there)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaReleaseError(
            f"Apache Kafka {version} is resolved from Maven Central with Maven, and no "
            "mvn is on PATH: install it (Debian: apt-get install maven), or set "
            f"{KAFKA_HOME_ENV} to an unpacked Apache Kafka distribution"
        )
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
    try:
        (work / "pom.xml").write_text(pom(version), encoding="utf-8")
        command = [
            mvn, "--batch-mode", "--no-transfer-progress", "--strict-checksums",
            "-f", str(work / "pom.xml"),
            f"-Dmaven.repo.local={cache / 'm2'}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={work / 'libs'}",
        ]  # fmt: skip
        print(
            f"resolving Apache Kafka {version} (org.apache.kafka:kafka_{SCALA_VERSION}, "
            f"kafka-tools, kafka-streams and their runtime jars, about 130 MB) from Maven Central "
            f"into {cache} "
            "...",
            file=sys.stderr,
            flush=True,
        )
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            raise KafkaReleaseError(
                f"Maven could not resolve Apache Kafka {version} (exit code "
                f"{result.returncode}; is Maven Central reachable?): {' '.join(command)}\n"
                + result.stdout[-3000:]
            )
        _write_manifest(work / "libs")
        target = cache / version
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure(cache: Path | None = None, version: str = KAFKA_VERSION) -> KafkaRelease:
    """The Kafka to run: `KAFKA_HOME` when set (for the project's release), else the cached
    release `version` (resolved on first use, fetched again when partial or corrupt). Another
    version than the project's is for an upgrade from it (`KraftCluster.start_node`)."""
    if version == KAFKA_VERSION and (kafka_home := os.environ.get(KAFKA_HOME_ENV)):
        home = Path(kafka_home)
        return KafkaRelease(home, release_version(home))
    cache = cache or Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    home = cache / version
    if home.exists():
        problem = cache_problem(home, version)
        if problem is None:
            return KafkaRelease(home, version)
        print(
            f"the cached Apache Kafka {version} in {home} is unusable ({problem}): "
            "fetching it again",
            file=sys.stderr,
            flush=True,
        )
    _resolve(cache, version)
    if problem := cache_problem(home, version):
        raise KafkaReleaseError(f"the Apache Kafka {version} just resolved: {problem}")
    return KafkaRelease(home, version)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m devkit.kafka_release`: resolve the release (and check Java); print its
    folder."""
    parser = argparse.ArgumentParser(
        prog="python -m devkit.kafka_release",
        description=f"Resolve Apache Kafka {KAFKA_VERSION}'s jars from Maven Central into "
        f"{DEFAULT_CACHE} (once), check them and Java {MIN_JAVA}; print the folder.",
    )
    parser.add_argument("--cache", type=Path, help=f"cache folder (default {DEFAULT_CACHE})")
    parser.add_argument(
        "--version",
        default=KAFKA_VERSION,
        help=f"another release, to upgrade from (default {KAFKA_VERSION}, the project's)",
    )
    args = parser.parse_args(argv)
    try:
        java_command()
        release = ensure(args.cache, args.version)
    except KafkaReleaseError as exc:
        print(f"python -m devkit.kafka_release: {exc}", file=sys.stderr)
        return 1
    print(release.home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
