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
from .decoding import known, plain, serialized
from .kubernetes import kubernetes_object
from .replication import REPLICATION_TYPES

# A region's name: an area of two to four letters, a qualifier where the partition has one
# (us-gov-west-1, us-isob-east-1, eusc-de-east-1 in the European Sovereign Cloud), a
# direction, a number.
REGION = r"[a-z]{2,4}(?:-[a-z]{2,4})?-[a-z]+-[0-9]"
# An ARN with a region field (arn:partition:service:region:...); global ARNs leave it empty.
ARN = re.compile(rf"arn:aws[a-z-]*:[a-z0-9-]+:(?P<region>{REGION}):")
# An AWS endpoint host (s3.us-east-1.amazonaws.com, s3-us-west-2.amazonaws.com,
# logs.eu-west-1.api.aws, ....amazonaws.com.cn, the European Sovereign Cloud's
# ....amazonaws.eu, Lambda function URLs' ....on.aws, the isolated partitions' domains, App
# Runner's and Elastic Beanstalk's), and the region label within it.
AWS_DOMAINS = ("amazonaws.com", "amazonaws.com.cn", "amazonaws.eu", "api.aws", "on.aws", "c2s.ic.gov",
               "sc2s.sgov.gov", "cloud.adc-e.uk", "csp.hci.ic.gov", "awsapprunner.com", "elasticbeanstalk.com")
AWS_HOST = re.compile(r"[a-z0-9][a-z0-9.-]*\.(?:" + "|".join(re.escape(d) for d in AWS_DOMAINS) + r")\b")
HOST_REGION = re.compile(rf"(?:^|[.-])(?P<region>{REGION})(?=\.)")
SERVICE_NAME = re.compile(rf"\bcom\.amazonaws\.(?:vpce\.)?(?P<region>{REGION})\.")
# Hosts that name their region in a form of their own: S3's legacy endpoint for us-east-1, and
# ElastiCache's abbreviated labels (my-group.abc123.ng.0001.use1.cache.amazonaws.com is in
# us-east-1: area, direction, number). A label that does not decode is named as it is, which
# no allow-list holds: refused, not guessed.
LEGACY_HOST = re.compile(r"(?:^|[^a-z0-9-])s3-external-1\.amazonaws\.com\b")
CACHE_HOST = re.compile(r"\.(?P<label>[a-z]{3,6}[0-9])\.cache\.amazonaws\.com\b")
DIRECTIONS = {"e": "east", "w": "west", "n": "north", "s": "south", "c": "central", "ne": "northeast",
              "nw": "northwest", "se": "southeast", "sw": "southwest"}
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
        if value.lstrip()[:1] in "[{":  # JSON text may open with white space
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
    """The AWS regions an ARN, endpoint or endpoint service name in `text` names (host names
    are case-insensitive: `S3.US-EAST-1.AMAZONAWS.COM` is in us-east-1)."""
    text = text.lower()
    found: set[str] = set()
    if "arn:" in text:
        found |= {m["region"] for m in ARN.finditer(text)}
    if "amazonaws" in text or any(domain in text for domain in AWS_DOMAINS):  # service names: com.amazonaws.
        for host in AWS_HOST.finditer(text):
            found |= {m["region"] for m in HOST_REGION.finditer(host.group(0))}
        found |= {m["region"] for m in SERVICE_NAME.finditer(text)}
        if LEGACY_HOST.search(text):
            found.add("us-east-1")
        found |= {cache_region(m["label"]) for m in CACHE_HOST.finditer(text)}
    return found


def cache_region(label: str) -> str:
    """The region of an ElastiCache host label: use1 -> us-east-1, apse1 -> ap-southeast-1,
    mec1 -> me-central-1, usgw1 -> us-gov-west-1; the label itself where it does not decode."""
    area, direction, number = label[:2], label[2:-1], label[-1]
    if area == "us" and direction.startswith("g") and direction[1:] in DIRECTIONS:
        area, direction = "us-gov", direction[1:]
    return f"{area}-{DIRECTIONS[direction]}-{number}" if direction in DIRECTIONS else f"{label} (an ElastiCache label)"


def regions_of(key: str, text: str) -> set[str]:
    """The regions an input names: by itself under a key that holds a region, or in its text."""
    if key in REGION_KEYS and re.fullmatch(REGION, text.lower()):
        return {text.lower()}
    return regions_named(text)


