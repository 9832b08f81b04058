"""Buckets, judged across the stack: encryption, TLS-only policy and public access block
are separate resources, linked to their bucket through property dependencies (the
bucket's id is unknown during a real preview) or, failing that, by bucket name."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import PolicyResource, ReportViolation, ResourceValidationArgs, StackValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError

from .common import UNKNOWN, Settings, aws_types, flag, get, items, key_problem, resource_rule, stack_rule
from .controls import NO_ANONYMOUS_ACCESS, TLS_TO_STORAGE, pdpl

BUCKETS = aws_types("s3/bucket:Bucket", "s3/bucketV2:BucketV2")
SSE_CONFIGS = aws_types(
    "s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
BUCKET_POLICIES = aws_types("s3/bucketPolicy:BucketPolicy")
ACCESS_BLOCKS = aws_types("s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
ACCOUNT_ACCESS_BLOCKS = aws_types("s3/accountPublicAccessBlock:AccountPublicAccessBlock")
BUCKET_ACLS = aws_types("s3/bucketAcl:BucketAcl", "s3/bucketAclV2:BucketAclV2")

KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
ACCESS_BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
PUBLIC_ACLS = ("public-read", "public-read-write", "authenticated-read")


class Buckets:
    """The stack's buckets and, for any resource that configures one, which bucket."""

    def __init__(self, resources: Iterable[PolicyResource]) -> None:
        self.all = [r for r in resources if r.resource_type in BUCKETS]
        self._by_urn = {b.urn: b for b in self.all}
        self._by_name: dict[str, PolicyResource] = {}
        for bucket in self.all:
            name = get(bucket.props, "bucket")
            if isinstance(name, str):
                self._by_name[name] = bucket

    def of(self, resource: PolicyResource) -> PolicyResource | None:
        for dependency in resource.property_dependencies.get("bucket", []):
            if dependency.urn in self._by_urn:
                return dependency
        name = get(resource.props, "bucket")
        return self._by_name.get(name) if isinstance(name, str) else None

    def attached(self, resources: Iterable[PolicyResource], types: frozenset[str]) -> dict[str, list[PolicyResource]]:
        """bucket urn -> the resources of `types` that configure it ("" for orphans)."""
        out: dict[str, list[PolicyResource]] = {}
        for resource in resources:
            if resource.resource_type in types:
                bucket = self.of(resource)
                out.setdefault(bucket.urn if bucket else "", []).append(resource)
        return out


def _label(resource: PolicyResource) -> str:
    return f"{resource.resource_type} '{resource.name}'"


# --- Encryption at rest -------------------------------------------------------------


def _sse_defaults(resource: PolicyResource) -> list[tuple[str, Any]]:
    """(path, applyServerSideEncryptionByDefault) of a configuration resource or of a
    bucket's deprecated inline configuration."""
    props = resource.props
    if resource.resource_type in SSE_CONFIGS:
        return [(f"rules[{i}].applyServerSideEncryptionByDefault", get(r, "applyServerSideEncryptionByDefault"))
                for i, r in enumerate(items(get(props, "rules")))]
    found = []
    inline = get(props, "serverSideEncryptionConfiguration")
    if inline is not None:
        found.append(("serverSideEncryptionConfiguration.rule.applyServerSideEncryptionByDefault",
                      get(inline, "rule", "applyServerSideEncryptionByDefault")))
    for c, config in enumerate(items(get(props, "serverSideEncryptionConfigurations"))):
        for i, rule in enumerate(items(get(config, "rules"))):
            for d, default in enumerate(items(get(rule, "applyServerSideEncryptionByDefaults"))):
                found.append((f"serverSideEncryptionConfigurations[{c}].rules[{i}]."
                              f"applyServerSideEncryptionByDefaults[{d}]", default))
    return found


def _sse_problems(resource: PolicyResource) -> list[str]:
    problems = []
    for path, default in _sse_defaults(resource):
        if default is None:
            problems.append(f"{path} is missing")
            continue
        algorithm = get(default, "sseAlgorithm")
        if algorithm is not UNKNOWN and algorithm not in KMS_ALGORITHMS:
            problems.append(f"{path}.sseAlgorithm is {algorithm!r} (SSE-S3, AWS-owned keys); use \"aws:kms\"")
            continue
        problem = key_problem(get(default, "kmsMasterKeyId"), f"{path}.kmsMasterKeyId")
        if problem:
            problems.append(problem)
    return problems


