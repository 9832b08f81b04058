"""`AuditTrail`: a CloudTrail trail homed in the stack's region, CMK-encrypted, with log
file validation and S3 data events for the data buckets, delivered to the Object Lock
audit bucket."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.bucket_policy import CLOUDTRAIL_PREFIX, bucket_arn


def event_selectors(data_buckets: Sequence[str]) -> list[dict]:
    """Advanced event selectors: every management event, and every object-level event on
    the data buckets. The audit bucket itself is left out: logging the trail's own
    deliveries would feed the trail with its own writes."""
    selectors: list[dict] = [
        {"name": "management events", "field_selectors": [{"field": "eventCategory", "equals": ["Management"]}]}
    ]
    if data_buckets:
        selectors.append(
            {
                "name": "object access on the data buckets",
                "field_selectors": [
                    {"field": "eventCategory", "equals": ["Data"]},
                    {"field": "resources.type", "equals": ["AWS::S3::Object"]},
                    {"field": "resources.ARN", "starts_withs": [f"{bucket_arn(b)}/" for b in data_buckets]},
                ],
            }
        )
    return selectors


@dataclass(frozen=True)
class AuditTrailArgs:
    trail_name: str  # known before the trail exists: key and bucket policies name it
    bucket_name: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]
    data_buckets: tuple[str, ...]
    # The audit bucket's policy: CloudTrail checks it when the trail is created.
    bucket_policy: pulumi.Resource | None = None


class AuditTrail(pulumi.ComponentResource):
    trail: aws.cloudtrail.Trail

    def __init__(self, name: str, args: AuditTrailArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:audit:AuditTrail", name, None, opts)
        self.trail = aws.cloudtrail.Trail(
            name,
            name=args.trail_name,
            s3_bucket_name=args.bucket_name,
            s3_key_prefix=CLOUDTRAIL_PREFIX,
            kms_key_id=args.kms_key_arn,
            enable_log_file_validation=True,
            # Every region, delivered to the home region's audit bucket under its key: the
            # logs stay where the data is. A single-region trail outside us-east-1 gets no
            # IAM, STS or CloudFront events (global service events reach only multi-region
            # trails since November 2021), so IAM changes would go unrecorded.
            is_multi_region_trail=True,
            include_global_service_events=True,
            advanced_event_selectors=[
                aws.cloudtrail.TrailAdvancedEventSelectorArgs(
                    name=selector["name"],
                    field_selectors=[
                        aws.cloudtrail.TrailAdvancedEventSelectorFieldSelectorArgs(**field)
                        for field in selector["field_selectors"]
                    ],
                )
                for selector in event_selectors(args.data_buckets)
            ],
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[args.bucket_policy] if args.bucket_policy is not None else None
            ),
        )
        self.register_outputs({"trail": self.trail.arn})
