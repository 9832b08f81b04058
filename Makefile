# Every command the README gives goes through here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# `make preview`: both layers of ENV; `make preview STACK=<name>`: one stack of either layer.
# ENV from the command line only: POSIX shells export ENV as their startup file's path.
ENV    := $(if $(filter command line,$(origin ENV)),$(ENV),dev)
OUT    ?= out

# pip and setuptools in every virtualenv made here, and first in each image on the Python
# base (workloads/images, which also removes the base's wheel: the virtualenvs have none),
# past the ones Python 3.11.7's venv module and that image put there (pip 23.2.1,
# setuptools 65.5.0 or 65.5.1), which the advisory database names (tests/checks/security.py
# audits the virtualenvs); setuptools as the build backend pyproject.toml pins.
VENV_TOOLS := pip==26.3 setuptools==84.2.1
# Each virtualenv's stamp depends on this file too: a changed pin here reinstalls them
# (uv: seconds), where a checkout set up before would keep what it had.

CORE_STAMP := $(VENV)/.core-installed
FULL_STAMP := $(VENV)/.full-installed
# checkov pins packages that conflict with ours (packaging, networkx, boto3): own virtualenv.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CHECKOV_PIN   := checkov==3.3.30
# The MLflow tracking server as its image runs it (workloads/images/tracking.Dockerfile), and
# the moto server the tracking tests use for S3 and Secrets Manager: MLflow's server and
# moto pin python-dateutil and botocore below what the project's environment holds.
TRACKING_VENV  := .venv-tracking
TRACKING_STAMP := $(TRACKING_VENV)/.installed
TRACKING_PINS  := mlflow[auth]==3.17.2 psycopg[binary]==3.3.2 boto3==1.44.8 moto[server]==5.2.5
# The Feast SDK and feature server as the features image runs them
# (workloads/images/features.Dockerfile): Feast pins pandas, protobuf and SQLAlchemy apart
# from the project's environment. s3fs reads the offline Parquet from S3; mlflow-skinny
# registers training datasets in the lineage.
FEATURES_VENV  := .venv-features
FEATURES_STAMP := $(FEATURES_VENV)/.installed
FEATURES_PINS  := feast[redis,aws]==0.66.0 s3fs==2026.9.0 mlflow-skinny==3.17.2
# Hypothesis, for the online reader's equivalence with Feast (tests/services/feature_reader_check.py),
# which runs beside Feast; not in the image.
FEATURES_TEST_PINS := hypothesis==6.170.17
# MLServer (Apache-2.0), a KServe v2 gRPC server, for the serving benchmark's measurement
# through a real server (bench/serve_server.py), and its smoke run in `make test` (tests/bench).
# uvloop stays below 0.22:
# MLServer 1.7.1's workers call asyncio.get_event_loop() before any loop runs, which newer
# uvloop refuses.
MLSERVER_VENV  := .venv-mlserver
MLSERVER_STAMP := $(MLSERVER_VENV)/.installed
MLSERVER_PINS  := mlserver==1.7.1 onnxruntime==1.31.1 uvloop==0.21.0
# Apache Airflow, the pipeline engine (docs/pipelines.md): the golden-path DAG
# (workloads/pipeline/dag.py) runs on it, in `make test` and `make demo` with its own
# `dag.test()`. Airflow pins SQLAlchemy, FastAPI and pendulum apart from the project's
# environment; its steps run in the other virtualenvs, as in the cluster they run in their images.
PIPELINES_VENV  := .venv-pipelines
PIPELINES_STAMP := $(PIPELINES_VENV)/.installed
PIPELINES_PINS  := "apache-airflow[postgres]==3.3.2" kubernetes==36.0.0 boto3==1.44.8
# DeepSpeed for `make smoke` only: the deepspeed framework preset's rendered command, run
# with a real DeepSpeed on CPU (tests/frameworks/smoke_deepspeed.py).
DEEPSPEED_VENV  := .venv-deepspeed
DEEPSPEED_STAMP := $(DEEPSPEED_VENV)/.installed
DEEPSPEED_PINS  := torch==2.13.0 deepspeed==0.19.8
# The IAM policy evaluator the request paths run on (tests/iam, and the preview diff's paths
# opened and closed: infra/checks/iam), from npm.
IAM_STAMP     := infra/checks/iam/node_modules/.installed
# uv installs `.venv` and the virtualenvs beside it for `make setup` (tests/install.py passes
# it this machine's pip settings; `make preview` alone installs `.venv` with pip): the same
# packages as pip resolves, in a fraction of the CPU.
# They are installed without bytecode; Python writes a module's on its first import, so only
# what runs is compiled, once. PYTHONDONTWRITEBYTECODE would make every process compile
# again, so make passes it on to nothing it runs.
UV_VENV  := .venv-uv
UV_STAMP := $(UV_VENV)/.installed
UV_PIN   := uv==0.13.9
INSTALL  := $(UV_VENV)/bin/python tests/install.py
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup setup-core services preview test fuzz check verify bench smoke mutate demo up clean

