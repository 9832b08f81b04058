"""The preview report's storage inventory: every resource that stores data, the key that
encrypts it and the region it lives in, for the security team's evidence file.

Keys are found through the engine's property dependencies (which customer-managed key a
resource's encryption input came from), so the answer holds even while ARNs are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.preview.markdown import md_code, md_text
from infra.preview.mocks import Registration

KMS_KEY = "aws:kms/key:Key"
KMS_ALIAS = "aws:kms/alias:Alias"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"

# Storage types -> (what to call it, the input that names its display name, the input
# that carries its key). Buckets carry their key on a separate SSE configuration.
STORAGE_TYPES: dict[str, tuple[str, str, str]] = {
    BUCKET: ("S3 bucket", "bucket", ""),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("FSx for Lustre", "", "kmsKeyId"),
    "aws:ecr/repository:Repository": ("ECR repository", "name", "encryptionConfigurations"),
    "aws:cloudwatch/logGroup:LogGroup": ("CloudWatch log group", "name", "kmsKeyId"),
    "aws:cloudtrail/trail:Trail": ("CloudTrail trail", "name", "kmsKeyId"),
    "aws:ebs/defaultKmsKey:DefaultKmsKey": ("EBS default key", "", "keyArn"),
    "aws:eks/cluster:Cluster": ("EKS secrets", "name", "encryptionConfig"),
}


@dataclass(frozen=True)
class StorageRow:
    kind: str
    name: str
    key: str  # alias of the customer-managed key, "" where none
    region: str
    urn: str


def _key_urn(reg: Registration, field: str, keys: set[str]) -> str:
    return next((urn for urn in reg.property_dependencies.get(field, []) if urn in keys), "")


def storage_inventory(registrations: list[Registration], region_of: Any) -> list[StorageRow]:
    """`region_of(reg)` is the report's own region resolution (own input, else provider)."""
    keys = {r.urn for r in registrations if r.type == KMS_KEY}
    aliases: dict[str, str] = {}
    for reg in registrations:
        if reg.type == KMS_ALIAS:
            target = _key_urn(reg, "targetKeyId", keys)
            if target:
                aliases.setdefault(target, str(reg.inputs().get("name") or reg.name))
    bucket_keys: dict[str, str] = {}
    for reg in registrations:
        if reg.type == BUCKET_SSE:
            for bucket in reg.property_dependencies.get("bucket", []):
                bucket_keys[bucket] = _key_urn(reg, "rules", keys)
    rows = []
    for reg in registrations:
        spec = STORAGE_TYPES.get(reg.type)
        if spec is None or not reg.custom:
            continue
        kind, name_field, key_field = spec
        key_urn = bucket_keys.get(reg.urn, "") if reg.type == BUCKET else _key_urn(reg, key_field, keys)
        inputs = reg.inputs()
        name = str((inputs.get(name_field) if name_field else None) or (inputs.get("tags") or {}).get("Name") or reg.name)
        key = aliases.get(key_urn, key_urn.rsplit("::", 1)[-1]) if key_urn else ""
        rows.append(StorageRow(kind, name, key, region_of(reg) or "unknown", reg.urn))
    return rows


def storage_markdown(rows: list[StorageRow]) -> list[str]:
    """A Markdown section; repositories are summarised per key, they are many and alike."""
    if not rows:
        return []
    out = ["### Storage", "", f"{len(rows)} resources store data; each with its customer-managed key and region.", "",
           "| resource | name | KMS key | region |", "|---|---|---|---|"]
    repositories = [r for r in rows if r.kind == "ECR repository"]
    for row in rows:
        if row.kind != "ECR repository":
            out.append(f"| {row.kind} | {md_code(row.name)} | {_key(row)} | {md_text(row.region)} |")
    groups: dict[tuple[str, str], list[StorageRow]] = {}
    for row in repositories:
        groups.setdefault((row.key, row.region), []).append(row)
    for (key, region), group in sorted(groups.items()):
        names = ", ".join(md_code(r.name) for r in group)
        out.append(f"| ECR repository ×{len(group)} | {names} | {_key(group[0])} | {md_text(region)} |")
    out.append("")
    return out


def _key(row: StorageRow) -> str:
    return md_code(row.key) if row.key else "**none: not encrypted with a customer-managed key**"
