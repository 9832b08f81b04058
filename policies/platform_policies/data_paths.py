"""Residency on every path out: no resource sends data to, or reads it from, another region,
whatever property names the other end.

An AWS ARN carries its region (`arn:aws:events:us-east-1:...`), and so do AWS endpoints
(`https://s3.us-east-1.amazonaws.com`) and endpoint service names
(`com.amazonaws.us-east-1.s3`): every string in every input of an AWS resource, of the AWS
provider (its `endpoints` overrides) and of a Kubernetes object is searched for them, and one
naming a region off the allow-list is a path out. So a Backup plan's copy action to a vault in
us-east-1, an EventBridge target on a bus there, a Logs subscription to a destination there,
a Firehose or Kinesis destination there, an SNS subscription to a queue there, a provider whose
S3 endpoint points there are all refused without a rule per service. Global ARNs (IAM, S3,
Route 53: no region field) name no region and pass. Inputs that name a region by itself
(a VPC endpoint's `serviceRegion`, a provider's `stsRegion`) count too.

Some paths name no AWS region at all: an SNS subscription or EventBridge API destination to a
URL, email or SMS, a Firehose HTTP endpoint. Data sent there leaves AWS's regions altogether,
so these are refused unless exempted by name with a reason. S3 bucket ARNs carry no region:
replication destinations are no-cross-region-replication's, which also judges the replicas,
copies and replication configurations named there (those resources are left to it here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import REGIONS_PROPERTY, UNKNOWN, Settings, aws_types, get, is_aws, items, \
    resource_rule
from .controls import CROSS_BORDER_TRANSFER
from .decoding import known, plain
from .kubernetes import kubernetes_object
from .replication import REPLICATION_TYPES

REGION = r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]"
# An ARN with a region field (arn:partition:service:region:...); global ARNs leave it empty.
ARN = re.compile(rf"arn:aws[a-z-]*:[a-z0-9-]+:(?P<region>{REGION}):")
# An AWS endpoint host (s3.us-east-1.amazonaws.com, s3-us-west-2.amazonaws.com,
# logs.eu-west-1.api.aws, ....amazonaws.com.cn), and the region label within it.
AWS_HOST = re.compile(r"[a-z0-9][a-z0-9.-]*\.(?:amazonaws\.com(?:\.cn)?|api\.aws)\b")
HOST_REGION = re.compile(rf"(?:^|[.-])(?P<region>{REGION})(?=\.)")
REGION_WORD = re.compile(rf"\b{REGION}\b")
SERVICE_NAME = re.compile(rf"\bcom\.amazonaws\.(?:vpce\.)?(?P<region>{REGION})\.")
# Inputs that hold a region name by itself.
REGION_KEYS = frozenset({"serviceRegion", "stsRegion", "destinationRegion", "sourceRegion", "targetRegion",
                         "regionName", "region"})
LEAVES_AWS = {
    "aws:sns/topicSubscription:TopicSubscription": ("protocol", {"http", "https", "email", "email-json", "sms"},
                                                     "endpoint"),
}
API_DESTINATIONS = aws_types("cloudwatch/eventApiDestination:EventApiDestination")
FIREHOSE = aws_types("kinesis/firehoseDeliveryStream:FirehoseDeliveryStream")

DATA_PATHS_SCHEMA = {"allowedRegions": REGIONS_PROPERTY}


# Deeper than this, an input is not read but refused: a path out must not hide by nesting.
MAX_DEPTH = 200
TOO_DEEP = "\0too deep"


def _strings(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """(path, key, string) for every string in an input, JSON-encoded ones opened (the engine
    sends some provider inputs, such as `endpoints`, as JSON text)."""
    if depth > MAX_DEPTH:
        yield path, "", TOO_DEEP
        return
    if isinstance(value, str):
        if value[:1] in "[{":
            try:
                decoded = json.loads(value)
            except ValueError:
                decoded = None
            if isinstance(decoded, (Mapping, list)):
                yield from _strings(decoded, path, depth + 1)
                return
        yield path, path.rsplit(".", 1)[-1].split("[", 1)[0], value
    elif isinstance(value, Mapping):
        for key in value:
            yield from _strings(get(value, key), f"{path}.{key}" if path else str(key), depth + 1)
    elif value is not None and value is not UNKNOWN and not isinstance(value, (bytes, bool, int, float)):
        for i, element in enumerate(items(value)):
            yield from _strings(element, f"{path}[{i}]", depth + 1)


def regions_named(text: str) -> set[str]:
    """The AWS regions an ARN, endpoint or endpoint service name in `text` names."""
    found: set[str] = set()
    if "arn:" in text:
        found |= {m["region"] for m in ARN.finditer(text)}
    if "amazonaws" in text or "api.aws" in text:
        for host in AWS_HOST.finditer(text.lower()):
            found |= {m["region"] for m in HOST_REGION.finditer(host.group(0))}
        found |= {m["region"] for m in SERVICE_NAME.finditer(text)}
    return found


def _names_region(text: str, allowed: set[str]) -> bool:
    """Whether a document's text may name a region off the allow-list: every region an ARN,
    endpoint or service name carries is also a word of its own there (the walk decides which
    of those words is a path out)."""
    return bool(set(REGION_WORD.findall(text)) - allowed)


def _surely_home(data: Any, allowed: set[str]) -> bool:
    """Whether plain properties name no region off the allow-list anywhere (None: cannot tell)."""
    if data is None:
        return False
    try:
        return not _names_region(json.dumps(data), allowed)
    except (RecursionError, TypeError, ValueError):
        return False


def _check_data_paths(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind = args.resource_type
    if kind in REPLICATION_TYPES:
        args.not_applicable("judged by no-cross-region-replication")
    allowed = set(settings["allowedRegions"])
    where = f"{kind} '{args.name}'"
    if _surely_home(plain(args.props), allowed):
        paths: Iterable[tuple[str, str, str]] = []  # nothing off the allow-list anywhere: no need to walk it
    else:
        paths = _strings(known(args.props), "")
    for path, key, text in paths:
        if path == "region":
            continue  # the resource's (or provider's) own region: aws-resources-in-allowed-regions judges it
        if text is TOO_DEEP:
            report(f"{where}: {path[:200]} is nested more than {MAX_DEPTH} levels deep, too deep to judge; flatten it")
            continue
        named = {text} if key in REGION_KEYS and re.fullmatch(REGION, text) else regions_named(text)
        for region in sorted(named - allowed):
            report(f"{where}: {path} = {text[:200]!r} names {region}, outside the allowed regions {sorted(allowed)}: "
                   "data would cross the border there")
    if kind in LEAVES_AWS:
        field, protocols, endpoint = LEAVES_AWS[kind]
        protocol = get(args.props, field)
        if isinstance(protocol, str) and protocol.lower() in protocols:
            report(f"{where}: a {protocol} subscription sends the topic's messages to {get(args.props, endpoint)!r}, "
                   "outside AWS's regions; subscribe a queue or function in an allowed region")
    if kind in API_DESTINATIONS and isinstance(get(args.props, "invocationEndpoint"), str):
        report(f"{where}: sends events to {get(args.props, 'invocationEndpoint')!r}, outside AWS's regions")
    if kind in FIREHOSE:
        url = get(args.props, "httpEndpointConfiguration", "url")
        if isinstance(url, str):
            report(f"{where}: delivers records to {url!r}, outside AWS's regions")


def _applies(resource_type: str) -> bool:
    return is_aws(resource_type) or kubernetes_object(resource_type)


no_data_paths_abroad = resource_rule(
    name="no-data-paths-abroad",
    description="No input of any AWS resource, AWS provider or Kubernetes object names another region: no ARN, AWS "
    "endpoint or endpoint service of a region off the allow-list (Backup copy actions and vaults, EventBridge "
    "targets, Logs subscriptions and destinations, Firehose and Kinesis destinations, SNS subscriptions, provider "
    "`endpoints` overrides, and any other property), and no SNS subscription, EventBridge API destination or "
    "Firehose HTTP endpoint that sends data outside AWS's regions. Global ARNs (IAM, S3) are not flagged.",
    applies=_applies,
    check=_check_data_paths,
    config=DATA_PATHS_SCHEMA,
    framework=CROSS_BORDER_TRANSFER,
    remediation="Point the destination at a resource in an allowed region (a vault, bus, stream, queue or endpoint "
    "in me-central-1); remove endpoint overrides to other regions; deliver notifications through an in-region queue "
    "or function, not to URLs, email or SMS.",
    tags=["residency"],
)
