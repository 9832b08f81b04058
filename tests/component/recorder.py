"""Run a small program under the preview's mocks (no policy pack) and return what the
engine would receive, for component tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.config import PROJECT
from infra.preview.fixtures import RegionFixture
from infra.preview.mocks import PreviewMocks, RecordingMonitor, Registration, run_program

REGION = "me-central-1"


@dataclass
class Recording:
    registrations: list[Registration]
    error: BaseException | None = None

    def of_type(self, resource_type: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == resource_type]

    def one(self, resource_type: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(resource_type) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {resource_type} {name or ''}, found {[r.name for r in found]}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.registrations if r.urn == urn)

    def children(self, parent: Registration) -> list[Registration]:
        return [r for r in self.registrations if r.parent == parent.urn]


def record(program: Callable[[aws.Provider], Any], *, fixture: RegionFixture | None = None,
           stack: str = "test", expect_error: bool = False) -> Recording:
    """`program(provider)` runs with a region-pinned provider like the platform's."""
    mocks = PreviewMocks(fixture or RegionFixture(REGION))
    monitor = RecordingMonitor(mocks)

    def main() -> None:
        program(aws.Provider("aws-test", region=REGION))

    try:
        run_program(main, mocks, monitor, project=PROJECT, stack=stack)
    except Exception as err:  # noqa: BLE001 (returned to the test, which asserts on it)
        if not expect_error:
            raise
        return Recording(list(monitor.registrations.values()), err)
    assert not expect_error, "the program was expected to fail"
    return Recording(list(monitor.registrations.values()))


def root_cause(err: BaseException) -> BaseException:
    while err.__cause__ or err.__context__:
        err = err.__cause__ or err.__context__
    return err


def opts(provider: aws.Provider, **extra: Any) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(providers={"aws": provider}, **extra)