# The program, the preview and the policy pack: enough for `make preview`.
setup-core: $(CORE_STAMP)
$(CORE_STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(VENV_TOOLS) -e .
	@touch $@

# Everything: tests, workloads (torch==2.13.0 is the local CPU wheel), serving, benchmarks,
# and checkov in its own virtualenv.
setup: $(FULL_STAMP) $(CHECKOV_STAMP) $(TRACKING_STAMP) $(FEATURES_STAMP) $(IAM_STAMP) $(MLSERVER_STAMP) \
       $(PIPELINES_STAMP)
# The core's packages come with the rest, from uv: pip would resolve them again first.
$(FULL_STAMP): pyproject.toml Makefile $(UV_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(INSTALL) $(VENV) $(VENV_TOOLS) -e '.[test,workloads,serve,bench,monitor]'
	@touch $(CORE_STAMP) $@
$(CHECKOV_STAMP): Makefile $(UV_STAMP)
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(INSTALL) $(CHECKOV_VENV) $(VENV_TOOLS) $(CHECKOV_PIN)
	@touch $@
$(TRACKING_STAMP): Makefile $(UV_STAMP)
	@test -x $(TRACKING_VENV)/bin/python || $(PYTHON) -m venv $(TRACKING_VENV)
	$(INSTALL) $(TRACKING_VENV) $(VENV_TOOLS) $(TRACKING_PINS)
	@touch $@
$(FEATURES_STAMP): Makefile $(UV_STAMP)
	@test -x $(FEATURES_VENV)/bin/python || $(PYTHON) -m venv $(FEATURES_VENV)
	$(INSTALL) $(FEATURES_VENV) $(VENV_TOOLS) $(FEATURES_PINS) $(FEATURES_TEST_PINS)
	@touch $@
$(MLSERVER_STAMP): Makefile $(UV_STAMP)
	@test -x $(MLSERVER_VENV)/bin/python || $(PYTHON) -m venv $(MLSERVER_VENV)
	$(INSTALL) $(MLSERVER_VENV) $(VENV_TOOLS) $(MLSERVER_PINS)
	@touch $@
$(PIPELINES_STAMP): Makefile $(UV_STAMP)
	@test -x $(PIPELINES_VENV)/bin/python || $(PYTHON) -m venv $(PIPELINES_VENV)
	$(INSTALL) $(PIPELINES_VENV) $(VENV_TOOLS) $(PIPELINES_PINS)
	@touch $@
$(UV_STAMP): Makefile
	@test -x $(UV_VENV)/bin/python || $(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install --quiet --disable-pip-version-check $(VENV_TOOLS) $(UV_PIN)
	@touch $@
$(IAM_STAMP): infra/checks/iam/package-lock.json
	@command -v npm >/dev/null || { echo "make setup needs Node.js 20 and npm for the IAM evaluator: install them (Debian/Ubuntu: sudo apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix infra/checks/iam --no-audit --no-fund --loglevel=error
	@touch $@

# The services tests start real servers: registries (Debian's docker-registry, the CNCF
# distribution registry) copied with skopeo, PostgreSQL for MLflow, Redis for Feast; the
# feature-freshness alert is evaluated by promtool (Debian's prometheus); the drift check
# pushes to a real Pushgateway (Debian's prometheus-pushgateway). Installed here
# where apt-get may run (root, or sudo without a password), otherwise one line says what
# to install.
SERVICE_TOOLS := skopeo docker-registry openssl redis-server prometheus-pushgateway
services:
	@missing=""; for tool in $(SERVICE_TOOLS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi; \
	if [ "$$sudo" = none ] || ! command -v apt-get >/dev/null; then \
	  echo "make test needs$$missing: install them (Debian/Ubuntu: sudo apt-get install$$missing)"; exit 1; fi; \
	echo "installing$$missing with apt-get"; \
	$$sudo apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null 2>&1 \
	  || { echo "make test needs$$missing: apt-get could not install them; install them by hand"; exit 1; }

preview: setup-core
ifdef STACK
	$(BIN)/mlplat preview --stack $(STACK) --json $(OUT)/$(STACK).json \
	  --markdown $(OUT)/$(STACK).md --manifests $(OUT)/$(STACK)-manifests
else
	$(BIN)/mlplat preview --env $(ENV) --out $(OUT)
endif

# The virtualenvs and npm install side by side (-j3): about 50 s of a fresh machine's
# `make test` on 2 cores (bench/results/make-test-time-*.json).
# The tests run on every core (pytest-xdist), a file at a time per worker (tests/conftest.py
# groups them), so each file's servers start once; `make test PYTEST_ARGS=...` passes more.
PYTEST_ARGS ?=
test:
	@$(MAKE) --no-print-directory -j3 setup services
	$(BIN)/python -m pytest -n auto --dist loadgroup $(PYTEST_ARGS)

# The property-based tests of the readers of user files, for longer: FUZZ_EXAMPLES examples
# a test (default 20,000), random each run (`make fuzz FUZZ_EXAMPLES=200000`).
FUZZ_EXAMPLES ?= 20000
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -m fuzz -p no:cacheprovider

# The inner loop, about a minute on 2 cores: the unit tests, the policy pack's rule table
# and red-team programs (tests/policy), and dev's preview through the CLI; no servers, no
# torchrun, no docs check. `make test` runs all of it and the rest.
check: setup
	$(BIN)/python -m pytest -n auto --dist loadgroup -m "not slow" -p no:cacheprovider tests/unit tests/policy
	$(BIN)/mlplat preview --stack dev --quiet

# Checks of what will be applied: every chart rendered and judged as the API server and the
# registry will (tests/rendered), the manifests, checkov, the GitHub workflows (schema,
# zizmor), and the security scan (pip-audit on what setup installed, bandit on our Python;
# tests/checks/security.py). `make test` runs them too.
verify: setup
	$(BIN)/python -m pytest -n auto --dist loadgroup tests/rendered tests/checks tests/manifests

# The other frameworks' presets with the frameworks themselves, where they install on CPU:
# DeepSpeed (about 1 GB and 80 s on its first start, so not part of `make test`).
smoke: setup $(DEEPSPEED_STAMP)
	$(BIN)/python tests/frameworks/smoke_deepspeed.py --venv $(DEEPSPEED_VENV)
$(DEEPSPEED_STAMP): Makefile $(UV_STAMP)
	@test -x $(DEEPSPEED_VENV)/bin/python || $(PYTHON) -m venv $(DEEPSPEED_VENV)
	$(INSTALL) $(DEEPSPEED_VENV) $(VENV_TOOLS) $(DEEPSPEED_PINS)
	@touch $@

# Mutation testing (bench/mutate.py): mutmut plants one bug at a time in the training data,
# metrics and shapes, the checkpoint store, the ONNX export, the request log, and the
# residency and egress rules, and runs the tests that reach each; scores and every survivor
# explained go to bench/results/mutation.json. mutmut runs in a copy of the checkout under
# /tmp, so no mutant is ever written here. Why mutmut, and not cosmic-ray: it runs only the
# tests that reach the mutated function, and forks each mutant from a process that has
# imported torch and the tests already (bench/mutate.py). Each module gets MUTATE_BUDGET
# seconds: on 2 busy cores only the request log finished within 40 minutes, so a full run
# takes up to 5 x 30 minutes; a second run resumes where one stopped.
MUTATE_BUDGET ?= 1800
MUTATE_STAMP  := $(VENV)/.mutate-installed
mutate: setup $(MUTATE_STAMP)
	$(BIN)/python bench/mutate.py --budget-s $(MUTATE_BUDGET)
$(MUTATE_STAMP): $(FULL_STAMP)
	$(INSTALL) $(VENV) -e '.[mutate]'
	@touch $@

# The golden path on one machine (docs/pipelines.md): the local servers the golden-path test
# uses (PostgreSQL, MLflow, moto S3, Redis with Feast), one run of the DAG with Airflow's
# dag.test() on CPU, then the served version's lineage back to the dataset.
demo: setup services
	$(BIN)/python -m tests.services.pipeline

# Every benchmark, then one table in the README and the plots in docs/bench/.
bench: setup services
	$(BIN)/python bench/preview.py
	$(BIN)/python bench/mirror.py
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/quantize.py
	$(BIN)/python bench/serve_server.py
	$(BIN)/python bench/tracking.py
	$(BIN)/python bench/features.py
	$(BIN)/python bench/drift.py
	$(BIN)/python bench/drift_alarm.py
	$(BIN)/python bench/preview_diff.py
	$(BIN)/python bench/report.py

# The real engine: needs the Pulumi CLI, PULUMI_BACKEND_URL (the state bucket `mlplat
# bootstrap` made) and AWS credentials. STACK=<env> applies the cloud layer,
# STACK=<env>-cluster the cluster layer (from inside the VPC): `mlplat deploy` (infra/deploy.py)
# prepares the pack's environment, creates the stack on its first deploy, and runs pulumi up.
UP_STACK = $(or $(STACK),$(ENV))
up:
	@command -v pulumi >/dev/null 2>&1 || { echo "make up needs the Pulumi CLI (https://www.pulumi.com/docs/install/); use 'make preview STACK=$(UP_STACK)' offline"; exit 1; }
	@$(MAKE) --no-print-directory setup-core
	$(BIN)/mlplat deploy --stack $(UP_STACK)

clean:
	rm -rf $(OUT) .pytest_cache
