# syntax=docker/dockerfile:1.7
# The processor image; it also runs the topic reconciler Job (`python -m app.admin.reconcile`).
#
#   docker build -t stateful-streaming/processor:0.1.0 .
#
# Only what the processor and the topic reconciler run goes in (pyproject group `runtime`; the
# local run, the load generator, the benchmarks and the local Apache Kafka are in `app` only). The
# Pulumi program and the policy pack have their own, incompatible environment (protobuf 5 vs 6,
# see DESIGN.md). Pin the base by digest in a fork (`python:3.11.14-slim-bookworm@sha256:...`):
# a tag can move. CI sets the OCI labels' build arguments:
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t stateful-streaming/processor:0.1.0 .

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv
RUN pip install --no-cache-dir "uv>=0.9,<1"
WORKDIR /src
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-default-groups --group runtime --python /usr/local/bin/python3.11
# What runs in the image and nothing else: the processor, the cluster-side jobs and sidecar
# (app/admin/), the client helpers both use (app/clients/) and the specs they read. The developer
# kit (devkit/: the local run, the load generator, the benchmarks, the local Apache Kafka)
# stays out (.dockerignore keeps it out of the build context as well).
COPY app/__init__.py /app/app/
COPY app/processor/ /app/app/processor/
COPY app/admin/ /app/app/admin/
COPY app/clients/ /app/app/clients/
# The pipelines' aggregations (`aggregation.class` names one; the processor imports it by name).
COPY app/pipelines/ /app/app/pipelines/
# The contract the processor shares with the Pulumi program and the policy pack (standard
# library only): its keys, defaults and rules, and the properties codec.
COPY contract/ /app/contract/
RUN python -m compileall -q /app/app /app/contract

FROM ${PYTHON_IMAGE}
# Spark 4 runs on Java 17; bookworm is the Debian release that packages it. procps: Spark's
# launch scripts call `ps`; tini: PID 1 that forwards SIGTERM and reaps the JVM's children.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/* \
    # One JAVA_HOME for amd64 and arm64 builds alike.
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
    && groupadd --gid 10001 processor \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin processor
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
# Read-only root filesystem in the pod: everything Spark and Python write goes to /tmp (an
# emptyDir) or to the state volume (state.dir).
ENV PATH=/opt/venv/bin:$PATH \
    JAVA_HOME=/opt/java \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYTHONPATH=/app \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The Spark driver's class-data-sharing archive (AppCDS), built by a training run against this
# image's JVM and jars: every start maps it (class.data.archive=auto) and saves 3-6 s. The JVM's
# own base archive first, in case the JDK package shipped none. SPARK_LOCAL_IP: Spark looks its
# host's name up at start, and a builder's /etc/hosts need not hold it (buildah's does not).
RUN java -Xshare:dump >/dev/null \
    && HOME=/tmp SPARK_LOCAL_IP=127.0.0.1 python -m app.processor.class_archive_build --out /opt/venv/share/processor/spark-classes.jsa \
    && rm -rf /tmp/* /tmp/.[!.]*
# Last, so that a new revision or build date does not invalidate the cached layers above.
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=https://github.com/example/stateful-streaming
LABEL org.opencontainers.image.title="stateful-streaming-processor" \
      org.opencontainers.image.description="Stateful PySpark stream processor and topic reconciler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
WORKDIR /app
USER 10001:10001
EXPOSE 8080
# tini is PID 1 (it forwards SIGTERM to Python and reaps the JVM's children); the pods set only
# `args` (a whole command line, as CMD here), never `command`, which would replace tini.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "app.processor", "--properties", "/etc/processor/processor.properties"]
