"""The IAM path table (infra/checks/iam/paths.py) against the policies prod's cloud layer
writes, decided by a real IAM evaluator: every path the platform relies on Allowed, every
abuse Denied, and every tenant role's request on another tenant's data Denied. The run
prints how many of each and how long the table took."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from components import bucket_policy as bucket_policy_module
from infra.checks.iam.paths import ALLOWED, DENIED, PATHS, Path, tenant_paths
from infra.checks.iam.requests import simulation
from infra.checks.iam.stack import StackPolicies, from_report
from infra.preview.diff import as_read
from infra.preview.fixtures import ACCOUNT_ID
from tests.conftest import preview
from tests.iam.evaluator import simulate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prod() -> StackPolicies:
    """prod's policies as its JSON report holds them: what a preview diff reads."""
    return from_report(as_read(preview("prod").report))


def decide(paths: tuple[Path, ...], stack: StackPolicies, **kwargs: Any) -> dict[str, str]:
    return simulate([(p.name, simulation(p, stack, **kwargs)) for p in paths])


def test_every_path_is_decided_as_the_table_says(prod, capsys):
    started = time.perf_counter()
    decided = decide(PATHS, prod)
    seconds = time.perf_counter() - started
    wrong = [f"{p.name}: {decided[p.name]}, expected {p.expect}" for p in PATHS
             if (decided[p.name] == ALLOWED) != (p.expect == ALLOWED)]
    allowed = sum(p.expect == ALLOWED for p in PATHS)
    with capsys.disabled():
        print(f"\nIAM path table: {len(PATHS)} paths, {allowed} Allowed and {len(PATHS) - allowed} Denied, "
              f"decided in {seconds:.2f} s (@cloud-copilot/iam-simulate, prod's policies)")
    assert wrong == []


def test_the_table_names_each_path_once_and_covers_allowed_and_denied():
    names = [p.name for p in PATHS]
    assert len(set(names)) == len(names)
    assert {p.expect for p in PATHS} == {"Allowed", "Denied"}


def test_the_ifexists_defect_is_caught_when_it_comes_back(prod):
    """Put back the Deny that used `StringNotEqualsIfExists` on the encryption headers: the
    uploads that rely on default encryption must come out Denied."""
    broken = copy.deepcopy(prod.bucket_policies)
    for policy in broken.values():
        for statement in policy["Statement"]:
            if statement.get("Sid") == "DenyObjectsNotEncryptedWithKms":
                statement["Condition"] = {"StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}}
    relying = tuple(p for p in PATHS if p.action == "s3:PutObject" and p.expect == ALLOWED
                    and "s3:x-amz-server-side-encryption" not in p.context)
    assert len(relying) >= 3  # log delivery, FSx export, the serving publisher
    decided = decide(relying, prod, bucket_policies=broken)
    assert {name: result for name, result in decided.items()} == {p.name: "ExplicitlyDenied" for p in relying}
    # And the module no longer writes it.
    assert "IfExists" not in json.dumps(bucket_policy_module.bucket_policy("b", "k", account=ACCOUNT_ID)
                                        ["Statement"][1:])


def test_the_bucket_keeps_shared_prefixes_to_their_owners_whatever_an_identity_policy_allows(prod):
    """Take the owner-only Denies out of the models and checkpoints buckets: an account role
    whose own policy allows it (an admin, a developer) then reaches the served model, MLflow's
    artifacts and a tenant's runs. With them, it does not (the table's Denied paths)."""
    broken = copy.deepcopy(prod.bucket_policies)
    for purpose in ("models", "checkpoints"):
        policy = broken[prod.buckets[purpose]]
        policy["Statement"] = [s for s in policy["Statement"] if not s.get("Sid", "").startswith("OnlyOwnerReads")]
    around = tuple(p for p in PATHS if p.principal == "arn:aws:iam::{account}:role/developer"
                   and p.resource.startswith(("bucket:models/", "bucket:checkpoints/")))
    assert len(around) == 3 and all(p.expect != ALLOWED for p in around)
    assert set(decide(around, prod, bucket_policies=broken).values()) == {ALLOWED}
    assert ALLOWED not in decide(around, prod).values()


def test_no_tenant_role_reaches_another_tenants_data(prod):
    """Every role of each tenant (named mlplat-prod-<tenant>-...) asked for each other
    tenant's datasets, feature store, runs, tracking user and online-store user, and an
    account role and another account for each tenant's runs and feature store: all Denied.
    The same requests of its own tenant are asked too, so the generated set is not empty of
    Allowed answers by construction."""
    roles = prod.tenant_roles()
    assert set(roles) == {"research", "applied", "serving"} and all(roles.values()), roles
    generated = tenant_paths(roles)
    decided = decide(generated, prod)
    crossing = [p for p in generated if p.expect == DENIED]
    assert len(crossing) >= 144  # prod: 9 roles x 2 other tenants x 8 requests, and 3 tenants x 2 principals x 4
    assert [p.name for p in crossing if decided[p.name] == ALLOWED] == []
    own = [p.name for p in generated if not p.expect and decided[p.name] == ALLOWED]
    assert any("features/research/registry.pb" in name for name in own), own
