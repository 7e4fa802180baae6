# Two commands for a fresh machine (see README): `make run` and `make test`.
# Everything else here is what those two are made of.

PYTHON ?= python3.11
VENV   := .venv
UV     := $(VENV)/tools/bin/uv
STACK  ?= dev

INFRA_PY   := $(VENV)/infra/bin/python
APP_PY     := $(VENV)/app/bin/python
CHECKOV_PY := $(VENV)/checkov/bin/python

# uv resolves and installs the three environments from pyproject.toml + uv.lock;
# it is bootstrapped into a small venv of its own so nothing global is touched.
$(UV):
	$(PYTHON) -m venv $(VENV)/tools
	$(VENV)/tools/bin/pip install --quiet --disable-pip-version-check "uv>=0.9,<1"

# Compiled to bytecode once, at install, as in the image (UV_COMPILE_BYTECODE there): where
# PYTHONDONTWRITEBYTECODE is set (the image, CI machines, this one) Python writes no cache, and
# every process would compile the sources of what it imports at each start: pyspark's, pandas'
# and pyarrow's cost a quiet processor restart 1.0 s of its imports and 1.6 s of its SparkSession
# (docs/benchmarks.md, "Restarts with the state kept"), the Pulumi program's imports 1.1 s.
define sync_env
	UV_PROJECT_ENVIRONMENT=$(VENV)/$(1) $(UV) sync --frozen --quiet --compile-bytecode --python $(PYTHON) --no-default-groups $(2)
	touch $@
endef

$(VENV)/infra/.synced: pyproject.toml uv.lock | $(UV)
	$(call sync_env,infra,--group infra --group test)
$(VENV)/app/.synced: pyproject.toml uv.lock | $(UV)
	$(call sync_env,app,--group app --group test)
$(VENV)/checkov/.synced: pyproject.toml uv.lock | $(UV)
	$(call sync_env,checkov,--group checkov)

# The Spark driver's class-data-sharing archive for this environment's JVM and jars (a training
# run, about a minute, once): every processor start maps it and saves 3-6 s. Optional: without
# it the processor starts as usual, so a failed build only says so.
CLASS_ARCHIVE := $(VENV)/app/share/processor/spark-classes.jsa
$(CLASS_ARCHIVE): $(VENV)/app/.synced
	@echo "building the Spark class archive $@ (a training run, about a minute, once)"
	$(APP_PY) -m app.processor.class_archive_build --out $@ >$(VENV)/class-archive.log 2>&1 \
		|| echo "no Spark class archive (see $(VENV)/class-archive.log); going on without it"

# Apache Kafka's released jars (org.apache.kafka:kafka_2.13, kafka-tools and kafka-streams at the
# version devkit/kafka_release.py pins, with their runtime dependencies), resolved by Maven from
# Maven Central and checked: the broker of the local run, the tests and the benchmarks, and the
# Kafka Streams reference the benchmarks run beside the processor. Checked again at every use; a partial
# or corrupt cache is fetched again.
KAFKA_RELEASE := $(VENV)/kafka/.resolved
$(KAFKA_RELEASE): devkit/kafka_release.py $(VENV)/app/.synced
	$(APP_PY) -m devkit.kafka_release
	touch $@

.PHONY: setup run test render check policy-pack bench lint lock clean
setup: $(VENV)/infra/.synced $(VENV)/app/.synced $(VENV)/checkov/.synced $(KAFKA_RELEASE) $(CLASS_ARCHIVE)

## The main job on the embedded default, no cluster needed: a 3-node Apache Kafka, the topics,
## 1,000 page views/s and three processor instances in hand-off mode as local processes, rolled
## once mid-run as the StatefulSet controller rolls pods; live progress, Ctrl-C to stop.
## Options: make run ARGS="--help".
run: $(VENV)/app/.synced $(KAFKA_RELEASE) $(CLASS_ARCHIVE)
	$(APP_PY) -m devkit.local $(ARGS)

## All tests: the application in its own environment, on a 3-node Apache Kafka it starts
## (KAFKA_BOOTSTRAP_SERVERS: a running one instead); then program, manifests and policies in the
## infra environment, with the program and the pack in Pulumi's own engine against a local
## Kubernetes control plane (tests/engine) and `pulumi new` from this template (test_template);
## then, as root, the dev stack on a real node (tests/node: a session of its own, as the engine
## tier's control plane stays up for the whole of its session and a node starts its own).
## The infra and engine tiers need the Go tools, the node tier the node's parts as well (`make
## tools node-parts`: about 30 minutes on a cold machine, a no-op once built; the caches are
## outside the clone). They build in the background, on the CPU the tests leave idle
## (devkit/kube/niced_build.py says how): the tools while the application's tests and then the
## pack's run (neither needs them), the node's parts while the infra and engine tiers run. The
## pack's and the program's tests run on TEST_WORKERS pytest-xdist workers, a file at a time,
## the files of the long tests first (tests/long_first.py); the engine's in one process, as they
## share the control plane it starts. The slowest tests are listed at the end of each run: CI
## must stay under 75 minutes on 2 cores from a cold machine.
NICED_BUILD := $(PYTHON) devkit/kube/niced_build.py
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(NICED_BUILD) start -- $(MAKE) --no-print-directory tools lint-packages
	$(APP_PY) -m pytest --durations=30 tests/app || { $(NICED_BUILD) stop; exit 1; }
	$(INFRA_PY) -m pytest $(XDIST) --durations=15 tests/policies || { $(NICED_BUILD) stop; exit 1; }
	$(NICED_BUILD) wait
	$(NICED_BUILD) start -- $(MAKE) --no-print-directory node-parts
	$(INFRA_PY) -m pytest $(XDIST) --durations=15 tests/infra || { $(NICED_BUILD) stop; exit 1; }
	$(INFRA_PY) -m pytest --durations=15 tests/engine || { $(NICED_BUILD) stop; exit 1; }
	$(NICED_BUILD) wait
	$(INFRA_PY) -m pytest --durations=15 tests/node

