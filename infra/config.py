"""The one typed, validated configuration of a platform stack.

Both ways of running the program read their settings through `parse_config`: the Pulumi
program from the engine's config (`from_pulumi`), the offline preview from the stack file
(`load_stack_file`). So a bad key fails the same way in both, before any resource exists.
Every error is one line that names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import typing
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo,
                      field_validator, model_serializer, model_validator)
from pydantic.alias_generators import to_camel

from components import lustre_spec
from components.training_spec import FRAMEWORKS
from infra import catalog
from infra.versions import BUILT, IMAGES, KUBERNETES_VERSION
from workloads import inputs
from workloads.monitor.alarm import MIN_ROWS as DRIFT_MIN_ROWS

PROJECT = "mlplat"
REPO_ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO_ROOT / "stacks"

# Keys outside our own namespace that the program reads. Anything else under `aws:` would
# configure a default provider, which every stack disables, so it would be silently ignored.
AWS_REGION_KEY = "aws:region"
DISABLE_DEFAULT_PROVIDERS_KEY = "pulumi:disable-default-providers"


class ConfigError(Exception):
    """A user's configuration mistake: printed as one line, exit code 2. A message that
    quotes a long value is cut in its middle: its start names where, its end how to fix."""

    LIMIT = 600

    def __init__(self, message: str = "") -> None:
        message = str(message)
        if len(message) > self.LIMIT:
            message = f"{message[:400]} ... ({len(message) - 550:,} characters cut) ... {message[-150:]}"
        super().__init__(message)


# A stack file is a few kilobytes; a megabyte is far past any real one and still read in
# milliseconds.
STACK_FILE_LIMIT = 1 << 20


class _Model(BaseModel):
    """Strict base: camelCase keys as in the stack file, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ResidencyConfig(_Model):
    # The regions data may live in. Never a wildcard: `me-*` would admit Bahrain.
    allowed_regions: tuple[str, ...] = ("me-central-1",)

    @model_validator(mode="after")
    def _no_wildcards(self) -> ResidencyConfig:
        for region in self.allowed_regions:
            if "*" in region or not region:
                raise ValueError(
                    f"region {region!r} is not allowed; list each region by name, e.g. 'me-central-1'"
                )
        return self


# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                      2922, 3288, 3653)


