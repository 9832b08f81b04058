"""Shared services: two local registries per test (`upstream` stands in for nvcr.io, quay.io and the chart
repositories, `mirror` for the environment's in-region ECR), and a moto server per module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.services.oci import Registry, require_tools, start_registry


@pytest.fixture
def registries(tmp_path) -> Iterator[tuple[Registry, Registry]]:
    require_tools()
    upstream = start_registry(tmp_path / "upstream")
    mirror = start_registry(tmp_path / "mirror")
    try:
        yield upstream, mirror
    finally:
        upstream.stop()
        mirror.stop()


@pytest.fixture(scope="module")
def moto_endpoint():
    """A moto server (S3, ECR, IAM, KMS, STS) of the module's own: its endpoint."""
    from tests.services.tracking import require_tracking, start_moto, stop_processes

    require_tracking()
    processes: list[subprocess.Popen] = []
    endpoint = start_moto(processes)
    try:
        yield endpoint
    finally:
        stop_processes(processes)


@pytest.fixture(scope="session")
def tracking(tmp_path_factory):
    """PostgreSQL, a moto server and the MLflow tracking server, once per session."""
    from tests.services.tracking import start_tracking_stack

    stack = start_tracking_stack(tmp_path_factory.mktemp("tracking"))
    try:
        yield stack
    finally:
        stack.stop()
