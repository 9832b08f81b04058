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
# The two ways a stack can advertise GPUs (mlplat:addons.devicePluginMode); every stack is
# also previewed in the mode its file does not choose.
DEVICE_PLUGIN_MODES = ("device-plugin", "gpu-operator")
VARIANTS = tuple((stack, mode) for stack in STACKS for mode in DEVICE_PLUGIN_MODES)


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