def _positive_days(value: Any) -> Any:
    """A lifecycle or retention period: a whole number of days, 1 or more."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{value!r} is not a positive whole number of days; allowed: 1 or more")
    return value


class ObjectLockConfig(_Model):
    # GOVERNANCE: holders of s3:BypassGovernanceRetention may still delete early.
    # COMPLIANCE: nobody can, not even the account's root user, until the days run out.
    mode: Literal["GOVERNANCE", "COMPLIANCE"] | None = None
    days: int | None = None

    _days = field_validator("days", mode="before")(_positive_days)

    @model_validator(mode="after")
    def _complete(self) -> ObjectLockConfig:
        if self.mode is None:
            raise _FieldError("mode", "is missing; an Object Lock retention needs a mode; allowed: GOVERNANCE, COMPLIANCE")
        if self.days is None:
            raise _FieldError("days", "is missing; allowed: a whole number of days, 1 or more")
        return self


class LustreConfig(_Model):
    # Off by default: scratch space costs money around the clock; stacks that train turn it on.
    enabled: bool = False
    storage_capacity_gib: int = Field(default=lustre_spec.SMALLEST_CAPACITY_GIB, alias="storageCapacityGiB")
    per_unit_storage_throughput: int = 250

    @field_validator("storage_capacity_gib", mode="before")
    @classmethod
    def _capacity(cls, value: Any) -> Any:
        error = lustre_spec.capacity_error(value)
        if error:
            raise ValueError(error)
        return value

    @field_validator("per_unit_storage_throughput", mode="before")
    @classmethod
    def _throughput(cls, value: Any) -> Any:
        error = lustre_spec.throughput_error(value)
        if error:
            raise ValueError(error)
        return value


class StorageConfig(_Model):
    # Throwaway environments may turn this on so `pulumi destroy` can empty buckets and
    # registries; it also lifts their protection.
    force_destroy: bool = False
    log_retention_days: int = 365
    # Object versions replaced or deleted this many days ago are removed for good.
    noncurrent_version_days: int = 90
    # ... except in the datasets bucket: a replaced or deleted dataset object stays this
    # long, so the data a served model was trained on can still be read back.
    dataset_version_days: int = 730
    # The audit bucket is write-once: every object is locked for this long.
    audit_object_lock: ObjectLockConfig = ObjectLockConfig(mode="GOVERNANCE", days=365)
    lustre: LustreConfig = LustreConfig()
    # On: objects of the data buckets can be read and written only through the VPC's S3
    # endpoint (bucket settings stay manageable from outside). Off by default because
    # uploads from outside the VPC (an office, a transfer service) stop working.
    vpc_endpoint_only: bool = False
    # EBS encryption by default and its default key are one setting per account and
    # region, not per stack: exactly one stack in each account and region turns this on
    # and owns them (components/volumes.py). Every volume the platform itself makes names
    # the volumes key, so the other stacks do not depend on the default.
    ebs_account_defaults: bool = False

    _noncurrent = field_validator("noncurrent_version_days", "dataset_version_days", mode="before")(_positive_days)

    @model_validator(mode="after")
    def _retention(self) -> StorageConfig:
        if self.log_retention_days not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"logRetentionDays {self.log_retention_days} is not a CloudWatch retention period; "
                f"allowed: {', '.join(map(str, LOG_RETENTION_DAYS))}"
            )
        return self


class NodePoolConfig(_Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    # system: cluster add-ons; cpu: CPU workloads (smb); gpu: training; inference: serving.
    role: Literal["system", "cpu", "gpu", "inference"]
    instance_type: str
    min_size: int = Field(ge=0)
    max_size: int = Field(ge=1)
    desired_size: int | None = Field(default=None, ge=0)
    efa: bool = False
    # A cluster placement group in this zone (id, e.g. mec1-az1): the pool's nodes share a
    # network spine. Optional, because capacity reservations and Capacity Blocks come
    # with their own placement and forbid forcing one.
    placement_group_zone_id: str | None = None
    # Pin the pool to one zone without a placement group (EFA traffic stays in one subnet).
    zone_id: str | None = None
    capacity_reservation_id: str | None = Field(default=None, pattern=r"^cr-[0-9a-f]{8,17}$")
    # The reservation is an EC2 Capacity Block for ML (its own market type and capacity type).
    capacity_block: bool = False
    # Types AWS seldom has on demand several at a time (the UltraCluster training types)
    # need a reservation or a Capacity Block; `onDemand: true` launches without one and
    # takes the risk of InsufficientInstanceCapacity (preflight refuses otherwise).
    on_demand: bool = False
    root_volume_gib: int | None = Field(default=None, ge=20, le=16384)

    @field_validator("instance_type")
    @classmethod
    def _in_catalog(cls, value: str) -> str:
        try:
            return catalog.lookup(value).name
        except catalog.UnknownInstanceType:
            raise ValueError(catalog.unknown_type_message(value)) from None

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.lookup(self.instance_type)

    @property
    def pinned_zone_id(self) -> str | None:
        return self.placement_group_zone_id or self.zone_id

    @model_validator(mode="after")
    def _sizes(self) -> NodePoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(
                f"minSize {self.min_size} is above maxSize {self.max_size}; set minSize <= maxSize"
            )
        if self.desired_size is not None and not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"desiredSize {self.desired_size} is outside [{self.min_size}, {self.max_size}]"
            )
        return self

    @model_validator(mode="after")
    def _gpu_roles(self) -> NodePoolConfig:
        if self.role in ("gpu", "inference") and not self.instance.has_gpu:
            raise _FieldError(
                "instanceType",
                f"{self.instance_type!r} has no GPU but the pool's role is {self.role!r}; "
                "choose a GPU type (e.g. g6e.2xlarge, p5.48xlarge) or role 'cpu'",
            )
        return self

    @model_validator(mode="after")
    def _efa(self) -> NodePoolConfig:
        if not self.efa:
            return self
        it = self.instance
        if not it.has_efa:
            with_efa = sorted(t.name for t in catalog.efa_types() if t.family == it.family)
            hint = f"EFA sizes of {it.family}: {', '.join(with_efa)}" if with_efa else "e.g. p5.48xlarge"
            raise _FieldError("efa", f"{self.instance_type!r} has no EFA interfaces; set efa: false or use an EFA type ({hint})")
        if self.min_size == 1:
            raise _FieldError(
                "minSize", "1 is too small for an EFA pool; EFA pools run at 0 (until capacity is there) or at least "
                           "2 nodes (minSize >= 2)"
            )
        if self.pinned_zone_id is None:
            raise _FieldError(
                "placementGroupZoneId",
                "is required for an EFA pool (EFA traffic never leaves one subnet); set it to a zone id such as "
                "mec1-az1, or set zoneId instead where a capacity reservation forbids a placement group",
            )
        return self

    @model_validator(mode="after")
    def _placement(self) -> NodePoolConfig:
        if self.placement_group_zone_id and self.zone_id and self.placement_group_zone_id != self.zone_id:
            raise _FieldError(
                "zoneId", f"{self.zone_id!r} differs from placementGroupZoneId {self.placement_group_zone_id!r}; set one"
            )
        if self.capacity_block and not self.capacity_reservation_id:
            raise _FieldError("capacityReservationId", "is required with capacityBlock: true (the Capacity Block's cr- id)")
        if self.capacity_block and self.placement_group_zone_id:
            raise _FieldError(
                "placementGroupZoneId",
                "cannot be used with a Capacity Block, which comes placed; use zoneId for the block's zone",
            )
        return self


# Zone ids by region: the default network spans all of them. Zone names (me-central-1a)
# are shuffled per account, ids are not, so the platform always speaks of ids.
REGION_ZONE_IDS: dict[str, tuple[str, ...]] = {
    "me-central-1": ("mec1-az1", "mec1-az2", "mec1-az3"),
}


# A domain the egress allow-list admits: `example.com` exactly, `.example.com` it and every
# name under it (AWS Network Firewall's domain-list syntax). No wildcard elsewhere.
_DOMAIN = re.compile(r"^\.?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


class EgressConfig(_Model):
    # How the private subnets reach the internet:
    # - nat: a NAT gateway, anywhere on 443 (dev, smb: throwaway or small environments);
    # - allow-list: AWS Network Firewall in front of the NAT gateway, which passes TLS and
    #   HTTP only to `allowedDomains` (by SNI and Host) and drops everything else;
    # - none: no NAT gateway and no internet gateway at all; AWS only through VPC endpoints.
    # A restricted environment may not use nat.
    mode: Literal["nat", "allow-list", "none"] = "nat"
    allowed_domains: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _domains(self) -> EgressConfig:
        if self.mode == "allow-list" and not self.allowed_domains:
            raise ValueError("mode allow-list with no allowedDomains; list what must be reached (e.g. .github.com), "
                             "or set mode: none")
        if self.allowed_domains and self.mode != "allow-list":
            raise ValueError(f"allowedDomains are set but mode is {self.mode}; set mode: allow-list or remove them")
        for domain in self.allowed_domains:
            if not _DOMAIN.match(domain):
                raise ValueError(f"{domain!r} is not a domain name (example.com, or .example.com for it and every "
                                 "name under it); no other wildcard, scheme or port")
        if len(set(self.allowed_domains)) != len(self.allowed_domains):
            raise ValueError("a domain is listed twice in allowedDomains")
        return self


class NetworkConfig(_Model):
    vpc_cidr: str = "10.0.0.0/16"
    # Empty: every zone of the region (REGION_ZONE_IDS).
    zone_ids: tuple[str, ...] = ()
    # One NAT gateway for the whole VPC instead of one per zone: cheaper, but egress
    # stops when that zone does. For throwaway environments.
    single_nat_gateway: bool = False
    egress: EgressConfig = EgressConfig()

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 network in CIDR form, e.g. 10.0.0.0/16") from None
        if not 16 <= network.prefixlen <= 20:
            raise ValueError(f"{value!r}: use a prefix between /16 and /20 (pods take VPC addresses)")
        return str(network)

    @field_validator("zone_ids")
    @classmethod
    def _zones(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value and not 2 <= len(value) <= 3:
            raise ValueError(f"{list(value)}: list two or three zone ids (EKS needs subnets in two zones)")
        if len(set(value)) != len(value):
            raise ValueError(f"{list(value)}: a zone id is listed twice")
        return value


class DeployRunnerConfig(_Model):
    # The GitHub repository (owner/name) whose workflow jobs the in-VPC runner takes: the
    # cluster layer's deploy (components/specs/deploy_runner.py).
    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    # GitHub user ids (numbers: `gh api users/<login> --jq .id`) whose pushes to main may
    # start a runner: who merges. Without them, any actor's job asking for the label would.
    actor_ids: tuple[int, ...] = Field(min_length=1)
    # The runner's GitHub token is in its secret (docs/bring-up.md, one step by hand): only
    # then is the webhook created, which GitHub refuses without a token.
    token_stored: bool = False

    @field_validator("actor_ids")
    @classmethod
    def _actors(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(actor <= 0 for actor in value) or len(set(value)) != len(value):
            raise ValueError(f"{list(value)}: list each GitHub user id (a positive number) once")
        return value


class PublicEndpointConfig(_Model):
    # Off: the API server is reachable only inside the VPC. On: also from these CIDRs.
    enabled: bool = False
    cidrs: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _allow_list(self) -> PublicEndpointConfig:
        if self.enabled and not self.cidrs:
            raise ValueError("enabled without cidrs; list the networks allowed to reach the API server")
        if self.cidrs and not self.enabled:
            raise ValueError("cidrs are set but enabled is false; remove them or set enabled: true")
        for cidr in self.cidrs:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR, e.g. 203.0.113.0/24") from None
            if network.prefixlen == 0:
                raise ValueError(f"{cidr!r} opens the API server to the whole internet; list your own networks")
            widest = 8 if network.version == 4 else 16
            if network.prefixlen < widest:
                raise ValueError(f"{cidr!r} is wider than /{widest}; list your own networks")
        return self


_ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$"


_ROLE_NAME = r"^[A-Za-z0-9+=,.@_-]{1,64}$"


class ClusterConfig(_Model):
    version: str = Field(default=KUBERNETES_VERSION, pattern=r"^1\.[0-9]{2}$")
    public_endpoint: PublicEndpointConfig = PublicEndpointConfig()
    # The cluster's two standing administrators, roles in the deploying account by name
    # (or ARN): the role `pulumi up` runs as, and the break-glass role for when that path
    # is down. Required: without them the identity that created the cluster would be its
    # only admin (PlatformConfig._administrators).
    deployer_role: str | None = None
    break_glass_role: str | None = None
    admin_role_arns: tuple[str, ...] = ()
    read_only_role_arns: tuple[str, ...] = ()
    # The control plane cannot be deleted until this is turned off in a separate update.
    deletion_protection: bool = True

    @field_validator("deployer_role", "break_glass_role")
    @classmethod
    def _role(cls, value: str | None) -> str | None:
        import re

        if value is not None and not (re.match(_ROLE_ARN, value) or re.match(_ROLE_NAME, value)):
            raise ValueError(f"{value!r} is neither an IAM role name nor a role ARN (arn:aws:iam::<account>:role/<name>)")
        return value

    def role_arn(self, role: str, account_id: str) -> str:
        """A role named in this config, as an ARN in the deploying account."""
        return role if role.startswith("arn:") else f"arn:aws:iam::{account_id}:role/{role}"

    @field_validator("admin_role_arns", "read_only_role_arns")
    @classmethod
    def _role_arns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import re

        for arn in value:
            if not re.match(_ROLE_ARN, arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
        return value


# --- Cluster add-ons and tenants -----------------------------------------------------

DEVICE_PLUGIN_MODES = ("device-plugin", "gpu-operator")
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"

# AWS's rule for tag values (EC2's, the strictest a default tag meets): at most 256
# characters; letters, digits, spaces and _ . : / = + - @. Here a space is a space
# separator (Unicode Zs): no newline, tab, escape or other control character, which would
# reach every resource's tags and the reports.
AWS_TAG_VALUE_MAX = 256
_TAG_PUNCTUATION = frozenset("_.:/=+-@")


def _aws_tag_value(value: str) -> str:
    if len(value) > AWS_TAG_VALUE_MAX:
        raise ValueError(f"is {len(value):,} characters; an AWS tag value may have at most {AWS_TAG_VALUE_MAX}")
    for char in value:
        if not (char in _TAG_PUNCTUATION or unicodedata.category(char)[0] in "LN" or
                unicodedata.category(char) == "Zs"):
            raise ValueError(f"{inputs.excerpt(value)} holds {char!r}, which AWS tag values do not allow (letters, "
                             "digits, spaces and _ . : / = + - @)")
    return value


# A value every AWS resource of the environment carries as a tag (PlatformConfig.default_tags).
TagValue = Annotated[str, Field(min_length=1), AfterValidator(_aws_tag_value)]
_GROUP = r"^[A-Za-z0-9][A-Za-z0-9:._@-]{0,127}$"


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


class TelemetryConfig(_Model):
    enabled: bool = True
    retention_days: int = Field(default=15, ge=1, le=365)
    prometheus_volume_gi: int = Field(default=100, ge=10, le=16384)
    alertmanager_volume_gi: int = Field(default=10, ge=1, le=1024)
    # Alert thresholds: GPU temperature (C) and the utilisation under which an allocated GPU
    # counts as idle (%).
    gpu_temperature_celsius: int = Field(default=85, ge=60, le=100)
    gpu_idle_percent: int = Field(default=10, ge=0, le=100)


class AddonsConfig(_Model):
    # One switch, so the NVIDIA device plugin and the GPU Operator (which brings its own
    # device plugin) can never both run and fight over the GPUs.
    device_plugin_mode: Literal["device-plugin", "gpu-operator"] = "device-plugin"
    # Each GPU is advertised this many times (CUDA time-slicing); 1: no sharing.
    time_slicing_replicas: int = 1
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    telemetry: TelemetryConfig = TelemetryConfig()
    # Where Helm fetches the charts: `ecr`, the environment's repositories in the account's
    # in-region ECR (oci://<account>.dkr.ecr.<region>.amazonaws.com/mlplat/<env>/charts),
    # which `mlplat mirror` fills; or an oci:// URL of another in-country registry. Never
    # the charts' upstream repositories.
    chart_mirror: str = "ecr"

    @field_validator("device_plugin_mode", mode="before")
    @classmethod
    def _one_mode(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            raise ValueError(
                f"{list(value)!r}: choose one of {', '.join(map(repr, DEVICE_PLUGIN_MODES))}; the GPU Operator "
                "brings its own device plugin, so both cannot run"
            )
        if _lower(value) == "both":
            raise ValueError(
                f"{value!r}: choose one of {', '.join(map(repr, DEVICE_PLUGIN_MODES))}; the GPU Operator "
                "brings its own device plugin, so both cannot run"
            )
        return _lower(value)

    @field_validator("mig_strategy", mode="before")
    @classmethod
    def _mig_lower(cls, value: Any) -> Any:
        return _lower(value)

    @field_validator("time_slicing_replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"{value} is below 1; use 1 (no sharing) or N > 1 to share each GPU N ways")
        return value

    @field_validator("chart_mirror")
    @classmethod
    def _mirror(cls, value: str) -> str:
        if value != "ecr" and not value.startswith("oci://"):
            raise ValueError(f"{value!r} is not a chart mirror; use 'ecr' or an oci:// URL")
        return value


class TenantQuotasConfig(_Model):
    cpu: int = Field(ge=1)  # cores
    memory_gi: int = Field(ge=1)
    gpu: int = Field(default=0, ge=0)  # advertised GPUs (time-sliced replicas count)
    efa: int = Field(default=0, ge=0)  # EFA interfaces
    # What Kueue does not count: pods (each is an API object, an IP and kubelet work),
    # volume claims' storage and node-local disk (ephemeral-storage requests).
    pods: int = Field(default=200, ge=1, le=10000)
    storage_gi: int = Field(default=2000, ge=0)
    ephemeral_gi: int = Field(default=500, ge=0)


class TenantConfig(_Model):
    name: str = Field(pattern=_DNS_LABEL)  # also the namespace and the ClusterQueue
    quotas: TenantQuotasConfig
    # Tenants in one cohort lend each other their unused quota.
    cohort: str | None = Field(default=None, pattern=_DNS_LABEL)
    # Kubernetes groups bound to the tenant's developer Role in its namespace...
    groups: tuple[str, ...] = ()
    # ...and the IAM roles mapped to those groups through EKS access entries.
    role_arns: tuple[str, ...] = ()
    # GPU instance types the tenant's queue may use, in order of preference; unset: all.
    instance_types: tuple[str, ...] | None = None
    # The tenant's group (components/tenancy_spec.py GID_RANGE); unset: drawn from its name.
    gid: int | None = Field(default=None, ge=1000, le=2_147_483_647)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        from components.lustre_spec import DATASETS_PATH
        from components.tenancy_spec import RESERVED_NAMES, RESERVED_PREFIXES, platform_identity

        if value in RESERVED_NAMES:
            raise ValueError(f"{value!r} is a system namespace; pick another tenant name")
        prefix = next((p for p in RESERVED_PREFIXES if value.startswith(p)), None)
        if prefix is not None:
            raise ValueError(f"{value!r} starts with {prefix!r}, which Kubernetes or the platform reserves; pick "
                             "another tenant name")
        if platform_identity(value):
            raise ValueError(f"{value!r} is {platform_identity(value)}; pick another tenant name")
        # Each tenant gets /<name> on the Lustre file system, beside the datasets directory.
        if value == DATASETS_PATH.strip("/"):
            raise ValueError(f"{value!r} is the datasets directory on the Lustre file system; pick another tenant "
                             "name")
        return value

    @field_validator("groups")
    @classmethod
    def _groups(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import re

        for group in value:
            if group.startswith("system:") or not re.match(_GROUP, group):
                raise ValueError(f"{group!r} is not allowed as a tenant group; use letters, digits and :._@- "
                                 "and never the system: prefix")
        return value

    @field_validator("role_arns")
    @classmethod
    def _role_arns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return ClusterConfig._role_arns(value)

    @field_validator("instance_types")
    @classmethod
    def _types(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        try:
            return tuple(catalog.lookup(v).name for v in value)
        except catalog.UnknownInstanceType as err:
            raise ValueError(catalog.unknown_type_message(str(err.args[0]))) from None

    @field_validator("gid")
    @classmethod
    def _gid(cls, value: int | None) -> int | None:
        from components.tenancy_spec import RESERVED_GIDS

        if value in RESERVED_GIDS:
            raise ValueError(f"{value} is {RESERVED_GIDS[value]}; pick another group for the tenant")
        return value

    @property
    def group(self) -> int:
        """The tenant's group: its config's, or the one drawn from its name."""
        from components.tenancy_spec import tenant_gid

        return self.gid if self.gid is not None else tenant_gid(self.name)

    @model_validator(mode="after")
    def _arns_need_groups(self) -> TenantConfig:
        if self.role_arns and not self.groups:
            raise _FieldError("groups", "is empty but roleArns are set; name the groups those roles are mapped to")
        return self


class TrackingConfig(_Model):
    """The MLflow tracking server and model registry (components/tracking_spec.py): its
    PostgreSQL on RDS in the cloud layer, the server in the cluster layer."""

    enabled: bool = True
    instance_class: str = Field(default="db.t4g.medium", pattern=r"^db\.[a-z0-9]+\.[a-z0-9]+$")
    storage_gib: int = Field(default=20, ge=20, le=65536, alias="storageGiB")
    max_storage_gib: int = Field(default=100, ge=20, le=65536, alias="maxStorageGiB")
    multi_az: bool = False  # a standby in a second zone
    backup_days: int = Field(default=14, ge=1, le=35)  # automated backups, kept in the region
    pool: str | None = None  # default: the first cpu pool, else the system pool
    replicas: int = Field(default=2, ge=1, le=10)

    @model_validator(mode="after")
    def _storage_can_grow(self) -> TrackingConfig:
        if self.max_storage_gib < self.storage_gib:
            raise _FieldError("maxStorageGiB", f"{self.max_storage_gib} is below storageGiB {self.storage_gib}")
        return self


class FeaturesConfig(_Model):
    """The Feast feature store (components/features_spec.py): ElastiCache for Redis as the
    online store in the cloud layer; per tenant, a project with its registry and offline
    data under `features/<tenant>/` in the datasets bucket, a feature server and a
    materialization CronJob in the cluster layer."""

    enabled: bool = True
    node_type: str = Field(default="cache.t4g.small", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    # Cache nodes: the primary and its replicas, spread over the zones; 2 or more fail over
    # on their own (Multi-AZ).
    nodes: int = Field(default=1, ge=1, le=6)
    snapshot_days: int = Field(default=7, ge=0, le=35)  # daily snapshots, kept in the region
    # TLS between clients and the cache. Required: IAM authentication and the tenants' users
    # need it, and the features cross the VPC's network in the clear otherwise.
    transit_encryption: bool = True
    # How often each tenant's CronJob materializes new offline rows into the online store,
    # and after how long without a materialization the freshness alert fires.
    materialize_every_minutes: int = Field(default=60, ge=5, le=1440)
    late_after_minutes: int | None = Field(default=None, ge=10)  # default: twice the interval plus 15
    server_replicas: int = Field(default=2, ge=1, le=10)
    pool: str | None = None  # default: the first cpu pool, else the system pool
    # Tenants with a project; unset: every tenant. Each tenant's project is named after it
    # (hyphens as underscores) unless `projects` names it.
    tenants: tuple[str, ...] | None = None
    projects: dict[str, str] = {}

    @field_validator("transit_encryption")
    @classmethod
    def _tls_only(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false would leave the online store without TLS; ElastiCache IAM authentication and "
                             "the tenants' users need it: remove the key or set it to true")
        return value

    @field_validator("materialize_every_minutes")
    @classmethod
    def _cron_expressible(cls, value: int) -> int:
        if not (60 % value == 0 or (value % 60 == 0 and 1440 % value == 0)):
            raise ValueError(f"{value} is not a divisor of an hour or of a day in whole hours (a cron schedule "
                             "runs on the clock); use e.g. 15, 30, 60, 120 or 360")
        return value

    @field_validator("projects")
    @classmethod
    def _project_names(cls, value: dict[str, str]) -> dict[str, str]:
        for tenant, project in value.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,38}", project):
                raise ValueError(f"{tenant}: {project!r} is not a Feast project name; use lowercase letters, digits "
                                 "and underscores, starting with a letter")
        return value

    @property
    def late_after(self) -> int:
        return self.late_after_minutes or 2 * self.materialize_every_minutes + 15


class TrainingParallelConfig(_Model):
    """How the trainer splits each model over the job's GPUs (workloads/train/shapes.py
    Layout): the data-parallel ranks are what tp x pp leave of the world."""

    tp: int = Field(default=1, ge=1)  # tensor-parallel ranks, within one node (NVLink)
    pp: int = Field(default=1, ge=1)  # pipeline stages
    dp_replicate: int = Field(default=1, ge=1)  # HSDP replicas (strategy fsdp)
    pp_schedule: Literal["1f1b", "interleaved"] = "1f1b"


# The platform trainer's own settings: a tenant's image reads none of them.
TRAINER_KEYS = ("model", "strategy", "precision", "compile", "max_steps", "micro_batch", "global_batch",
                "checkpoint_every", "data_path", "parallel", "activation_checkpoint")
# `<repository>:<tag>@sha256:<digest>` in the environment's in-region registry.
_USER_IMAGE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                         r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}@sha256:[0-9a-f]{64}$")


TRAINER_MAX_STEPS, TRAINER_MAX_BATCH, TRAINER_MAX_GLOBAL_BATCH = 1_000_000_000, 65536, 1 << 24


class TrainingConfig(_Model):
    """The training job a stack runs on a GPU pool (components/training.py), with the GPU
    node check on every node of the pool and, for multi-node EFA jobs, the all-reduce
    bandwidth check. Stacks without a gpu pool run none of it."""

    enabled: bool = True
    name: str = Field(default="gpt2-smoke", pattern=r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
    tenant: str | None = None  # default: the first tenant with a GPU quota for the pool
    pool: str | None = None  # default: the first pool with role gpu
    nodes: int | None = Field(default=None, ge=1)  # default: the pool's minSize (at least 1)
    min_nodes: int | None = Field(default=None, ge=1)  # torchrun's elastic lower bound; default: nodes
    # torchrun: the platform's trainer. deepspeed, horovod, tensorflow: the tenant's image and
    # command, launched the framework's way on the same pods.
    framework: Literal["torchrun", "deepspeed", "horovod", "tensorflow"] = "torchrun"
    # The tenant's training image (frameworks other than torchrun): a repository of the
    # environment's in-region registry, pinned by digest, as every image the cluster pulls.
    image: str | None = None
    command: tuple[str, ...] | None = None  # what each worker runs (frameworks other than torchrun)
    model: str = "gpt2-124m"  # a preset of workloads/train/shapes.py PRESETS
    strategy: Literal["ddp", "fsdp"] = "ddp"
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    compile: bool = True
    parallel: TrainingParallelConfig = TrainingParallelConfig()
    activation_checkpoint: Literal["none", "selective", "full"] = "none"
    # The trainer's own bounds (workloads/train/train.py MAX_*), so a value it would refuse
    # in the pod is refused at preview.
    max_steps: int = Field(default=500, ge=1, le=TRAINER_MAX_STEPS)
    micro_batch: int = Field(default=16, ge=1, le=TRAINER_MAX_BATCH)  # sequences per GPU per forward pass
    # Sequences per optimiser step, kept at every node count from minNodes to nodes by
    # adapting gradient accumulation; default: the smallest that every count divides.
    global_batch: int | None = Field(default=None, ge=1, le=TRAINER_MAX_GLOBAL_BATCH)
    checkpoint_every: int = Field(default=100, ge=1, le=TRAINER_MAX_STEPS)
    # Token shards (workloads/train/data.py format) on the Lustre mount; unset: synthetic.
    data_path: str | None = None
    # The collective check fails below this all-reduce bus bandwidth; default: 3/4 of the
    # node's network line rate in GB/s (300 for p5, NVIDIA's gate for two p5 nodes).
    min_bus_bandwidth_gbps: float | None = Field(default=None, gt=0, alias="minBusBandwidthGBps")

    @field_validator("name")
    @classmethod
    def _own_role(cls, value: str) -> str:
        from components.training_spec import role_collision

        clash = role_collision(value)
        if clash:
            raise ValueError(f"{value!r} would give the job the IAM name of the tenant's {clash} "
                             "(<prefix>-<tenant>-<name>); pick another name")
        return value

    @field_validator("framework", mode="before")
    @classmethod
    def _known_framework(cls, value: Any) -> Any:
        if _lower(value) == "mxnet":
            raise ValueError(f"{value!r} is not supported: Apache MXNet was retired upstream (moved to the Apache "
                             f"Attic in 2023); allowed: {', '.join(FRAMEWORKS)}")
        return value

    @field_validator("model")
    @classmethod
    def _preset(cls, value: str) -> str:
        from workloads.train.shapes import PRESETS

        if value not in PRESETS:
            raise ValueError(f"{value!r} is not a model preset; allowed: {', '.join(sorted(PRESETS))}")
        return value

    @field_validator("name")
    @classmethod
    def _not_a_platform_account(cls, value: str) -> str:
        # The job's service account is named after it, beside the platform's own in the
        # tenant's namespace: self-service jobs', the pipeline engine's and steps', the feature store's.
        if value in ("trainer", "pipeline-engine", "pipeline-steps", "feature-store"):
            raise ValueError(f"{value!r} is the name of a service account the platform makes in the tenant's "
                             "namespace; name the job differently")
        return value

    @field_validator("image")
    @classmethod
    def _in_region_image(cls, value: str | None) -> str | None:
        if value is None:
            return value
        first = value.split("/", 1)[0]
        if "/" in value and ("." in first or ":" in first or first == "localhost"):
            raise ValueError(f"{value!r} names a registry ({first}); give the repository in the environment's "
                             "in-region ECR, <repository>:<tag>@sha256:<digest>, after pushing or mirroring it there")
        if not _USER_IMAGE.match(value):
            raise ValueError(f"{value!r} is not <repository>:<tag>@sha256:<digest>; images are pulled by digest, "
                             "e.g. research/horovod:0.28.1@sha256:<64 hex digits>")
        return value

    @model_serializer(mode="wrap")
    def _only_what_the_framework_reads(self, handler: Any, info: Any) -> Any:
        """The descriptor carries these settings to the cluster layer, which validates them
        again: the trainer's keys, unset with another framework, stay unset there."""
        data = handler(self)
        if self.framework != "torchrun" and isinstance(data, dict):
            for key in TRAINER_KEYS:
                data.pop(to_camel(key) if info.by_alias else key, None)
        return data

    @model_validator(mode="after")
    def _framework_options(self) -> TrainingConfig:
        """Each framework gets only the keys it uses: a key it would ignore is an error."""
        if self.framework == "torchrun":
            for key in ("image", "command"):
                if getattr(self, key) is not None:
                    raise _FieldError(key, "is for framework deepspeed, horovod or tensorflow (the tenant's own "
                                      "image); torchrun runs the platform's trainer")
            return self
        for key in TRAINER_KEYS:
            if key in self.model_fields_set:
                raise _FieldError(to_camel(key), f"is a setting of the platform's trainer (framework torchrun); "
                                  f"framework {self.framework} runs your image's command, so set it there")
        for key in ("image", "command"):
            if getattr(self, key) is None:
                raise _FieldError(key, f"is required with framework {self.framework}: your training image and "
                                  "the command each worker runs")
        if not self.command:
            raise _FieldError("command", "is empty; give the command each worker runs, e.g. [python, train.py]")
        return self


