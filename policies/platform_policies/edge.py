"""Residency: global paths into bucket data, served from edge locations or other regions."""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, aws_types, get, items, resource_rule
from .controls import CROSS_BORDER_TRANSFER

ACCELERATE = aws_types(
    "s3/bucketAccelerateConfiguration:BucketAccelerateConfiguration",
    "s3/bucketAccelerateConfigurationV2:BucketAccelerateConfigurationV2",
)
BUCKETS = aws_types("s3/bucket:Bucket", "s3/bucketV2:BucketV2")
MULTI_REGION_ACCESS_POINTS = aws_types(
    "s3control/multiRegionAccessPoint:MultiRegionAccessPoint",
    "s3control/multiRegionAccessPointPolicy:MultiRegionAccessPointPolicy",
    "s3control/multiRegionAccessPointRoutes:MultiRegionAccessPointRoutes",
)
DISTRIBUTIONS = aws_types("cloudfront/distribution:Distribution", "cloudfront/multitenantDistribution:MultitenantDistribution")

# Every S3 endpoint form: virtual-hosted (regional, legacy global, dual-stack, dash-region),
# website endpoints, access points and Object Lambda access points.
S3_ORIGIN = re.compile(
    r"(^|\.)(s3(\.dualstack)?([.-][a-z0-9-]+)?|s3-website[.-][a-z0-9-]+|s3-accesspoint(\.dualstack)?\.[a-z0-9-]+"
    r"|s3-object-lambda\.[a-z0-9-]+)\.amazonaws\.com(\.cn)?$"
)


def is_s3_origin(origin: Any) -> bool:
    if get(origin, "s3OriginConfig") is not None:
        return True
    domain = get(origin, "domainName")
    return isinstance(domain, str) and bool(S3_ORIGIN.search(domain.lower()))


def _check_edge(args: ResourceValidationArgs, report_violation: ReportViolation, settings: Settings) -> None:
    kind = args.resource_type
    where = f"{kind} '{args.name}'"
    if kind in ACCELERATE:
        status = get(args.props, "status")
        if status == "Enabled" or status is UNKNOWN:
            report_violation(f"{where} turns on S3 Transfer Acceleration: objects travel through edge locations "
                             "worldwide")
        return
    if kind in BUCKETS:
        status = get(args.props, "accelerationStatus")
        if status is None:
            args.not_applicable("bucket without inline acceleration setting")
        if status == "Enabled" or status is UNKNOWN:
            report_violation(f"{where}: accelerationStatus=Enabled routes objects through edge locations worldwide")
        return
    if kind in MULTI_REGION_ACCESS_POINTS:
        report_violation(f"{where}: a Multi-Region Access Point routes requests to buckets in other regions")
        return
    if kind in DISTRIBUTIONS:
        origins = items(get(args.props, "origins"))
        for i, origin in enumerate(origins):
            if is_s3_origin(origin):
                report_violation(
                    f"{where}: origins[{i}] ({get(origin, 'domainName')}) is an S3 bucket; CloudFront caches its "
                    "objects in edge locations outside the allowed regions"
                )


no_global_edge_data_paths = resource_rule(
    name="no-global-edge-data-paths",
    description="No global path into bucket data: no S3 Transfer Acceleration, no Multi-Region Access Points, "
    "no CloudFront distribution with an S3 origin.",
    applies=ACCELERATE | BUCKETS | MULTI_REGION_ACCESS_POINTS | DISTRIBUTIONS,
    check=_check_edge,
    framework=CROSS_BORDER_TRANSFER,
    remediation="Serve bucket data from the region: presigned URLs or an in-region load balancer; leave "
    "Transfer Acceleration suspended and do not create Multi-Region Access Points.",
    tags=["residency"],
)
