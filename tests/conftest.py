"""Shared fixtures: the repo on sys.path, the policy package importable, previews cached."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The pack is self-contained in policies/; its rules import as `platform_policies`.
sys.path.insert(0, str(REPO / "policies"))

STACKS = ("dev", "staging", "prod", "smb")
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
        found += [(stack, mode) for mode in (DEVICE_PLUGIN_MODES if has_gpus else (config.addons.device_plugin_mode,))]
    return tuple(found)


def __getattr__(name: str):
    """`VARIANTS`, worked out when a test module asks for it: every pytest process loads
    this file, most never need the stack files read."""
    if name == "VARIANTS":
        return _variants()
    raise AttributeError(name)


@cache
def preview(stack: str, device_plugin_mode: str | None = None):
    """One offline preview per stack (and device-plugin mode) per test session: the program
    under mocks, charts rendered, judged by the real pack process; tests read what the
    engine received from it."""
    from infra.config import load_stack
    from infra.preview.engine import run_preview

    config = load_stack(stack)
    if device_plugin_mode is None or device_plugin_mode == config.addons.device_plugin_mode:
        return run_preview(stack) if device_plugin_mode is None else preview(stack)
    addons = config.addons.model_copy(update={"device_plugin_mode": device_plugin_mode})
    return run_preview(stack, config=config.model_copy(update={"addons": addons}))


@pytest.fixture(params=STACKS)
def stack_preview(request):
    return preview(request.param)


@pytest.fixture
def prod_preview():
    return preview("prod")