class InferenceLoadBalancerConfig(_Model):
    # Off: Triton is reachable only inside the cluster. On: also through an internal NLB
    # that terminates TLS with this ACM certificate (the AWS Load Balancer Controller makes it).
    enabled: bool = False
    certificate_arn: str | None = None
    # Networks allowed to connect; empty: the VPC's own CIDR.
    allowed_cidrs: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _certificate(self) -> InferenceLoadBalancerConfig:
        if self.enabled and not self.certificate_arn:
            raise _FieldError("certificateArn", "is required with enabled: true; the load balancer only speaks TLS")
        for cidr in self.allowed_cidrs:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                raise _FieldError("allowedCidrs", f"{cidr!r} is not a CIDR, e.g. 10.20.0.0/16") from None
            if network.prefixlen < 8:
                raise _FieldError("allowedCidrs", f"{cidr!r} is wider than /8; list the networks of your clients")
        return self


class InferenceAbortConfig(_Model):
    """When a canary is rolled back (components/rollout_spec.py AbortRule): its error rate
    above `errorRatio` times the stable's (and above `errorFloor`), or its p99 above
    `p99Ratio` times the stable's, for `windowMinutes`, while it takes at least
    `minRequestsPerSecond`."""

    error_ratio: float = Field(default=2.0, gt=1)
    error_floor: float = Field(default=0.01, gt=0, lt=1)
    p99_ratio: float = Field(default=1.5, gt=1, alias="p99Ratio")
    window_minutes: int = Field(default=10, ge=1, le=60)
    min_requests_per_second: float = Field(default=0.5, ge=0)


