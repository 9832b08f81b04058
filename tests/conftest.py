"""Shared fixtures: the repo on sys.path, the policy package importable, previews cached."""

from __future__ import annotations

import copy
import fcntl
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property-based tests (Hypothesis): in `make test` a fixed budget of 100 examples a test,
# derandomized (the same examples every run, so CI is repeatable) and no example database;
# `make fuzz` runs FUZZ_EXAMPLES a test (default 20,000), random, remembering what failed in
# .hypothesis/. Whatever a fuzz run finds becomes an @example of its test.
settings.register_profile("make-test", max_examples=100, derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "20000")), deadline=None,
                          print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "make-test"))

REPO = Path(__file__).resolve().parent.parent
# The pack is self-contained in policies/; its rules import as `platform_policies`.
sys.path.insert(0, str(REPO / "policies"))

# The environments, each a cloud-layer stack (`prod`) and a cluster-layer stack (`prod-cluster`).
DESCRIPTOR = "clusterDescriptor"
STACKS = ("dev", "staging", "prod", "smb")
# Cluster layers on a customer's own cluster: their descriptor is in their stack config, and
# they have no cloud layer (docs/onprem.md). Bare-metal GPU nodes run the GPU Operator only.
CUSTOMER_STACKS = ("onprem",)
CLUSTER_STACKS = tuple(f"{s}-cluster" for s in STACKS) + CUSTOMER_STACKS
# The two ways a stack can advertise GPUs (mlplat:addons.devicePluginMode); every stack with
# GPU pools is also previewed in the mode its file does not choose (without GPUs the mode
# changes nothing: no device plugin is installed either way).
DEVICE_PLUGIN_MODES = ("device-plugin", "gpu-operator")


@cache
def _variants() -> tuple[tuple[str, str], ...]:
    from infra.catalog import lookup
    from infra.config import load_stack

    found = []
    for stack in STACKS:
        config = load_stack(stack)
        has_gpus = any(lookup(pool.instance_type).has_gpu for pool in config.node_pools)
        found += [(f"{stack}-cluster", mode)
                  for mode in (DEVICE_PLUGIN_MODES if has_gpus else (config.addons.device_plugin_mode,))]
    found += [(stack, "gpu-operator") for stack in CUSTOMER_STACKS]
    return tuple(found)


def __getattr__(name: str):
    """`VARIANTS` (cluster-layer stack, device-plugin mode), worked out when a test module
    asks for it: every pytest process loads this file, most never need the stack files read."""
    if name == "VARIANTS":
        return _variants()
    raise AttributeError(name)


# Where the workers of one run share their previews (`preview`): a folder the run's first
# process makes (the controller, under xdist), which its workers inherit through the
# environment and which it removes when the run ends.
SHARED_PREVIEWS = "MLPLAT_TEST_PREVIEWS"
_made_previews: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # a run of its own, even one a test started
        os.environ[SHARED_PREVIEWS] = tempfile.mkdtemp(prefix="mlplat-previews-")
        _made_previews.append(os.environ[SHARED_PREVIEWS])


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made_previews:
        shutil.rmtree(folder, ignore_errors=True)


def _shared(key: str, make: Callable[[], Any]) -> Any:
    """`make()`, once for all the workers of the run: the first to ask makes it and leaves
    it pickled in the run's folder, under a lock the others wait on; they load it. Each
    process still holds its own copy, as it did when each made its own."""
    folder = os.environ.get(SHARED_PREVIEWS)
    if not folder or not os.path.isdir(folder):
        return make()
    path = Path(folder) / f"{key}.pickle"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return pickle.loads(path.read_bytes())
        made = make()
        part = path.with_suffix(".part")
        part.write_bytes(pickle.dumps(made))
        part.replace(path)
        return made


@cache
def preview(stack: str, device_plugin_mode: str | None = None):
    """One offline preview per stack (and device-plugin mode) per test run, shared by its
    workers: the program under mocks, charts rendered, judged by the real pack process;
    tests read what the engine received from it. A cluster layer's StackReference reads
    its cloud layer's preview outputs, as `pulumi up` of both in order would."""
    return _shared(f"{stack}.{device_plugin_mode}", lambda: _preview(stack, device_plugin_mode))


def _preview(stack: str, device_plugin_mode: str | None):
    from infra.config import CLUSTER_SUFFIX
    from infra.preview.engine import run_preview

    if stack in CUSTOMER_STACKS:
        assert device_plugin_mode in (None, "gpu-operator"), "a customer's bare-metal nodes run the GPU Operator"
        return preview(stack) if device_plugin_mode is not None else run_preview(stack)
    if not stack.endswith(CLUSTER_SUFFIX):
        assert device_plugin_mode is None, "the device-plugin mode changes only the cluster layer"
        return run_preview(stack)
    environment = stack.removesuffix(CLUSTER_SUFFIX)
    outputs = copy.deepcopy(preview(environment).stack_outputs)
    settings = outputs[DESCRIPTOR]["settings"]
    if device_plugin_mode is None or device_plugin_mode == settings["addons"]["devicePluginMode"]:
        if device_plugin_mode is not None:
            return preview(stack)
    else:
        settings["addons"]["devicePluginMode"] = device_plugin_mode
    return run_preview(stack, stack_references={environment: outputs})


def registry_of(stack: str) -> str | None:
    """The registry host a customer's stack names in its descriptor; None for the AWS
    environments (the account's in-region ECR)."""
    from infra.config import load_layer

    environment = stack.removesuffix("-cluster")
    if environment not in CUSTOMER_STACKS:
        return None
    return load_layer(environment).descriptor["registry"]["host"]


def customer_descriptor(stack: str = "onprem"):
    """A customer's stack's descriptor, parsed and checked as its cluster layer reads it."""
    from infra.config import load_layer
    from infra.descriptor import parse_descriptor

    layer = load_layer(stack)
    return parse_descriptor(layer.descriptor, layer=stack, source="mlplat:descriptor", environment=layer.environment,
                            region=layer.region)


def both_layers(environment: str, device_plugin_mode: str | None = None):
    """(cloud layer, cluster layer) previews of an environment."""
    return preview(environment), preview(f"{environment}-cluster", device_plugin_mode)


@pytest.fixture(params=STACKS)
def stack_preview(request):
    """Each environment's cloud layer."""
    return preview(request.param)


@pytest.fixture(params=CLUSTER_STACKS)
def cluster_stack_preview(request):
    """Each environment's cluster layer."""
    return preview(request.param)


@pytest.fixture
def prod_preview():
    return preview("prod")


@pytest.fixture
def prod_cluster_preview():
    return preview("prod-cluster")


# Under pytest-xdist (`make test` runs -n auto --dist loadgroup), tests are handed to the
# workers a file at a time, so a file's module-scoped servers and fixtures start once; the
# files that share a session-scoped server (PostgreSQL, moto and MLflow: `tracking`) go to
# one worker together, so that stack starts once for the whole run, not once per worker.
SHARED_SERVERS = ("tracking",)


# tryfirst: xdist's worker reads the groups in its own hook of the same name, and a hook
# registered after the conftest's runs before it; without this the groups were never seen.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group_of: dict[str, str] = {}  # file -> its group: the shared server of any of its tests
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        server = next((s for s in SHARED_SERVERS if s in getattr(item, "fixturenames", ())), None)
        if server or path not in group_of:
            group_of[path] = server or group_of.get(path) or path
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group_of[item.nodeid.split("::", 1)[0]]))
