"""One policy pack process for the policy tests that speak to it over gRPC: starting one
costs about a second, and each test configures it for itself."""

from __future__ import annotations

import pytest

from infra.preview.analyzer import PolicyPackProcess


@pytest.fixture(scope="session")
def pack():
    process = PolicyPackProcess()
    yield process
    process.close()
