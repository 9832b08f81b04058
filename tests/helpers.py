"""Small helpers for tests that read what the engine received."""

from __future__ import annotations

from typing import Any

from infra.preview.mocks import Registration


def of_type(result: Any, resource_type: str) -> list[Registration]:
    return [r for r in result.registrations if r.type == resource_type]


def one(result: Any, resource_type: str, name: str | None = None) -> Registration:
    found = [r for r in of_type(result, resource_type) if name is None or r.name == name]
    assert len(found) == 1, f"expected one {resource_type} {name or ''}, found {[r.name for r in found]}"
    return found[0]
