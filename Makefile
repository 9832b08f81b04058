# Every command the README gives goes through here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STACK  ?= dev
OUT    ?= out

CORE_STAMP := $(VENV)/.core-installed
FULL_STAMP := $(VENV)/.full-installed

.PHONY: setup setup-core preview test bench up clean

# The program, the preview and the policy pack: enough for `make preview`.
setup-core: $(CORE_STAMP)
$(CORE_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	@touch $@

# Everything: tests, workloads (torch==2.13.0 is the local CPU wheel), serving, benchmarks.
setup: $(FULL_STAMP)
$(FULL_STAMP): $(CORE_STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,workloads,serve,bench]'
	@touch $@

preview: setup-core
	$(BIN)/mlplat preview --stack $(STACK) --json $(OUT)/$(STACK).json \
	  --markdown $(OUT)/$(STACK).md --manifests $(OUT)/$(STACK)-manifests

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/preview.py

# The real engine: needs the Pulumi CLI, a backend login and AWS credentials.
up:
	@command -v pulumi >/dev/null 2>&1 || { echo "make up needs the Pulumi CLI (https://www.pulumi.com/docs/install/); use 'make preview STACK=$(STACK)' offline"; exit 1; }
	pulumi up --stack $(STACK) --policy-pack policies --policy-pack-config policies/config/$(STACK).json

clean:
	rm -rf $(OUT) .pytest_cache