class InferenceRolloutConfig(_Model):
    """How a new `version` reaches traffic (Argo Rollouts, through the gateway's routes).
    canary: the canary's share at each step, each held `stepMinutes` while the abort rule
    watches, then promoted. ab: `weights` held until someone promotes or aborts."""

    strategy: Literal["canary", "ab"] = "canary"
    steps: tuple[int, ...] = (10, 25, 50)
    step_minutes: int = Field(default=10, ge=1)
    weights: dict[str, int] | None = None  # ab: {stable: N, canary: 100 - N}
    abort: InferenceAbortConfig = InferenceAbortConfig()

    @model_validator(mode="after")
    def _split(self) -> InferenceRolloutConfig:
        if self.strategy == "canary":
            if self.weights is not None:
                raise _FieldError("weights", "is for strategy: ab; a canary moves through `steps`")
            if not self.steps or any(not 0 < w < 100 for w in self.steps) or list(self.steps) != sorted(set(self.steps)):
                raise _FieldError("steps", f"{list(self.steps)}: give the canary's share at each step, rising, "
                                           "each from 1 to 99 (after the last step it takes all traffic)")
            return self
        if self.weights is None:
            raise _FieldError("weights", "is required with strategy: ab, e.g. {stable: 50, canary: 50}")
        if set(self.weights) != {"stable", "canary"}:
            raise _FieldError("weights", f"names {sorted(self.weights)}; name exactly the two variants: stable and "
                                         "canary")
        if any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) != 100:
            raise _FieldError("weights", f"{self.weights} add up to {sum(self.weights.values())}; the shares of "
                                         "traffic must add up to 100")
        if not 0 < self.weights["canary"] < 100:
            raise _FieldError("weights", "give each variant some traffic (1 to 99); 0 or 100 is no A/B test")
        return self


