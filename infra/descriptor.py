"""The cluster descriptor: everything the Kubernetes half of the platform needs to know
about the cloud it runs in, as one typed record.

The cloud half exports it as the stack output `clusterDescriptor`
(`cluster_descriptor_output`). The Kubernetes half reads it from that output through a
`pulumi.StackReference`, or, for a cluster the customer runs (on-premises or at another
in-country provider), from its own stack config; either way through `parse_descriptor`,
so a missing field or a descriptor of another region or environment is one line naming
the field and the layer, before anything is created.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pydantic import Field, ValidationError

from infra.config import ConfigError, _Model

OUTPUT = "clusterDescriptor"


class _Descriptor(_Model):
    # Fields a newer cloud layer adds are ignored, so an older cluster layer still reads it.
    model_config = {**_Model.model_config, "extra": "ignore"}


class LustreDescriptor(_Descriptor):
    file_system_id: str = Field(min_length=1)
    dns_name: str = Field(min_length=1)
    mount_name: str = Field(min_length=1)
    path: str = Field(min_length=1)  # the datasets folder inside the file system


class TrackingDescriptor(_Descriptor):
    """The MLflow server's database and the secrets it reads (never their values)."""

    db_host: str = Field(min_length=1)
    master_secret_arn: str = Field(min_length=1)  # RDS-managed: the database password
    admin_secret_arn: str = Field(min_length=1)
    tenant_secret_arns: dict[str, str] = {}


class FeaturesDescriptor(_Descriptor):
    """The online store of the feature store: where it is, and each tenant's user and
    project (the users' IAM roles are the cloud layer's; no password exists)."""

    host: str = Field(min_length=1)  # the replication group's primary endpoint
    replication_group_id: str = Field(min_length=1)
    users: dict[str, str] = {}  # tenant -> ElastiCache user id
    projects: dict[str, str] = {}  # tenant -> Feast project


class ClusterDescriptor(_Descriptor):
    """Facts of the cloud layer; names follow the stack outputs' camelCase."""

    environment: str = Field(min_length=1)  # the cloud layer's stack
    region: str = Field(min_length=1)
    account_id: str = Field(pattern=r"^\d{12}$")
    cluster_name: str = Field(min_length=1)
    endpoint: str = Field(pattern=r"^https://")
    certificate_authority: str = Field(min_length=1)  # base64 PEM, as EKS gives it
    cluster_security_group_id: str = Field(min_length=1)
    vpc_cidr: str = Field(min_length=1)
    # Where pods reach AWS APIs on 443: the VPC (interface endpoints) and the S3 gateway
    # endpoint's prefix-list addresses (tenants' egress policies allow exactly these).
    endpoint_cidrs: list[str] = Field(min_length=1)
    registry_host: str = Field(min_length=1)
    buckets: dict[str, str] = Field(min_length=1)  # data class -> bucket name
    keys: dict[str, str] = Field(min_length=1)  # data class -> KMS key ARN
    lustre: LustreDescriptor | None = None
    tracking: TrackingDescriptor | None = None  # None: the environment runs no tracking server
    features: FeaturesDescriptor | None = None  # None: the environment runs no feature store
    # The environment's settings (PlatformConfig fields, camelCase) as the cloud layer
    # validated them: one stack file per environment says everything, and the cluster layer
    # builds what the deployed cloud layer was built for.
    settings: dict[str, Any] = Field(min_length=1)


def parse_descriptor(data: Any, *, layer: str, source: str, environment: str, region: str) -> ClusterDescriptor:
    """The descriptor, checked against the layer that reads it: same environment, same
    region. `source` says where it came from (a StackReference or a config key)."""
    where = f"cluster layer {layer}: {source}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected the cloud layer's `{OUTPUT}` object, got {type(data).__name__}")
    try:
        descriptor = ClusterDescriptor.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "descriptor"
        if first["type"] == "missing":
            raise ConfigError(f"{where} lacks `{field}`; re-run the cloud layer's `pulumi up` so it exports it, "
                              "or set it in the descriptor") from None
        raise ConfigError(f"{where}: `{field}`: {first['msg']}") from None
    if descriptor.region != region:
        raise ConfigError(f"{where} describes region {descriptor.region}, but this layer deploys to {region}; "
                          "point it at the cloud layer of its own region")
    if descriptor.environment != environment:
        raise ConfigError(f"{where} describes environment {descriptor.environment!r}, but this layer is "
                          f"{environment!r}; point it at the cloud layer of its own environment")
    return descriptor


def cluster_descriptor_output(*, environment: str, region: str, account_id: str, cluster: Any, vpc_cidr: str,
                              endpoint_cidrs: list[str], registry_host: str, buckets: dict[str, Any],
                              keys: dict[str, Any], lustre: dict[str, Any] | None,
                              settings: dict[str, Any],
                              tracking: Any = None, features: Any = None) -> pulumi.Output[dict[str, Any]]:
    """The descriptor as the cloud layer exports it (camelCase, as the model reads it)."""
    return pulumi.Output.all(
        cluster_name=cluster.eks.name, endpoint=cluster.eks.endpoint,
        certificate_authority=cluster.eks.certificate_authority.data,
        cluster_security_group_id=cluster.cluster_security_group_id,
        buckets=buckets, keys=keys, lustre=lustre, tracking=tracking, features=features,
    ).apply(lambda v: {
        "environment": environment, "region": region, "accountId": account_id, "clusterName": v["cluster_name"],
        "endpoint": v["endpoint"], "certificateAuthority": v["certificate_authority"],
        "clusterSecurityGroupId": v["cluster_security_group_id"], "vpcCidr": vpc_cidr,
        "endpointCidrs": endpoint_cidrs, "registryHost": registry_host, "buckets": v["buckets"], "keys": v["keys"],
        **({"lustre": v["lustre"]} if v["lustre"] else {}),
        **({"tracking": v["tracking"]} if v["tracking"] else {}),
        **({"features": v["features"]} if v["features"] else {}),
        "settings": settings,
    })


def from_stack_reference(cloud_stack: str) -> Any:
    """The cloud layer's `clusterDescriptor` output, read while the program runs: the
    cluster layer's resources depend on its values (which tenants, which pools), so they
    must be plain values before anything is registered. None when the output is absent
    (the cloud layer was never deployed, or predates the descriptor)."""
    from pulumi.runtime.sync_await import _sync_await

    reference = pulumi.StackReference(cloud_stack)
    # The SDK's own synchronous invokes wait this way; a StackReference offers only the
    # awaitable form, and the referenced stack's outputs are known in previews too.
    details = _sync_await(reference.get_output_details(OUTPUT))
    return details.value if details.value is not None else details.secret_value
