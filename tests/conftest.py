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


@cache
def preview(stack: str):
    """One offline preview per stack per test session (the program under mocks, judged by
    the real pack process); tests read what the engine received from it."""
    from infra.preview.engine import run_preview

    return run_preview(stack)


@pytest.fixture(params=STACKS)
def stack_preview(request):
    return preview(request.param)


@pytest.fixture
def prod_preview():
    return preview("prod")
