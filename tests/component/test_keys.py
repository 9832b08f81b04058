"""`PlatformKeys` under mocks, and every storage resource of every stack on one of them."""

from __future__ import annotations

import json

import pytest

from components.key_policy import StorageNames, data_class_uses, key_policy
from components.keys import KeysArgs, PlatformKeys
from infra.config import load_stack
from infra.preview.report import resource_region
from infra.preview.storage_report import STORAGE_TYPES, storage_inventory
from tests.component.recorder import opts, record

ACCOUNT, REGION = "111122223333", "me-central-1"
NAMES = StorageNames(buckets={p: f"b-{p}" for p in ("datasets", "models", "checkpoints", "audit", "access-logs")},
                     trail="mlplat-test-audit", lustre=True)
USES = data_class_uses(NAMES)


@pytest.fixture(scope="module")
def keys():
    return record(lambda provider: PlatformKeys(
        "keys", KeysArgs(prefix="mlplat-test", account_id=ACCOUNT, region=REGION, uses=USES), opts=opts(provider)))


def test_one_key_and_alias_per_data_class(keys):
    assert sorted(r.name for r in keys.of_type("aws:kms/key:Key")) == sorted(f"keys-{c}" for c in USES)
    aliases = {r.inputs()["name"] for r in keys.of_type("aws:kms/alias:Alias")}
    assert aliases == {f"alias/mlplat-test-{c}" for c in USES}


def test_keys_rotate_stay_in_one_region_wait_30_days_and_are_protected(keys):
    for key in keys.of_type("aws:kms/key:Key"):
        inputs = key.inputs()
        assert inputs["enableKeyRotation"] is True
        assert inputs["multiRegion"] is False
        assert inputs["deletionWindowInDays"] == 30
        assert key.protect is True


def test_each_key_carries_its_data_class_policy(keys):
    for data_class, use in USES.items():
        key = keys.one("aws:kms/key:Key", f"keys-{data_class}")
        assert json.loads(key.inputs()["policy"]) == key_policy(ACCOUNT, REGION, use)
        assert key.inputs()["tags"] == {"data-class": data_class}


def test_aliases_point_at_their_keys(keys):
    for data_class in USES:
        alias = keys.one("aws:kms/alias:Alias", f"keys-{data_class}")
        key = keys.one("aws:kms/key:Key", f"keys-{data_class}")
        assert alias.property_dependencies["targetKeyId"] == [key.urn]


def test_children_are_parented_and_on_the_provider(keys):
    component = keys.one("mlplat:storage:PlatformKeys")
    [provider] = keys.of_type("pulumi:providers:aws")
    children = [r for r in keys.registrations if r.custom and not r.is_provider]
    assert len(children) == 2 * len(USES)
    assert all(r.parent == component.urn and r.provider_urn == provider.urn for r in children)


# --- whole stacks ---------------------------------------------------------------------


def test_every_storage_resource_is_on_a_platform_key_in_region(stack_preview):
    by_urn = stack_preview.by_urn
    rows = storage_inventory(stack_preview.registrations, lambda r: resource_region(r, by_urn))
    present = {r.type for r in stack_preview.registrations}
    # Each kind the platform creates appears in the inventory (EKS and FSx only where built,
    # the account's EBS default key only in the stack that owns it).
    only_where_built = {"FSx for Lustre", "EKS secrets", "EBS default key"}
    assert {kind for kind, *_ in STORAGE_TYPES.values()} - only_where_built <= {r.kind for r in rows}
    assert ("EBS default key" in {r.kind for r in rows}) == load_stack(stack_preview.stack).storage.ebs_account_defaults
    stack = stack_preview.stack
    assert [r.name for r in rows if not r.key] == []
    for row in rows:
        assert row.key.startswith(f"alias/mlplat-{stack}-"), row
        assert row.region == "me-central-1", row
    if "aws:fsx/lustreFileSystem:LustreFileSystem" in present:
        [lustre] = [r for r in rows if r.kind == "FSx for Lustre"]
        assert lustre.key == f"alias/mlplat-{stack}-datasets"


def test_storage_section_in_the_markdown_report(prod_preview):
    from infra.preview.report import to_markdown

    text = to_markdown(prod_preview)
    section = text.split("### Storage", 1)[1].split("<details>", 1)[0]
    assert "| S3 bucket | `mlplat-prod-datasets-111122223333-me-central-1` | `alias/mlplat-prod-datasets` | " \
           "me-central-1 |" in section
    assert "| FSx for Lustre | `mlplat-prod-lustre` | `alias/mlplat-prod-datasets` | me-central-1 |" in section
    assert "| CloudTrail trail | `mlplat-prod-audit` | `alias/mlplat-prod-logs` | me-central-1 |" in section
    assert "ECR repository ×" in section and "not encrypted" not in section


def test_stack_outputs_name_every_key_bucket_file_system_and_repository():
    import pulumi
    from pulumi.runtime.settings import get_root_resource
    from pulumi.runtime.sync_await import _sync_await

    from infra.config import PROJECT, load_stack
    from infra.platform import build_platform
    from infra.preview.fixtures import RegionFixture
    from infra.preview.mocks import PreviewMocks, RecordingMonitor, run_program
    from infra.versions import plan_images

    config = load_stack("prod")
    mocks = PreviewMocks(RegionFixture(config.region))
    run_program(lambda: build_platform(config), mocks, RecordingMonitor(mocks), project=PROJECT, stack="prod")
    # Under mocks the exports stay on the root stack resource; resolve them there.
    exported = get_root_resource().outputs
    out = {name: _sync_await(pulumi.Output.from_input(value).future()) for name, value in exported.items()}
    assert set(out["keys"]) == set(USES)
    assert all(arn.startswith("arn:aws:kms:me-central-1:111122223333:key/") for arn in out["keys"].values())
    assert out["keyAliases"]["datasets"] == "alias/mlplat-prod-datasets"
    assert out["buckets"] == {p: f"mlplat-prod-{p}-111122223333-me-central-1"
                              for p in ("datasets", "models", "checkpoints", "audit", "access-logs")}
    assert out["repositories"] == {n: f"111122223333.dkr.ecr.me-central-1.amazonaws.com/{i.repository('prod')}"
                                   for n, i in plan_images("aws").items()}
    assert out["lustre"]["dnsName"] == f"{out['lustre']['fileSystemId']}.fsx.me-central-1.amazonaws.com"
    assert out["lustre"]["path"] == "/datasets" and out["lustre"]["mountName"]
    assert out["auditTrail"] == "arn:aws:cloudtrail:me-central-1:111122223333:trail/mlplat-prod-audit"
    assert out["workloadLogGroup"] == "/mlplat/prod/workloads"
    assert out["ebsDefaultKey"] == out["keys"]["volumes"]