def _check_bucket_encryption(args: StackValidationArgs, report: ReportViolation, settings: Settings) -> None:
    buckets = Buckets(args.resources)
    configs = buckets.attached(args.resources, SSE_CONFIGS)
    for config in configs.get("", []):  # configurations whose bucket is not in this stack
        for problem in _sse_problems(config):
            report(f"{_label(config)}: {problem}", config.urn)
    for bucket in buckets.all:
        mine = configs.get(bucket.urn, [])
        inline = _sse_defaults(bucket)
        if not mine and not inline:
            report(f"{_label(bucket)} has no SSE-KMS configuration: S3 would apply SSE-S3 with AWS-owned keys; add "
                   "a BucketServerSideEncryptionConfiguration with a customer-managed key", bucket.urn)
        for config in mine:
            for problem in _sse_problems(config):
                report(f"{_label(bucket)}: {_label(config)}: {problem}", config.urn)
        for problem in _sse_problems(bucket) if inline else []:
            report(f"{_label(bucket)}: {problem}", bucket.urn)


s3_buckets_encrypted_with_cmk = stack_rule(
    name="s3-buckets-encrypted-with-cmk",
    description="Every bucket has a server-side encryption configuration with SSE-KMS and a customer-managed key; "
    "SSE-S3 and AWS-managed keys (alias/aws/s3) are violations.",
    scope=BUCKETS | SSE_CONFIGS,
    check=_check_bucket_encryption,
    framework=pdpl("Article 20(1)(a)", "Encryption of personal data as a technical security measure."),
    remediation="Attach an aws.s3.BucketServerSideEncryptionConfiguration with sse_algorithm=\"aws:kms\", the "
    "data class's CMK and bucket_key_enabled=True (components/bucket.py RegionPinnedBucket does this).",
    tags=["encryption"],
)


# --- TLS-only bucket policy -----------------------------------------------------------


def policy_document(value: Any) -> Any:
    if value is UNKNOWN:
        # The policy is built from outputs not known yet (a new bucket's ARN); the rule
        # judges it at `pulumi up`, when it is known.
        raise UnknownValueError(UNKNOWN_STRING_VALUE, ["policy"])
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, (str, bool, Mapping)) else items(value)


def _false(value: Any) -> bool:
    return any(v is False or (isinstance(v, str) and v.lower() == "false") for v in _listed(value))


TLS_OPERATORS = ("Bool", "BoolIfExists")


def denies_insecure_transport(document: Any, bucket: str | None) -> bool:
    """A statement that denies every principal every action on this bucket and its objects
    when the request did not come over TLS, and on no other condition: a Deny narrowed by
    another condition, or naming another bucket, leaves plain HTTP open here. `bucket` is the
    bucket's name where known (a new bucket's may not be, during a real preview)."""
    if not isinstance(document, Mapping):
        return False
    return any(_tls_only_statement(statement, bucket) for statement in _listed(get(document, "Statement")))


def _tls_only_statement(statement: Any, bucket: str | None) -> bool:
    if not isinstance(statement, Mapping) or get(statement, "Effect") != "Deny":
        return False
    if any(get(statement, k) is not None for k in ("NotPrincipal", "NotAction", "NotResource")):
        return False
    principal = get(statement, "Principal")
    if principal != "*" and _listed(get(principal, "AWS") if isinstance(principal, Mapping) else None) != ["*"]:
        return False
    if not {"s3:*", "*"} & set(map(str, _listed(get(statement, "Action")))):
        return False
    resources = {str(r) for r in _listed(get(statement, "Resource"))}
    if bucket is not None:
        arns = {f"{partition}:s3:::{bucket}" for partition in _partitions(resources)}
        if not any({arn, f"{arn}/*"} <= resources for arn in arns):
            return False
    elif not any(r.endswith("/*") and r.removesuffix("/*") in resources for r in resources):
        return False
    condition = get(statement, "Condition")
    if not isinstance(condition, Mapping) or len(condition) != 1:
        return False
    operator = next(iter(condition))
    block = get(condition, operator)
    return operator in TLS_OPERATORS and isinstance(block, Mapping) and list(block) == ["aws:SecureTransport"] \
        and _false(get(block, "aws:SecureTransport"))


