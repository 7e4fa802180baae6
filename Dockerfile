# syntax=docker/dockerfile:1.7
# The processor image; it also runs the topic reconciler Job (`python -m app.topics`).
#
#   docker build -t stateful-streaming/processor:0.1.0 .
#
# Only the application environment (pyproject group `app`) goes in: the Pulumi program and
# the policy pack have their own, incompatible one (protobuf 5 vs 6, see DESIGN.md).
# Pin the base by digest in a fork (`python:3.11.14-slim-bookworm@sha256:...`): a tag can move.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv
RUN pip install --no-cache-dir "uv>=0.9,<1"
WORKDIR /src
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-default-groups --group app --python /usr/local/bin/python3.11
COPY app/ /app/app/
# The properties codec the processor shares with the policy pack (standard library only).
COPY policies/__init__.py /app/policies/
COPY policies/rules/__init__.py policies/rules/java_properties.py /app/policies/rules/
RUN python -m compileall -q /app/app /app/policies

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
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /app
USER 10001:10001
EXPOSE 8080
# tini is PID 1 (it forwards SIGTERM to Python and reaps the JVM's children); the pods set only
# `args` (a whole command line, as CMD here), never `command`, which would replace tini.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "-m", "app.processor", "--properties", "/etc/processor/processor.properties"]