class InferenceAuthConfig(_Model):
    """Every request through the inference gateway carries a JWT of the enterprise identity
    provider (OIDC): signed with its keys (`jwksUri`), from `issuer`, for one of
    `audiences`, not expired; and its `tenantClaim` names one of `tenants`."""

    issuer: str = Field(pattern=r"^https://[^\s/]+(/\S*)?$")
    audiences: tuple[str, ...] = Field(min_length=1)
    jwks_uri: str = Field(pattern=r"^https://[^\s/]+(/\S*)?$", alias="jwksUri")
    tenant_claim: str = Field(default="tenant", min_length=1, max_length=253)
    tenants: tuple[str, ...] = Field(min_length=1)


class InferenceRequestLoggingConfig(_Model):
    """A sample of the requests the gateway lets through, kept in the region's datasets
    bucket (workloads/monitor/request_log.py): each input field marked personal or plain;
    personal ones are dropped unless `allowPersonal`, which the policy pack reports."""

    enabled: bool = True
    # At least 0.01%: Gateway API's mirror fraction is whole ten-thousandths here.
    sample_percent: float = Field(default=1.0, ge=0.01, le=100)
    retention_days: int = Field(default=30, ge=1, le=3650)
    fields: dict[str, Literal["personal", "plain"]] = {"input_ids": "personal"}
    allow_personal: bool = False
    # Also keep what the model answered (the outputs marked in `fields`): the gateway then
    # streams each request and its response to the logger (Envoy's ext_proc, shadow mode),
    # instead of mirroring the request alone.
    log_outputs: bool = False

    @model_validator(mode="after")
    def _every_input_marked(self) -> InferenceRequestLoggingConfig:
        from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME, TOP_K_IDS, TOP_K_LOGPROBS

        if INPUT_NAME not in self.fields:
            raise _FieldError("fields", f"{sorted(self.fields)} does not mark {INPUT_NAME}, the model's input: mark it "
                                        "personal (a person's text as token ids) or plain")
        known = (INPUT_NAME, OUTPUT_NAME, TOP_K_IDS, TOP_K_LOGPROBS)
        unknown = sorted(set(self.fields) - set(known))
        if unknown:
            raise _FieldError("fields", f"{', '.join(unknown)} is not an input or output of the served model; "
                                        f"known: {', '.join(known)}")
        return self


class InferenceDriftConfig(_Model):
    """The scheduled drift check of the served version (components/drift_spec.py): its
    logged requests against its training data, found through the registry's lineage."""

    enabled: bool = False
    registered_model: str | None = None  # the served model's name in the registry
    tenant: str | None = None  # whose model it is (tracking user, datasets); default: the first of auth.tenants
    every_hours: Literal[1, 2, 3, 4, 6, 8, 12, 24] = 24
    days: int = Field(default=1, ge=1, le=30)  # of request logs per check
    # Fewer logged requests are not judged (docs/monitoring.md derives the default from the
    # checks' power).
    min_rows: int = Field(default=DRIFT_MIN_ROWS, ge=1)


