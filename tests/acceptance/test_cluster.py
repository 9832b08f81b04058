"""Cluster checks after a deploy, through the Kubernetes API (see docs/acceptance.md)."""

from __future__ import annotations

import pytest

from infra.acceptance.cluster import CLUSTER_CHECKS


@pytest.mark.parametrize("check", CLUSTER_CHECKS)
def test_cluster(check, cluster, expect):
    problems = CLUSTER_CHECKS[check](cluster, expect)
    if problems:
        # The problems are the report: one line each, no traceback around them.
        pytest.fail("\n".join(problems), pytrace=False)
