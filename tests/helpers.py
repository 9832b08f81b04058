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


def role_policy(result: Any, role_name_suffix: str) -> dict:
    """The inline policy of the one role whose IAM name ends with `role_name_suffix`."""
    import json

    roles = {r.name: r for r in result.registrations if r.type == "aws:iam/role:Role"}
    [name] = [n for n, r in roles.items() if r.inputs()["name"].endswith(role_name_suffix)]
    [policy] = [r.inputs(mask_secrets=False) for r in result.registrations
                if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == name]
    return json.loads(policy["policy"])