render: $(VENV)/infra/.synced
	$(INFRA_PY) -m offline.render --stack $(STACK) --out build/manifests/$(STACK)

check: $(VENV)/infra/.synced
	$(INFRA_PY) -m offline.policy_check --stack $(STACK)

## The pack as `pulumi policy publish` takes it (the contract inside): build/policy-pack.
policy-pack:
	rm -rf build/policy-pack
	$(PYTHON) -m policies.bundle build/policy-pack

## The commands behind every table of docs/benchmarks.md, one after another, alone on the machine
## (about three hours on 2 cores; tables and graphs in build/bench/<table>/). One table:
## make bench ARGS="--only crashes"; the list: devkit/bench/tables.py.
bench: $(VENV)/app/.synced $(KAFKA_RELEASE) $(CLASS_ARCHIVE)
	$(APP_PY) -m devkit.bench tables $(ARGS)

## The checks CI runs besides the tests: ruff (lint, format) and mypy, once per environment
## (pulumi-policy and pyspark cannot share one; the configuration is in pyproject.toml).
lint: $(VENV)/infra/.synced $(VENV)/app/.synced
	$(VENV)/infra/bin/ruff check .
	$(VENV)/infra/bin/ruff format --check .
	$(VENV)/infra/bin/mypy infra offline policies contract tests/infra tests/policies tests/kube tests/engine tests/node devkit/kube tests/*.py
	$(VENV)/app/bin/mypy app devkit tests/app --exclude "^devkit/kube/"

lock: | $(UV)
	$(UV) lock

clean:
	rm -rf $(VENV) build

## The Go tools of the engine, kube and node tiers, built from their Go modules at the versions
## pinned in devkit/kube/go_tools.py (pulumi, pulumi-resource-kubernetes, kube-apiserver,
## kube-controller-manager, kube-scheduler, etcd, kwok) into ~/.cache/stateful-streaming-go/bin
## with the Go caches beside them (GO_TOOLS_HOME moves them; outside the clone, so every checkout
## on the machine shares one build); the provider is installed as a plugin under its
## pulumi-home/. Cold: about 25 minutes on 2 cores with GO_TOOLS_JOBS=2 (what `make test`
## uses); then seconds.
## A local control plane on 127.0.0.1 with kwok nodes (no containers): kube-up prints the
## KUBECONFIG path; kube-down stops each process by its pid file (.venv/kube/run/).
.PHONY: tools lint-packages kube-up kube-down test-kube
GO_TOOLS_JOBS ?= 2
tools:
	GO_TOOLS_JOBS=$(GO_TOOLS_JOBS) $(PYTHON) devkit/kube/go_tools.py

## Debian's shellcheck, which actionlint runs over the workflows' `run:` scripts once it is on
## PATH (as root; elsewhere actionlint lints the workflows without it and says nothing).
LINT_PACKAGES := shellcheck
lint-packages:
	@if dpkg -s $(LINT_PACKAGES) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(LINT_PACKAGES); \
	else echo "not root: no $(LINT_PACKAGES) installed; actionlint runs without it"; fi

kube-up:
	@$(PYTHON) devkit/kube/control_plane.py up

kube-down:
	$(PYTHON) devkit/kube/control_plane.py down

## A real node beside the control plane: pods in containers of the project's images (root).
## node-packages: Debian's containerd, runc, CNI plugins, buildah and debootstrap; node-images:
## the base from Debian's packages, the processor image from the Dockerfile, the broker image from
## the Kafka release's jars, the pause image (devkit/kube/images.py; into ~/.cache/stateful-streaming-node,
## built again only when their inputs change); node-up prints the KUBECONFIG path; node-down
## leaves the machine as it was (devkit/kube/node.py says how).
## test-node: `pulumi up` of dev onto it, a count checked exactly, a roll by the controller.
.PHONY: node-packages node-tools node-images node-up node-down test-node node-parts
NODE_PACKAGES := containerd runc containernetworking-plugins buildah debootstrap iptables nftables
node-packages:
	@dpkg -s $(NODE_PACKAGES) >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_PACKAGES); }

node-tools:
	GO_TOOLS_JOBS=$(GO_TOOLS_JOBS) $(PYTHON) devkit/kube/go_tools.py --node

node-images: node-packages $(KAFKA_RELEASE)
	$(PYTHON) devkit/kube/images.py

node-up: node-packages node-tools
	@$(PYTHON) devkit/kube/node.py up

node-down:
	$(PYTHON) devkit/kube/node.py down

test-node: setup node-tools node-images
	$(INFRA_PY) -m pytest --durations=10 tests/node

# What `make test` needs of the real node where it can run one (root); elsewhere tests/node skips,
# saying why.
node-parts:
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory node-tools node-images; \
	else echo "not root: no real node here, tests/node will skip"; fi

## The rendered stacks against the cluster KUBECONFIG names (any: kube-up's, or kind), with
## kubectl on PATH: server-side validation, Pod Security admission, a StatefulSet roll.
test-kube: $(VENV)/infra/.synced
	$(INFRA_PY) -m pytest tests/kube