def _partitions(resources: set[str]) -> set[str]:
    """`arn:aws`, `arn:aws-cn`, ... as the resources name them (`arn:aws` if none)."""
    found = {r.split(":s3:::", 1)[0] for r in resources if ":s3:::" in r and r.startswith("arn:aws")}
    return found or {"arn:aws"}


def _check_bucket_tls(args: StackValidationArgs, report: ReportViolation, settings: Settings) -> None:
    buckets = Buckets(args.resources)
    policies = buckets.attached(args.resources, BUCKET_POLICIES)
    for bucket in buckets.all:
        documents = [(_label(p), get(p.props, "policy")) for p in policies.get(bucket.urn, [])]
        inline = get(bucket.props, "policy")
        if inline is not None:
            documents.append(("inline policy", inline))
        name = get(bucket.props, "bucket")
        name = name if isinstance(name, str) and name else None
        if not any(denies_insecure_transport(policy_document(doc), name) for _, doc in documents):
            where = f" ({', '.join(label for label, _ in documents)})" if documents else ""
            report(f"{_label(bucket)}: no bucket policy denies every principal every action on this bucket and its "
                   f"objects when aws:SecureTransport is false, on no other condition{where}; objects could be read "
                   "or written over plain HTTP", bucket.urn)


s3_buckets_tls_only = stack_rule(
    name="s3-buckets-tls-only",
    description="Every bucket has a policy that denies all S3 actions on it and its objects when "
    "aws:SecureTransport is false.",
    scope=BUCKETS,
    check=_check_bucket_tls,
    framework=TLS_TO_STORAGE,
    remediation="Attach an aws.s3.BucketPolicy with a Deny statement for Principal \"*\", Action \"s3:*\", "
    "Resource [bucket ARN, bucket ARN/*] and Condition {\"Bool\": {\"aws:SecureTransport\": \"false\"}}.",
    tags=["encryption-in-transit"],
)


# --- Public access --------------------------------------------------------------------


def _off_flags(props: Any) -> list[str]:
    return [f for f in ACCESS_BLOCK_FLAGS if flag(get(props, f)) not in (True, UNKNOWN)]


def _check_public_settings(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    """What one resource says, judged before it exists: an access block with a flag off,
    a public canned ACL."""
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in ACCESS_BLOCKS | ACCOUNT_ACCESS_BLOCKS:
        off = _off_flags(args.props)
        if off:
            report(f"{where}: {', '.join(off)} must be true")
    else:
        acl = get(args.props, "acl")
        if isinstance(acl, str) and acl in PUBLIC_ACLS:
            report(f"{where}: acl {acl!r} grants public access")


s3_public_access_settings = resource_rule(
    name="s3-public-access-settings",
    description="A bucket or account public access block has all four settings on; no bucket or bucket ACL grants "
    "a public canned ACL. Judged on the resource itself, so the engine refuses it before it exists.",
    applies=ACCESS_BLOCKS | ACCOUNT_ACCESS_BLOCKS | BUCKETS | BUCKET_ACLS,
    check=_check_public_settings,
    framework=NO_ANONYMOUS_ACCESS,
    remediation="Set block_public_acls, block_public_policy, ignore_public_acls and restrict_public_buckets all "
    "True; keep ObjectOwnership BucketOwnerEnforced and no canned ACL.",
    tags=["exposure"],
)


def _check_public_access(args: StackValidationArgs, report: ReportViolation, settings: Settings) -> None:
    buckets = Buckets(args.resources)
    blocks = buckets.attached(args.resources, ACCESS_BLOCKS)
    for bucket in buckets.all:
        if not blocks.get(bucket.urn):
            report(f"{_label(bucket)} has no BucketPublicAccessBlock; add one with all four settings true",
                   bucket.urn)


s3_buckets_block_public_access = stack_rule(
    name="s3-buckets-block-public-access",
    description="Every bucket has a public access block (which needs the stack to see both); its settings and "
    "ACLs are s3-public-access-settings'.",
    scope=BUCKETS | ACCESS_BLOCKS,
    check=_check_public_access,
    framework=NO_ANONYMOUS_ACCESS,
    remediation="Attach an aws.s3.BucketPublicAccessBlock with block_public_acls, block_public_policy, "
    "ignore_public_acls and restrict_public_buckets all True; keep ObjectOwnership BucketOwnerEnforced.",
    tags=["exposure"],
)
