"""Storage and compute carry data-classification and owner tags."""

from __future__ import annotations

import json

from platform_policies.tagging import storage_and_compute_tagged as rule

from tests.policy.cases import TAGS
from tests.policy.harness import NOT_APPLICABLE, check

PROVIDER = {"region": "me-central-1", "defaultTags": json.dumps({"tags": TAGS})}
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def test_default_tags_count():
    assert check(rule, "aws:s3/bucket:Bucket", {"bucket": "b"}, provider_props=PROVIDER) == []
    [message] = check(rule, "aws:s3/bucket:Bucket", {"bucket": "b"}, name="b")
    assert message == ("aws:s3/bucket:Bucket 'b' lacks tags ['data-classification', 'owner'], on the resource or in "
                       "its provider's default tags")


def test_launch_templates_pass_tags_to_what_they_launch():
    specs = [{"resourceType": kind, "tags": TAGS} for kind in ("instance", "volume")]
    assert check(rule, LT, {"tagSpecifications": specs}, provider_props=PROVIDER) == []
    [message] = check(rule, LT, {"tagSpecifications": specs[:1]}, provider_props=PROVIDER)
    assert "tagSpecifications for volume lack" in message


def test_autoscaling_groups_do_not_get_default_tags():
    kind = "aws:autoscaling/group:Group"
    assert check(rule, kind, {"tags": []}, provider_props=PROVIDER)
    own = [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in TAGS.items()]
    assert check(rule, kind, {"tags": own}, provider_props=PROVIDER) == []


def test_required_tags_are_configurable_and_other_types_not_judged():
    assert check(rule, "aws:ebs/volume:Volume", {"tags": {"owner": "x"}}, config={"requiredTags": ["owner"]}) == []
    assert check(rule, "aws:iam/role:Role", {}) == NOT_APPLICABLE