class PipelinesConfig(_Model):
    """The pipeline engine (docs/pipelines.md): one Apache Airflow per tenant named here, in
    its namespace, running the golden path with that tenant's parameters
    (workloads/pipeline/params.py; `tenant` is the key's). Its database is on the tracking
    server's PostgreSQL, so the tracking server must run too."""

    # tenant -> its golden-path parameters, as `python -m workloads.pipeline check` reads them
    tenants: dict[str, dict[str, Any]] = {}
    schedule: str | None = Field(default=None, pattern=r"^(@(hourly|daily|weekly|monthly)|[0-9*/,-]+( [0-9*/,-]+){4})$")
    # The storm guard: no new run within this many hours of the last one's start.
    min_interval_hours: float = Field(default=24, ge=0, le=8760)
    pool: str | None = None  # the engine's and the CPU steps' pool; default as tracking's

    @field_validator("tenants")
    @classmethod
    def _params(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from pydantic import ValidationError

        from components.training_spec import SCRATCH_MOUNT
        from components.pipelines_spec import FEATURE_CONFIG
        from workloads.pipeline.params import Params

        for tenant, params in value.items():
            if not isinstance(params, dict):
                raise ValueError(f"{tenant}: give the golden-path parameters as a mapping")
            if params.get("tenant", tenant) != tenant:
                raise ValueError(f"{tenant}.tenant: {params['tenant']!r}; a tenant's pipeline is its own (leave it "
                                 "out)")
            try:
                checked = Params.model_validate({**params, "tenant": tenant})
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join((tenant, *(str(p) for p in first["loc"])))
                raise ValueError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
            if not checked.workdir.startswith(f"{SCRATCH_MOUNT}/"):
                raise ValueError(f"{tenant}.workdir: {checked.workdir!r} is outside the tenant's scratch, which the "
                                 f"steps mount at {SCRATCH_MOUNT}; use {SCRATCH_MOUNT}/<folder>")
            if checked.features.config != FEATURE_CONFIG:
                raise ValueError(f"{tenant}.features.config: the steps read the tenant's feature_store.yaml at "
                                 f"{FEATURE_CONFIG}; name that path")
        return value


class InferenceConfig(_Model):
    """The model a stack serves with Triton (components/inference.py): GPU replicas on the
    inference pool, or ONNX Runtime on the CPU pool. The batching settings are the ones
    `python -m workloads.serve export --stack <stack>` writes into the model's config.pbtxt."""

    enabled: bool = True
    device: Literal["gpu", "cpu"]
    model_name: str = "gpt"
    namespace: str = Field(default="inference", pattern=_DNS_LABEL)
    pool: str | None = None  # default: the first pool with role inference (gpu) or cpu (cpu)
    min_replicas: int = Field(default=2, ge=1)
    max_replicas: int = Field(default=4, ge=1)
    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = (8, 16, 32)
    max_queue_delay_microseconds: int = 2000
    instance_count: int = 1  # model instances per GPU (or per replica on CPU)
    keep_versions: int = 2  # newest versions Triton keeps loaded: the older one is the rollback
    # The served contract: the next token's top k (and its logits, for clients that ask).
    top_k: int = Field(default=16, alias="topK")
    # What `export` publishes (int8: ONNX Runtime's dynamic quantization, CPU) and how a GPU
    # runs it (fp16 needs the TensorRT accelerator).
    precision: Literal["fp32", "int8", "fp16"] = "fp32"
    accelerator: Literal["none", "tensorrt"] = "none"
    # Scale out when a request waits longer than this in Triton's queue, on average (GPU).
    target_queue_microseconds: int = Field(default=50_000, ge=1)
    # Scale out above this CPU utilisation of the replicas' requests (CPU).
    target_cpu_percent: int = Field(default=70, ge=1, le=100)
    cpu_per_replica: int = Field(default=2, ge=1)  # CPU serving; GPU replicas take their GPU's share
    memory_gi_per_replica: int = Field(default=4, ge=1, alias="memoryGiPerReplica")
    # Local disk for a replica's copy of its model (keepVersions + 2 versions while an export
    # runs): an emptyDir of this size, and with 2 GiB of scratch the ephemeral-storage request.
    repository_gi_per_replica: int = Field(default=20, ge=1, alias="repositoryGiPerReplica")
    # Where the model repository lives in the models bucket: s3://<bucket>/<prefix>/<model>/...
    repository_prefix: str = Field(default="triton", pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    load_balancer: InferenceLoadBalancerConfig = InferenceLoadBalancerConfig()
    # The version served; a new one is rolled out as `rollout` says. None: every published
    # version (the newest `keepVersions` load), with no canary.
    version: int | None = Field(default=None, ge=1)
    rollout: InferenceRolloutConfig = InferenceRolloutConfig()
    auth: InferenceAuthConfig | None = None
    request_logging: InferenceRequestLoggingConfig = InferenceRequestLoggingConfig()
    drift: InferenceDriftConfig = InferenceDriftConfig()

    @field_validator("namespace")
    @classmethod
    def _not_system(cls, value: str) -> str:
        from components.tenancy_spec import RESERVED_NAMES

        if value in RESERVED_NAMES or value.startswith("kube-"):
            raise ValueError(f"{value!r} is a system namespace; pick another name")
        return value


Environment = Literal["dev", "staging", "prod", "smb", "onprem"]
# The environments on a customer's own cluster (docs/onprem.md): a cluster layer with the
# descriptor in its config, and no cloud layer. Every other environment is on AWS.
CUSTOMER_ENVIRONMENTS = ("onprem",)


def site_of(environment: str) -> str:
    """Where an environment runs: `customer` or `aws` (infra/versions.py SITES)."""
    return "customer" if environment in CUSTOMER_ENVIRONMENTS else "aws"
# Validation context of the settings of a cluster the customer runs (infra/descriptor.py
# customer_settings): the checks of what only the cloud layer builds (zones, the EKS
# administrators, Lustre's placement) do not apply there.
CUSTOMER_SITE = "customer_site"


def _customer_site(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get(CUSTOMER_SITE))
LAYER_KEY = f"{PROJECT}:layer"
CLUSTER_SUFFIX = "-cluster"  # prod's cluster layer is the stack prod-cluster


class PlatformConfig(_Model):
    """Everything one environment says about itself, validated: the cloud layer's stack
    config, which the cluster layer receives through the descriptor (infra/descriptor.py)."""

    # The cloud layer holds every AWS resource; a stack with `layer: cluster` is read as a
    # ClusterLayerConfig instead.
    layer: Literal["cloud"] = "cloud"
    region: str
    environment: Environment
    owner: TagValue
    cost_center: TagValue
    data_classification: Literal["public", "internal", "confidential", "restricted"] = "confidential"
    residency: ResidencyConfig = ResidencyConfig()
    storage: StorageConfig = StorageConfig()
    network: NetworkConfig = NetworkConfig()
    cluster: ClusterConfig = ClusterConfig()
    node_pools: tuple[NodePoolConfig, ...] = ()
    addons: AddonsConfig = AddonsConfig()
    tenants: tuple[TenantConfig, ...] = ()
    training: TrainingConfig = TrainingConfig()
    tracking: TrackingConfig = TrackingConfig()
    features: FeaturesConfig = FeaturesConfig()
    pipelines: PipelinesConfig = PipelinesConfig()
    inference: InferenceConfig | None = None  # None: the stack serves no model
    # The in-VPC runner the cluster layer deploys from. None: no runner (the cluster layer is
    # applied from elsewhere inside the network, e.g. a bastion).
    deploy_runner: DeployRunnerConfig | None = None

    @model_validator(mode="after")
    def _site(self, info: ValidationInfo) -> PlatformConfig:
        if self.environment in CUSTOMER_ENVIRONMENTS and not _customer_site(info):
            raise _KeyError(f"{PROJECT}:environment", f"{self.environment!r} runs on a customer's own cluster: it has "
                            "a cluster layer only (mlplat:layer: cluster, with mlplat:descriptor; docs/onprem.md)")
        return self

    @model_validator(mode="after")
    def _region_in_allow_list(self) -> PlatformConfig:
        if self.region not in self.residency.allowed_regions:
            raise _KeyError(
                AWS_REGION_KEY,
                f"{self.region!r} is outside the residency allow-list; allowed: "
                + ", ".join(self.residency.allowed_regions),
            )
        return self

    @model_validator(mode="after")
    def _unique_pool_names(self) -> PlatformConfig:
        seen: set[str] = set()
        for pool in self.node_pools:
            if pool.name in seen:
                raise ValueError(f"node pool name {pool.name!r} is used twice; names must be unique")
            seen.add(pool.name)
        return self

    @property
    def zone_ids(self) -> tuple[str, ...]:
        """The network's zones: configured, or every zone of the region."""
        return self.network.zone_ids or REGION_ZONE_IDS.get(self.region, ())

    @model_validator(mode="after")
    def _zones_known(self, info: ValidationInfo) -> PlatformConfig:
        if _customer_site(info):
            return self
        if not self.zone_ids:
            raise _KeyError(
                f"{PROJECT}:network.zoneIds",
                f"no default zones are known for {self.region}; list two or three zone ids of the region",
            )
        prefix = REGION_ZONE_IDS.get(self.region, ("",))[0].split("-az")[0]
        for zone in self.zone_ids:
            if prefix and not zone.startswith(f"{prefix}-az"):
                raise _KeyError(
                    f"{PROJECT}:network.zoneIds",
                    f"{zone!r} is not a zone of {self.region}; allowed: {', '.join(REGION_ZONE_IDS[self.region])}",
                )
        return self

    @model_validator(mode="after")
    def _egress(self, info: ValidationInfo) -> PlatformConfig:
        if _customer_site(info):
            return self
        egress = self.network.egress
        if self.data_classification == "restricted" and egress.mode == "nat":
            raise _KeyError(f"{PROJECT}:network.egress.mode", "nat opens the internet to a restricted environment's "
                            "private subnets; set mode: allow-list with allowedDomains, or mode: none")
        if self.deploy_runner is not None and egress.mode == "none":
            raise _KeyError(f"{PROJECT}:network.egress.mode", "none, but the deploy runner must reach GitHub; set "
                            "mode: allow-list with the GitHub domains (docs/bring-up.md), or drop deployRunner")
        return self

    @model_validator(mode="after")
    def _pool_zones_in_network(self) -> PlatformConfig:
        for index, pool in enumerate(self.node_pools):
            for key, zone in (("placementGroupZoneId", pool.placement_group_zone_id), ("zoneId", pool.zone_id)):
                if zone is not None and zone not in self.zone_ids:
                    raise _KeyError(
                        f"{PROJECT}:nodePools[{index}].{key}",
                        f"{zone!r} is not one of the network's zones; allowed: {', '.join(self.zone_ids)}",
                    )
        return self

    @property
    def lustre_zone_id(self) -> str | None:
        """Where Lustre scratch goes: the zone of the first GPU pool pinned to one, so
        training traffic to the file system never crosses zones."""
        for pool in self.node_pools:
            if pool.role == "gpu" and pool.pinned_zone_id:
                return pool.pinned_zone_id
        return None

    @model_validator(mode="after")
    def _administrators(self, info: ValidationInfo) -> PlatformConfig:
        if _customer_site(info):
            return self  # no EKS access entries: the customer's cluster has its own administrators
        for key, role in (("deployerRole", self.cluster.deployer_role), ("breakGlassRole", self.cluster.break_glass_role)):
            if role is None:
                raise _KeyError(f"{PROJECT}:cluster.{key}", "is not set; name the role (in the deploying account) "
                                "that gets cluster admin, so the identity that created the cluster is not its only admin")
        if self.cluster.deployer_role == self.cluster.break_glass_role:
            raise _KeyError(f"{PROJECT}:cluster.breakGlassRole", "is the deployer role; break-glass access must "
                            "not depend on the deploy path it stands in for")
        # One access entry per IAM role: these two already have theirs.
        named = {self.cluster.deployer_role, self.cluster.break_glass_role}
        others = [("cluster.adminRoleArns", arn) for arn in self.cluster.admin_role_arns]
        others += [("cluster.readOnlyRoleArns", arn) for arn in self.cluster.read_only_role_arns]
        others += [(f"tenants[{i}].roleArns", arn) for i, t in enumerate(self.tenants) for arn in t.role_arns]
        for key, arn in others:
            if arn in named or arn.rsplit("/", 1)[-1] in named:
                raise _KeyError(f"{PROJECT}:{key}", f"{arn!r} is the deployer or break-glass role, which is "
                                "cluster admin already; an IAM role has one access entry")
        return self

    @model_validator(mode="after")
    def _feature_projects(self) -> PlatformConfig:
        from components.features_spec import key_pattern_overlap

        f = self.features
        if not f.enabled:
            return self
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            return self  # the tenants' own check names the duplicate
        for key, listed in (("tenants", f.tenants or ()), ("projects", tuple(f.projects))):
            for tenant in listed:
                if tenant not in names:
                    raise _KeyError(f"{PROJECT}:features.{key}", f"{tenant!r} is not a tenant; name one of "
                                    f"{', '.join(names) or '(none: add tenants first)'}")
        projects = self.feature_projects
        owners: dict[str, str] = {}  # project -> tenant
        for tenant, project in projects.items():
            if project in owners:
                raise _KeyError(f"{PROJECT}:features.projects.{tenant}",
                                f"names project {project!r}, which is tenant {owners[project]!r}'s; each tenant's "
                                "features live in its own project")
            owners[project] = tenant
        if clash := key_pattern_overlap(projects):
            (a, pa), (b, pb) = clash
            raise _KeyError(f"{PROJECT}:features.projects.{b}",
                            f"project {pb!r} ends with tenant {a!r}'s project {pa!r}, so {a!r}'s online-store user "
                            f"could read {b!r}'s keys (Feast keys end with the project name); rename one")
        return self

    def service_pool(self, wanted: str | None, key: str) -> NodePoolConfig:
        """Where a platform service runs: the named pool, else the first cpu pool, else the
        system pool (the smb stack's small system nodes leave it to the cpu pool). `key`
        names the setting in errors, e.g. "tracking"."""
        for pool in self.node_pools:
            if pool.name == wanted:
                return pool
        if wanted is not None:
            raise ConfigError(f"{key}.pool: no node pool named {wanted!r}; name one of "
                              f"{', '.join(p.name for p in self.node_pools)}")
        by_role = {p.role: p for p in reversed(self.node_pools)}
        pool = by_role.get("cpu") or by_role.get("system")
        if pool is None:
            raise ConfigError(f"{key}: no cpu or system node pool to run it on; add one or set {key}.enabled: false")
        return pool

    @property
    def feature_projects(self) -> dict[str, str]:
        """The tenants with a feature project, in config order: tenant -> project."""
        from components.features_spec import project_name

        if not self.features.enabled:
            return {}
        wanted = self.features.tenants
        return {t.name: project_name(t.name, self.features.projects) for t in self.tenants
                if wanted is None or t.name in wanted}

    @model_validator(mode="after")
    def _lustre_placed(self, info: ValidationInfo) -> PlatformConfig:
        if _customer_site(info):
            return self  # the shared scratch is the customer's ReadWriteMany storage class
        if self.storage.lustre.enabled and self.lustre_zone_id is None:
            raise _KeyError(
                f"{PROJECT}:storage.lustre.enabled",
                "Lustre scratch goes in the GPU pool's zone, but no gpu pool is pinned to one; set "
                "placementGroupZoneId (or zoneId) on a gpu pool, or set lustre.enabled: false",
            )
        too_many = lustre_spec.tenants_error(len(self.tenants))
        if self.storage.lustre.enabled and too_many:
            raise _KeyError(f"{PROJECT}:tenants", f"{too_many}; split the tenants across environments, or set "
                            "storage.lustre.enabled: false")
        return self

    def tenant_group(self, name: str) -> int:
        """A tenant's group (components/tenancy_spec.py GID_RANGE)."""
        return next(t.group for t in self.tenants if t.name == name)

    @model_validator(mode="after")
    def _tenants(self) -> PlatformConfig:
        """Unique names, IAM roles mapped once, and quotas the GPU pools can actually hold."""
        seen: set[str] = set()
        groups: dict[str, str] = {}
        mapped = set(self.cluster.admin_role_arns) | set(self.cluster.read_only_role_arns)
        gpu_types = {p.instance_type for p in self.node_pools if p.instance.has_gpu}
        for index, tenant in enumerate(self.tenants):
            key = f"{PROJECT}:tenants[{index}]"
            if tenant.name in seen:
                raise _KeyError(f"{key}.name", f"{tenant.name!r} is used twice; tenant names must be unique")
            seen.add(tenant.name)
            owner = next((t.name for t in self.tenants[:index] if t.group == tenant.group), None)
            if owner is not None:
                raise _KeyError(f"{key}.gid", f"{tenant.group} is already the group of tenant {owner!r} (given or drawn "
                                "from its name); give one of them another gid")
            for group in tenant.groups:
                if group in groups:
                    raise _KeyError(f"{key}.groups", f"{group!r} is already a group of tenant {groups[group]!r}; a "
                                    "group belongs to one tenant, whose namespace alone it may work in")
                groups[group] = tenant.name
            for arn in tenant.role_arns:
                if arn in mapped:
                    raise _KeyError(f"{key}.roleArns", f"{arn!r} already has an access entry; an IAM role maps "
                                                       "to one set of groups only")
                mapped.add(arn)
            for itype in tenant.instance_types or ():
                if itype not in gpu_types:
                    raise _KeyError(f"{key}.instanceTypes", f"{itype!r} is not the type of any GPU pool; "
                                    f"GPU pools run: {', '.join(sorted(gpu_types)) or 'none'}")
            wanted = set(tenant.instance_types) if tenant.instance_types is not None else gpu_types
            pools = [p for p in self.node_pools if p.instance_type in wanted and p.instance.has_gpu]
            replicas = self.addons.time_slicing_replicas
            gpus = sum(p.max_size * p.instance.gpus * replicas for p in pools)
            if tenant.quotas.gpu > gpus:
                sharing = f" x {replicas} time-slicing replicas" if replicas > 1 else ""
                held = "; ".join(f"{p.name}: {p.max_size} x {p.instance_type} x {p.instance.gpus} GPU{sharing}"
                                 for p in pools) or "no GPU pool"
                raise _KeyError(f"{key}.quotas.gpu", f"{tenant.quotas.gpu} GPUs is more than the pools can ever "
                                f"hold ({gpus}: {held}); lower the quota or raise a pool's maxSize")
            efa = sum(p.max_size * p.instance.efa_interfaces for p in pools if p.efa)
            if tenant.quotas.efa > efa:
                held = "; ".join(f"{p.name}: {p.max_size} x {p.instance_type} x {p.instance.efa_interfaces} EFA"
                                 for p in pools if p.efa) or "no pool attaches EFA"
                raise _KeyError(f"{key}.quotas.efa", f"{tenant.quotas.efa} EFA interfaces is more than the pools "
                                f"can ever hold ({efa}: {held}); lower the quota or raise a pool's maxSize")
        return self

    @model_validator(mode="after")
    def _training_fits(self) -> PlatformConfig:
        """The training job names a gpu pool and a tenant that may use it, and fits both."""
        from infra.training_plan import TrainingConfigError, resolve_training

        try:
            resolve_training(self)
        except TrainingConfigError as err:
            raise _KeyError(f"{PROJECT}:training.{err.key}", str(err)) from None
        return self

    @model_validator(mode="after")
    def _inference_fits(self) -> PlatformConfig:
        """The served model is one Triton accepts, on a pool that exists and can hold it."""
        from infra.inference_plan import InferenceConfigError, resolve_inference

        try:
            resolve_inference(self)
        except InferenceConfigError as err:
            raise _KeyError(f"{PROJECT}:inference.{err.key}", str(err)) from None
        return self

    @model_validator(mode="after")
    def _pipeline_tenants(self) -> PlatformConfig:
        """Each pipeline is a tenant's, with a feature project for its features steps, and
        the tracking server (the engine's database and the steps' ledger) running."""
        for tenant in self.pipelines.tenants:
            key = f"{PROJECT}:pipelines.tenants.{tenant}"
            if tenant not in {t.name for t in self.tenants}:
                raise _KeyError(key, f"{tenant!r} is not a tenant; name one of "
                                f"{', '.join(t.name for t in self.tenants) or '(none)'}")
            if not self.tracking.enabled:
                raise _KeyError(key, "the pipeline engine keeps its database on the tracking server's PostgreSQL, "
                                "and its steps record to MLflow: set tracking.enabled: true")
            if tenant not in self.feature_projects:
                raise _KeyError(key, f"tenant {tenant!r} has no feature project, and the golden path starts by "
                                "materializing its features: enable features for it (features.tenants)")
        return self

    @property
    def default_tags(self) -> dict[str, str]:
        """Tags every AWS resource carries, set once on the provider."""
        return {
            "environment": self.environment,
            "owner": self.owner,
            "data-classification": self.data_classification,
            "cost-center": self.cost_center,
            "managed-by": "pulumi",
            "project": PROJECT,
        }


class ClusterLayerConfig(_Model):
    """A cluster layer's own stack config: which environment it belongs to, and where its
    descriptor comes from: the cloud layer's stack output through a StackReference
    (`cloudStack`), or the descriptor itself for a cluster the customer runs."""

    layer: Literal["cluster"]
    environment: Environment
    region: str
    # The cloud layer's stack as a StackReference names it: `prod`, or
    # `<organization>/mlplat/prod` on Pulumi Cloud.
    cloud_stack: str | None = Field(default=None, pattern=r"^([A-Za-z0-9_.-]+/){0,2}[A-Za-z0-9_.-]+$")
    descriptor: dict[str, Any] | None = None
    # The platform's own images (training, serving, checks) as `<tag>@sha256:<digest>`, as CI
    # recorded them when it built and pushed them (deploy-environment.yml sets this before
    # `pulumi up`). The offline preview, which builds nothing, stands in infra.versions.UNBUILT.
    platform_images: dict[str, Annotated[str, Field(pattern=BUILT.pattern)]] = {}

    @field_validator("platform_images")
    @classmethod
    def _built_images(cls, value: dict[str, str]) -> dict[str, str]:
        built = sorted(name for name, image in IMAGES.items() if image.built_here)
        unknown = sorted(set(value) - set(built))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a platform image; the platform builds {', '.join(built)}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ClusterLayerConfig:
        if (self.cloud_stack is None) == (self.descriptor is None):
            raise _KeyError(f"{PROJECT}:cloudStack", "set exactly one of cloudStack (the cloud layer's stack) and "
                            "descriptor (a cluster the customer runs)")
        return self


LayerConfig = PlatformConfig | ClusterLayerConfig


class _KeyError(ValueError):
    """A validator's error about a key other than the one pydantic is checking."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class _FieldError(ValueError):
    """A model validator's error about one of the model's own fields: the key path is
    the model's location plus this field (e.g. mlplat:nodePools[1].efa)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _name(key: Any) -> str:
    return inputs.named(key, 64)  # keys of a stack file: one line, never a newline


def _key_path(loc: tuple[Any, ...], cluster_layer: bool = False) -> str:
    """('nodePools', 0, 'minSize') -> 'mlplat:nodePools[0].minSize'."""
    if not loc:
        return f"{PROJECT}:<stack>"
    head, *rest = loc
    path = AWS_REGION_KEY if head == "region" and not cluster_layer else f"{PROJECT}:{_name(head)}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{_name(part)}"
    return path


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model a key path leads into (None where it leads out of the models)."""
    mapping = False
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int) or mapping:  # a list index, or a name under a mapping
            mapping = False
            continue
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        if field is None:
            return None
        mapping = typing.get_origin(field.annotation) in (dict, Mapping)
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _inner_model(arg)) is not None:
            return found
    return None


def _unknown_key(root: type[BaseModel], loc: tuple[Any, ...], cluster: bool) -> str:
    """'unknown key', with the closest key the model at that place knows (or the keys it
    knows, when none is close)."""
    model = _model_at(root, loc[:-1])
    known = sorted(f.alias or name for name, f in model.model_fields.items()) if model else []
    # A top-level key is written with its namespace in the stack file (mlplat:, aws:region).
    spell = (lambda key: _key_path((key,), cluster)) if len(loc) == 1 else str
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean `{spell(close[0])}`?"
    return f"unknown key; the keys here are {', '.join(map(spell, known))}" if known else "unknown key; remove it"


def _describe(error: Mapping[str, Any], root: type[BaseModel], cluster: bool = False) -> str:
    """One readable phrase for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(root, tuple(error["loc"]), cluster)
    if kind == "missing":
        return "is required but missing"
    # A value is quoted short: a megabyte-long one must not become a megabyte-long line.
    if kind == "literal_error":
        return f"{inputs.excerpt(value)} is not allowed; allowed: {ctx.get('expected')}"
    if kind == "string_pattern_mismatch":
        return f"{inputs.excerpt(value)} does not match {ctx.get('pattern')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{inputs.excerpt(value)}: {error['msg']}"


def parse_config(raw: Mapping[str, Any], source: str, *, from_stack_file: bool = False,
                 context: Mapping[str, Any] | None = None) -> PlatformConfig:
    """Validate a flat `namespace:key -> value` mapping into a PlatformConfig (an
    environment's settings, as its cloud layer reads them).

    `source` names where the values came from, for the error line. Values may be native
    (from YAML) or JSON strings (how the engine hands structured config to a program).
    """
    config = parse_layer_config(raw, source, from_stack_file=from_stack_file, context=context)
    if isinstance(config, ClusterLayerConfig):
        raise ConfigError(f"{source}: {LAYER_KEY}: is a cluster layer, whose settings come from its descriptor; "
                          "name the environment's cloud layer stack instead")
    return config


def parse_layer_config(raw: Mapping[str, Any], source: str, *, from_stack_file: bool = False,
                       context: Mapping[str, Any] | None = None) -> LayerConfig:
    """A stack's config, as the layer its `mlplat:layer` names (cloud when unset)."""
    cluster = _maybe_json(raw.get(LAYER_KEY)) == "cluster"
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        namespace, _, name = key.partition(":")
        if key == AWS_REGION_KEY and not cluster:
            fields["region"] = value
        elif key == DISABLE_DEFAULT_PROVIDERS_KEY:
            _check_default_providers(value, source)
        elif namespace == PROJECT and (cluster or name != "region"):
            fields[name] = _maybe_json(value)
        else:
            reads = (f"{PROJECT}:* keys (the cluster layer has no AWS provider)" if cluster else
                     f"{AWS_REGION_KEY}, {DISABLE_DEFAULT_PROVIDERS_KEY} and {PROJECT}:* keys only")
            known = [DISABLE_DEFAULT_PROVIDERS_KEY] + ([] if cluster else [AWS_REGION_KEY])
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise ConfigError(f"{source}: {_name(key)}: unknown key; {hint}this project reads {reads}")
    if from_stack_file and DISABLE_DEFAULT_PROVIDERS_KEY not in raw:
        raise ConfigError(
            f"{source}: {DISABLE_DEFAULT_PROVIDERS_KEY}: is required; set it to [\"*\"] so every "
            "resource must use the region-pinned provider"
        )
    model: type[_Model] = ClusterLayerConfig if cluster else PlatformConfig
    try:
        return model.model_validate(fields, context=dict(context or {}))  # type: ignore[return-value]
    except _KeyError as err:  # raised directly by a model validator on the root
        raise ConfigError(f"{source}: {err.key}: {err}") from None
    except ValidationError as err:
        errors = err.errors(include_url=False)
        # A misspelt key also makes the key it stands for missing: name the misspelling.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        original = (first.get("ctx") or {}).get("error")
        if isinstance(original, _KeyError):
            raise ConfigError(f"{source}: {original.key}: {original}") from None
        if isinstance(original, _FieldError):
            raise ConfigError(f"{source}: {_key_path((*first['loc'], original.field), cluster)}: {original}") from None
        raise ConfigError(f"{source}: {_key_path(first['loc'], cluster)}: {_describe(first, model, cluster)}") from None


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _check_default_providers(value: Any, source: str) -> None:
    items = _maybe_json(value)
    if not isinstance(items, list) or not ({"*", "aws"} & set(map(str, items))):
        raise ConfigError(
            f"{source}: {DISABLE_DEFAULT_PROVIDERS_KEY}: {inputs.excerpt(value)} leaves the default AWS provider "
            'on; set it to ["*"]'
        )


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


def available_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))