# The quick test below. Every region the walk finds is a run of the text shaped like a region
# (letters, a hyphen, letters, a hyphen, one digit), so it ends at a hyphen and a digit, and
# what follows is no letter or digit (`:` in an ARN, `.` in a host or service name, or the end
# of its string: in a Struct's bytes the next field's tag, in JSON a quote); and it starts a
# string, or follows a character that is not a letter or digit (`:` in an ARN, `.` or `-` in a
# host name, a quote, or a JSON escape such as \n, whose last character is a letter).
REGION_END = re.compile(rb"-[0-9]")
SHAPES = (re.compile(rb"[a-z]{2,4}-[a-z]+-[0-9]$"), re.compile(rb"[a-z]{2,4}-[a-z]{2,4}-[a-z]+-[0-9]$"))
WINDOW = 64
TOO_LONG = re.compile(rb"[a-z]{48,}-[0-9]$")  # a region-shaped run longer than the window could hide
LETTERS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
ALNUM = LETTERS | frozenset(b"0123456789")
# What a string's text follows in a Struct's bytes: the key's or the string value's field tag,
# then its length (a varint, whose bytes but the last are 0x80 and above); and a JSON escape.
STRING_START = frozenset({0x0A, 0x1A, ord("\\")} | set(range(0x80, 0x100)))
# What decoding turns into the letters of a region although the text does not hold them: a JSON
# escape (\u0075 is "u"), and the two characters lower-casing makes ASCII of (KELVIN SIGN, and
# I WITH DOT ABOVE), in UTF-8.
DISGUISES = (b"\\u", "\u212a".encode(), "\u0130".encode())
MARKERS = (b"arn:", b"amazonaws", *(domain.encode() for domain in AWS_DOMAINS))
REGION_KEY_BYTES = tuple(key.encode() for key in REGION_KEYS)


def _may_start_region(data: bytes, at: int) -> bool:
    """Whether a region could start at `at`: nothing before it, a character that is not a
    letter or digit, or one that may end a string's length or a JSON escape."""
    return at == 0 or data[at - 1] not in ALNUM or at == 1 or data[at - 2] in STRING_START


def _surely_home(data: bytes, allowed: set[str]) -> bool:
    """Whether the properties' text (protobuf or JSON bytes) surely names no region off the
    allow-list, so the walk can be spared. The test only ever errs towards walking: at each
    hyphen and digit in the text, the region shapes ending there are checked (lower-cased),
    and text that could hold a region in disguise is always walked."""
    if any(disguise in data for disguise in DISGUISES):
        return False
    # The walk finds a region only in text holding an ARN, an AWS domain or a service name, or
    # under a key that holds a region: text with none of them names none.
    lowered = data.lower()
    if not any(marker in lowered for marker in MARKERS) and not any(key in data for key in REGION_KEY_BYTES):
        return True
    if b"s3-external-1" in lowered or b".cache.amazonaws" in lowered:
        return False  # regions in forms of their own (regions_named): walked
    for hit in REGION_END.finditer(data):
        if hit.start() < 4 or data[hit.start() - 1] not in LETTERS:
            continue  # no letters before the hyphen: no region ends here
        if hit.end() < len(data) and data[hit.end()] in ALNUM:
            continue  # a region ends before `:` or `.`, or ends its string: not before a letter or digit
        begin = max(0, hit.end() - WINDOW)
        window = lowered[begin:hit.end()]  # lower-casing ASCII keeps every byte where it was
        if TOO_LONG.search(window):
            return False
        for shape in SHAPES:
            found = shape.search(window)
            if found is not None and found.group(0).decode() not in allowed \
                    and _may_start_region(data, begin + found.start()):
                return False
    return True


def _text(props: Any) -> bytes | None:
    """The properties' text: the Struct's bytes in the pack, JSON elsewhere (None: cannot tell)."""
    data = serialized(props)
    if data is not None:
        return data
    decoded = plain(props)
    try:
        return json.dumps(decoded).encode() if decoded is not None else None
    except (RecursionError, TypeError, ValueError):
        return None


def _check_data_paths(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind = args.resource_type
    if kind in REPLICATION_TYPES:
        args.not_applicable("judged by no-cross-region-replication")
    allowed = set(settings["allowedRegions"])
    where = f"{kind} '{args.name}'"
    # Only an AWS resource's (or the AWS provider's) own `region` input is left to the region
    # rule: a `region` nested under an empty key has the same path, and a Kubernetes
    # object's is no resource's region.
    own_region = get(args.props, "region") if is_aws(kind) else None
    data = _text(args.props)
    if data is not None and _surely_home(data, allowed):
        paths: Iterable[tuple[str, str, str]] = []  # nothing off the allow-list anywhere: no need to walk it
    else:
        paths = _strings(known(args.props), "")
    for path, key, text in paths:
        if path == "region" and own_region is not None and text == own_region:
            continue  # the resource's (or provider's) own region: aws-resources-in-allowed-regions judges it
        if text is TOO_DEEP:
            report(f"{where}: {path[:200]} is nested more than {MAX_DEPTH} levels deep, too deep to judge; flatten it")
            continue
        for region in sorted(regions_of(key, text) - allowed):
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
