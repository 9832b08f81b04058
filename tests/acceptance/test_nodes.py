"""Node checks after a deploy, on every node of the stack's pools through pytest-testinfra
(a privileged debug pod per node, or SSH; see docs/acceptance.md)."""

from __future__ import annotations

import pytest

from infra.acceptance.node import NODE_CHECKS, node_problems


@pytest.mark.parametrize("check", NODE_CHECKS)
def test_nodes(check, node_facts, node_pools):
    problems = node_problems(check, node_facts, node_pools)
    if problems:
        # The problems are the report: one line each, no traceback around them.
        pytest.fail("\n".join(problems), pytrace=False)