_KEY_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")


def read_stack_file(path: Path) -> dict[str, Any]:
    """The raw `config:` mapping of a stack file, or a ConfigError naming the file."""
    return read_stack_document(path).get("config") or {}


def read_stack_document(path: Path) -> dict[str, Any]:
    """A stack file's whole document (`config:`, `secretsprovider:` ...), checked, or a
    ConfigError naming the file."""
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{path}: no such stack file")
    try:
        # Bounded: regular files only, a size cap, duplicate keys refused (the Pulumi CLI
        # refuses them; a second `mlplat:residency` must not win), aliases and nesting
        # bounded, string keys only.
        document = inputs.read_yaml(path, "stack file", STACK_FILE_LIMIT, string_keys=True)
    except inputs.InputError as err:
        raise ConfigError(str(err)) from None
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with a `config:` section")
    top = ("config", "secretsprovider", "encryptedkey", "encryptionsalt")
    unknown = sorted(map(str, set(document) - set(top)))
    if unknown:
        if not _KEY_LIKE.match(unknown[0]):
            # Not a misspelt key but another file's content (a link to /etc/shadow, say):
            # never quoted back.
            raise ConfigError(f"{path}: does not look like a stack file (its top level is not `config:`); check it "
                              "is the file you meant")
        close = difflib.get_close_matches(unknown[0], top, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise ConfigError(f"{path}: {unknown[0]}: unknown top-level key; {hint}only `config:` is read")
    return document


def load_stack_file(path: Path) -> PlatformConfig:
    return parse_config(read_stack_file(path), str(_relative(path)), from_stack_file=True)


def load_stack(stack: str, stacks_dir: Path = STACKS_DIR) -> PlatformConfig:
    """The settings of a named cloud-layer stack in stacks/ (an environment's)."""
    path = _existing_stack_file(stack, stacks_dir)
    return load_stack_file(path)


def load_layer(stack: str, stacks_dir: Path = STACKS_DIR) -> LayerConfig:
    """Config of a named stack in stacks/, of either layer."""
    path = _existing_stack_file(stack, stacks_dir)
    return parse_layer_config(read_stack_file(path), str(_relative(path)), from_stack_file=True)


def _existing_stack_file(stack: str, stacks_dir: Path) -> Path:
    path = stack_file(stack, stacks_dir)
    if not path.exists() and not path.is_symlink():  # a dangling or looping link is read, and named
        raise ConfigError(
            f"unknown stack {stack!r}: no {_relative(path)}; available: "
            f"{', '.join(available_stacks(stacks_dir)) or 'none'}"
        )
    return path


def settings_from_descriptor(settings: Mapping[str, Any], source: str, *, customer_site: bool = False) -> PlatformConfig:
    """The environment's settings as a descriptor carries them (PlatformConfig fields,
    camelCase), validated as the cloud layer validated them (on a customer's cluster,
    without the checks of what only the cloud layer builds)."""
    flat = {(AWS_REGION_KEY if key == "region" else f"{PROJECT}:{key}"): _whole_numbers(value)
            for key, value in settings.items()}
    return parse_config(flat, source, context={CUSTOMER_SITE: True} if customer_site else None)


def _whole_numbers(value: Any) -> Any:
    """Stack outputs cross the engine as protobuf Structs, where every number is a double:
    90 comes back as 90.0, which the strict integer fields refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def settings_for_descriptor(config: PlatformConfig) -> dict[str, Any]:
    """The inverse of settings_from_descriptor: what the cloud layer exports."""
    return config.model_dump(mode="json", by_alias=True, exclude={"layer"})


def from_pulumi() -> LayerConfig:
    """Config as the Pulumi engine hands it to the running program."""
    import pulumi
    from pulumi.runtime.config import CONFIG

    raw: dict[str, Any] = {}
    # Older engines pass config in the environment, newer ones through the language host.
    for key, value in {**pulumi.runtime.get_config_env(), **CONFIG.get()}.items():
        namespace, _, name = key.partition(":")
        raw[f"{namespace}:{name.removeprefix('config:')}"] = value
    return parse_layer_config(raw, f"stack {pulumi.get_stack()!r}")


def _relative(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError, RuntimeError):  # elsewhere, or a link that loops
        return path
