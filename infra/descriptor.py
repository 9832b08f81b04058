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

import ipaddress
import re
from typing import Any, Literal

import pulumi
from pydantic import Field, ValidationError, field_validator, model_validator

from components.fabric_spec import FABRICS, RDMA_SHARED_RESOURCE, NodeFabric, fabric_problem
from infra.config import PROJECT, REPO_ROOT, ConfigError, _Model, settings_from_descriptor
from infra.versions import CHARTS_PREFIX, KUBERNETES_VERSION, NODE_OS
from workloads import inputs

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
    pipeline_secret_arns: dict[str, str] = {}  # tenant -> its pipeline engine's database secret


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


# --- A cluster the customer runs ----------------------------------------------------
#
# The customer's own in-country cluster (on-premises, or at another in-country provider):
# any conformant Kubernetes, reached through a kubeconfig context, with the customer's
# S3-compatible object store, container and chart registry, storage classes, GPU nodes on
# InfiniBand or RoCE, and PostgreSQL and Redis. The stack config states it once, in
# `mlplat:descriptor` (docs/onprem.md); nothing in it is secret: credentials stay in
# Kubernetes Secrets the customer makes, which the descriptor only names.

_HOST = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+(:[0-9]{1,5})?$"
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS label: Secret, StorageClass names
_LABEL_VALUE = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
# The data classes of the cloud layer's buckets that the cluster layer reads and writes.
CUSTOMER_BUCKETS = ("datasets", "models", "checkpoints")
# The label every group's nodes carry: the pool they belong to (EKS node groups set it on AWS).
POOL_LABEL = "mlplat.io/pool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Kubernetes label syntax: a value, or a key's name, of at most 63 characters; a key's
# optional prefix a DNS subdomain of at most 253.
_LABEL_KEY = r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_TEXT = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
# Bounds of the numbers a customer states, each far beyond any real cluster.
MAX_NODES = 10_000  # nodes in a group
MAX_CPUS = 4096  # per node
MAX_MEMORY_GIB = 65536  # per node: 64 TiB
MAX_GPUS = 64  # per node: the largest have 8 (16 on a few)
MAX_HCAS = 64  # per node: one per GPU, a few more for storage
MAX_SCRATCH_GIB = 1 << 20  # each tenant's claim: 1 PiB
MAX_GID_INDEX = 255  # a port's GID table has 256 entries at most


def _shown(value: Any, plain: str = r"[\w.:/@-]+") -> str:
    """`value` as it is where it is plain text; quoted short (newlines and escapes shown,
    never acted on) where not, so an error stays one printable line."""
    return value if isinstance(value, str) and re.fullmatch(plain, value) else inputs.excerpt(value)


def _requoted(message: str, value: Any) -> str:
    """A message of another module that quotes `value` whole (repr), with the value quoted
    short instead."""
    return message.replace(repr(value), inputs.excerpt(value), 1)


class _Strict(_Model):
    """The customer writes these by hand: an unknown key is a mistake, never ignored."""


def _cidrs(value: tuple[str, ...]) -> tuple[str, ...]:
    for cidr in value:
        try:
            network = ipaddress.ip_network(cidr)
        except ValueError:
            raise ValueError(f"{inputs.excerpt(cidr)} is not a CIDR, e.g. 10.20.0.0/24") from None
        if network.prefixlen == 0:
            raise ValueError(f"{inputs.excerpt(cidr)} is every address; list the service's own networks")
    return value


class SecretKeyRef(_Strict):
    """A key of a Kubernetes Secret the customer makes (never its value)."""

    name: str = Field(pattern=_NAME)
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$")


class CustomerCluster(_Strict):
    context: str = Field(min_length=1)  # the kubeconfig context `pulumi up` uses
    kubernetes_version: str = Field(pattern=r"^1\.[0-9]{2}$")
    # The API server's addresses and port, as pods reach it: the pipeline engines submit their
    # steps there, and their egress policy names it (a policy cannot name the API server).
    api_server_cidrs: tuple[str, ...] = ()
    api_server_port: int = Field(default=6443, ge=1, le=65535)

    _networks = field_validator("api_server_cidrs")(_cidrs)

    @field_validator("kubernetes_version")
    @classmethod
    def _checked_version(cls, value: str) -> str:
        if value != KUBERNETES_VERSION:
            raise ValueError(f"{inputs.excerpt(value)}: the platform's manifests are rendered and validated against "
                             f"Kubernetes {KUBERNETES_VERSION} (infra/versions.py KUBERNETES_VERSION); run a "
                             f"{KUBERNETES_VERSION} cluster, or validate the platform against {value} first")
        return value


class CustomerRegistry(_Strict):
    # The container and chart registry `mlplat mirror` copies every image and chart into
    # (e.g. Harbor): <host>/mlplat/<environment>/mirror/<name>, .../charts/<chart>.
    host: str = Field(pattern=_HOST)


class ObjectStorage(_Strict):
    # An S3-compatible endpoint (Ceph RGW, MinIO), over TLS only.
    endpoint: str
    # The region the store signs requests for (Ceph RGW's zonegroup, MinIO's region).
    region: str = Field(min_length=1)
    # PEM of the CA that signed the endpoint's certificate; pods verify against it.
    ca_bundle: str
    buckets: dict[str, str]  # data class -> bucket name
    # How the store encrypts at rest (its own encryption: no KMS key of ours exists here),
    # stated so the policy pack and the security team see it, e.g. "Ceph RGW SSE-S3 with
    # keys in HashiCorp Vault".
    encryption_at_rest: str = Field(min_length=10)
    # Where the endpoint's addresses are: pods that reach it get egress to these on 443.
    cidrs: tuple[str, ...] = Field(min_length=1)
    # The Secret each namespace that reads or writes the store holds, with that namespace's
    # own rights: its key `credentials` is an AWS shared-credentials file, mounted as a file.
    credentials_secret: str = Field(default="object-store", pattern=_NAME)

    _networks = field_validator("cidrs")(_cidrs)

    @field_validator("endpoint")
    @classmethod
    def _tls(cls, value: str) -> str:
        if value.lower().startswith("http://"):
            raise ValueError(f"{inputs.excerpt(value)} has no TLS; the object store must be reached over https:// "
                             "(its CA goes in objectStorage.caBundle)")
        if not re.match(r"^https://[a-z0-9.-]+(:[0-9]{1,5})?/?$", value):
            raise ValueError(f"{inputs.excerpt(value)} is not an https:// endpoint (https://<host>[:<port>])")
        return value.rstrip("/")

    @field_validator("ca_bundle")
    @classmethod
    def _pem(cls, value: str) -> str:
        if "-----BEGIN CERTIFICATE-----" not in value or "-----END CERTIFICATE-----" not in value:
            raise ValueError("is not a PEM certificate bundle (-----BEGIN CERTIFICATE----- ...)")
        return value

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, value: dict[str, str]) -> dict[str, str]:
        missing = [c for c in CUSTOMER_BUCKETS if c not in value]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}; name a bucket for each of {', '.join(CUSTOMER_BUCKETS)}")
        for data_class, bucket in value.items():
            if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
                raise ValueError(f"{_shown(data_class)}: {inputs.excerpt(bucket)} is not a bucket name")
        return value

    @property
    def host(self) -> str:
        return self.endpoint.removeprefix("https://").split(":")[0]


class StorageClasses(_Strict):
    default: str = Field(pattern=_NAME)  # ReadWriteOnce volumes: Prometheus, Alertmanager
    # ReadWriteMany (CephFS, NFS, a parallel file system): each tenant's shared scratch,
    # where multi-node training keeps its checkpoints. None: single-node training only.
    shared: str | None = Field(default=None, pattern=_NAME)
    # Each tenant's claim.
    scratch_gib: int = Field(default=1024, ge=1, le=MAX_SCRATCH_GIB, alias="scratchGiB")


class Fabric(_Strict):
    """A GPU node's RDMA fabric (components/fabric_spec.py NodeFabric)."""

    kind: str
    # mlx5_0, ... as the kernel names them.
    hcas: tuple[str, ...] = Field(min_length=1, max_length=MAX_HCAS)
    port_rate_gbps: int = Field(alias="portRateGbps")
    rdma_resource: str = Field(default=RDMA_SHARED_RESOURCE, pattern=r"^[a-z0-9.-]+/[a-z0-9_.-]+$")
    gid_index: int | None = Field(default=None, ge=0, le=MAX_GID_INDEX)

    @field_validator("kind")
    @classmethod
    def _known(cls, value: str) -> str:
        problem = fabric_problem(value)
        if problem:
            raise ValueError(_requoted(problem, value))
        return value

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for hca in value:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", hca):
                raise ValueError(f"{inputs.excerpt(hca)} is not an RDMA device name as the kernel gives it (e.g. "
                                 "mlx5_0)")
        if len(set(value)) != len(value):
            raise ValueError(f"{list(value)}: an HCA is listed twice")
        return value

    @model_validator(mode="after")
    def _rate_and_gid(self) -> Fabric:
        from infra.config import _FieldError

        rates = FABRICS[self.kind].port_rates_gbps
        if self.port_rate_gbps not in rates:
            raise _FieldError("portRateGbps", f"{self.port_rate_gbps} is not a port rate of {self.kind}; allowed: "
                              f"{', '.join(map(str, rates))}")
        if self.kind == "roce" and self.gid_index is None:
            raise _FieldError("gidIndex", "is required on RoCE (the GID index of RoCE v2, NCCL_IB_GID_INDEX; "
                              "`show_gids` lists it)")
        if self.kind != "roce" and self.gid_index is not None:
            raise _FieldError("gidIndex", f"is for RoCE only; {self.kind} addresses ports by LID")
        return self

    def node_fabric(self) -> NodeFabric:
        return NodeFabric(kind=self.kind, hcas=tuple(self.hcas), port_rate_gbps=self.port_rate_gbps,
                          rdma_resource=self.rdma_resource, gid_index=self.gid_index)


class NodeGroup(_Strict):
    """A group of identical nodes. The platform selects them as it does EKS's nodes: by
    `mlplat.io/pool: <name>` and `node.kubernetes.io/instance-type: <instanceType>`, which
    EKS sets and a customer sets on its own nodes (kubelet --node-labels, or kubectl
    label); `labels` are further labels they carry that GPU jobs must also match."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    role: Literal["system", "cpu", "gpu", "inference"]
    count: int = Field(ge=1, le=MAX_NODES)
    instance_type: str = Field(pattern=_LABEL_VALUE, max_length=63)  # the node class
    labels: dict[str, str] = {}
    cpus: int = Field(ge=1, le=MAX_CPUS)
    memory_gib: int = Field(ge=1, le=MAX_MEMORY_GIB, alias="memoryGiB")
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS)
    gpu_model: str | None = None  # a GPU model of infra/catalog.py GPUS (h100, ...)
    os: str | None = None  # the nodes' OS: the plan's driver builds are for infra.versions.NODE_OS
    fabric: Fabric | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            if key in (POOL_LABEL, INSTANCE_TYPE_LABEL):
                raise ValueError(f"{key}: is set from the group's {'name' if key == POOL_LABEL else 'instanceType'}; "
                                 "leave it out of labels")
            if not re.fullmatch(_LABEL_KEY, key) or not re.fullmatch(_LABEL_TEXT, label):
                raise ValueError(f"{_shown(key, _LABEL_KEY)}: {inputs.excerpt(label)} is not a Kubernetes label")
            prefix, _, name = key.rpartition("/")
            for part, what, limit in ((prefix, "prefix", 253), (name, "name", 63), (label, "value", 63)):
                if len(part) > limit:
                    raise ValueError(f"{_shown(key, _LABEL_KEY)}: its {what} is {len(part)} characters; a Kubernetes "
                                     f"label's {what} has at most {limit}")
        return value

    @model_validator(mode="after")
    def _gpus(self) -> NodeGroup:
        from infra.catalog import GPUS, gpu_model_message
        from infra.config import _FieldError

        if self.role in ("gpu", "inference") and not self.gpus:
            raise _FieldError("gpus", f"is 0 but the group's role is {self.role!r}; state the GPUs per node")
        if self.gpus:
            if self.gpu_model is None:
                raise _FieldError("gpuModel", "is required with gpus (e.g. h100)")
            if self.gpu_model not in GPUS:
                raise _FieldError("gpuModel", _requoted(gpu_model_message(self.gpu_model), self.gpu_model))
            if self.os != NODE_OS:
                raise _FieldError("os", f"{inputs.excerpt(self.os)}: the GPU and DOCA driver builds the platform "
                                  f"mirrors are for {NODE_OS} (infra/versions.py NODE_OS); GPU nodes must run it")
        if self.fabric is not None and not self.gpus:
            raise _FieldError("fabric", "is for GPU nodes; the fabric carries their collectives")
        if self.role == "gpu" and self.fabric is None and self.count > 1:
            raise _FieldError("fabric", "is required for a gpu group of several nodes (their collectives need "
                              "InfiniBand or RoCE); state kind, hcas and portRateGbps")
        return self

    @property
    def selector(self) -> dict[str, str]:
        """Every label that picks exactly this group's nodes."""
        return {POOL_LABEL: self.name, INSTANCE_TYPE_LABEL: self.instance_type, **self.labels}

    def node_class(self):
        """The group's nodes as the instance catalog describes a node (infra/catalog.py)."""
        from infra.catalog import GPUS, InstanceType

        fabric = self.fabric
        return InstanceType(
            name=self.instance_type, vcpus=self.cpus, memory_gib=self.memory_gib,
            network_gbps=float(fabric.port_rate_gbps * len(fabric.hcas)) if fabric else 0.0,
            network_cards=len(fabric.hcas) if fabric else 1, efa_interfaces=0,
            gpu=GPUS[self.gpu_model] if self.gpu_model else None, gpus=self.gpus,
            rdma_hcas=len(fabric.hcas) if fabric else 0)


class PostgresService(_Strict):
    # The DSN (postgresql://user:password@host:5432/mlflow?sslmode=verify-full) in a Secret of
    # the tracking server's namespace: never in the stack config or Pulumi's state.
    dsn_secret: SecretKeyRef
    port: int = Field(default=5432, ge=1, le=65535)  # the DSN's, for the server's egress policy
    cidrs: tuple[str, ...] = Field(min_length=1)
    # Each pipeline tenant's engine database DSN, in a Secret of this name in its namespace
    # (docs/onprem.md): the customer makes the database and its role.
    pipelines_dsn_secret: SecretKeyRef | None = None

    _networks = field_validator("cidrs")(_cidrs)


class RedisService(_Strict):
    endpoint: str = Field(pattern=r"^[a-z0-9.-]+:[0-9]{1,5}$")  # host:port, TLS
    # The password of each feature project's user, in a Secret of its tenant's namespace.
    password_secret: SecretKeyRef
    cidrs: tuple[str, ...] = Field(min_length=1)

    _networks = field_validator("cidrs")(_cidrs)

    @property
    def host(self) -> str:
        return self.endpoint.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])


class BackingServices(_Strict):
    postgres: PostgresService | None = None  # MLflow's database; None: no tracking server
    redis: RedisService | None = None  # Feast's online store; None: no feature store


class CustomerClusterDescriptor(_Strict):
    """A cluster the customer runs, as its cluster layer's stack config states it."""

    environment: str = Field(min_length=1)
    region: str = Field(pattern=r"^[a-z][a-z0-9-]{1,30}$")  # the in-country site, e.g. ae-auh-dc1
    cluster: CustomerCluster
    registry: CustomerRegistry
    object_storage: ObjectStorage
    storage_classes: StorageClasses
    nodes: tuple[NodeGroup, ...] = Field(min_length=1)
    services: BackingServices = BackingServices()
    # The environment's Kubernetes-half settings (PlatformConfig fields, camelCase):
    # tenants, training, tracking, features, inference, addons, owner, costCenter, ...
    settings: dict[str, Any] = Field(min_length=1)

    @model_validator(mode="after")
    def _groups(self) -> CustomerClusterDescriptor:
        from infra.config import _FieldError

        names = [g.name for g in self.nodes]
        for name in names:
            if names.count(name) > 1:
                raise _FieldError("nodes", f"node group {name!r} is named twice; names must be unique")
        classes: dict[str, NodeGroup] = {}
        for group in self.nodes:
            other = classes.setdefault(group.instance_type, group)
            if other.node_class() != group.node_class() or other.fabric != group.fabric:
                raise _FieldError("nodes", f"groups {other.name!r} and {group.name!r} share instanceType "
                                  f"{group.instance_type!r} but not their facts; give each kind of node its own")
        if not any(g.role in ("system", "cpu") for g in self.nodes):
            raise _FieldError("nodes", "no system or cpu group: the platform's services need nodes without GPUs")
        return self

    # What the cluster layer reads the same way from either descriptor.
    @property
    def registry_host(self) -> str:
        return self.registry.host

    @property
    def buckets(self) -> dict[str, str]:
        return dict(self.object_storage.buckets)

    @property
    def chart_mirror(self) -> str:
        return f"oci://{self.registry.host}/{CHARTS_PREFIX.format(environment=self.environment)}"

    def group(self, name: str) -> NodeGroup:
        return next(g for g in self.nodes if g.name == name)

    @property
    def fabrics(self) -> dict[str, NodeFabric]:
        """Each GPU group's fabric, by group name."""
        return {g.name: g.fabric.node_fabric() for g in self.nodes if g.fabric is not None}


POLICY_CONFIG_LIMIT = 1 << 20  # an environment's policy config is a few kilobytes


def policy_config(environment: str) -> dict[str, Any]:
    """The environment's policy config, read bounded (workloads/inputs.py: a regular file of
    at most 1 MiB of JSON, nesting and numbers bounded)."""
    name = f"policies/config/{environment}.json"
    path = REPO_ROOT / name
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{name}: missing; the environment's policy config names the registries its images may "
                          "come from")
    try:
        config = inputs.read_json(path, "policy config", POLICY_CONFIG_LIMIT)
    except inputs.InputError as err:
        reason = str(err).removeprefix(f"{path}:").strip()
        raise ConfigError(f"{name}: cannot be read ({reason})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{name}: cannot be read (a policy config is a JSON object of rules, not "
                          f"{type(config).__name__})")
    return config


REGISTRY_RULE = "k8s-images-from-allowed-registries"


def check_registry_allowed(descriptor: CustomerClusterDescriptor, where: str) -> None:
    """The registry must be one the environment's policy config allows: the pack would
    refuse every image from another, after the fact."""
    rule = policy_config(descriptor.environment).get(REGISTRY_RULE) or {}
    allowed = (rule.get("allowedRegistries") if isinstance(rule, dict) else None) or []
    if not isinstance(allowed, list) or not all(isinstance(pattern, str) for pattern in allowed):
        raise ConfigError(f"policies/config/{descriptor.environment}.json: {REGISTRY_RULE}.allowedRegistries is not "
                          "a list of registries; list them as strings")
    host = descriptor.registry.host
    # As the pack reads it: a host named exactly, never a wildcard.
    if any(pattern.partition("/")[0].lower() == host and not any(c in pattern for c in "*?[") for pattern in allowed):
        return
    raise ConfigError(f"{where}: `registry.host`: {host} is not in the registry allow-list of "
                      f"policies/config/{descriptor.environment}.json ({REGISTRY_RULE}: "
                      f"{', '.join(allowed) or 'none'}); mirror into an allowed registry, or have the allow-list "
                      "name it")


def parse_descriptor(data: Any, *, layer: str, source: str, environment: str,
                     region: str) -> ClusterDescriptor | CustomerClusterDescriptor:
    """The descriptor, checked against the layer that reads it: same environment, same
    region. `source` says where it came from (a StackReference or a config key). A
    descriptor with a `cluster` section describes a cluster the customer runs
    (CustomerClusterDescriptor); the cloud layer's names its EKS cluster instead."""
    where = f"cluster layer {layer}: {source}"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected the cloud layer's `{OUTPUT}` object, got {type(data).__name__}")
    customer = isinstance(data.get("cluster"), dict)
    model: type[_Model] = CustomerClusterDescriptor if customer else ClusterDescriptor
    try:
        descriptor = model.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        field = _field_path(first["loc"]) or "descriptor"
        if first["type"] == "missing":
            hint = ("set it in the descriptor (docs/onprem.md lists every field)" if customer else
                    "re-run the cloud layer's `pulumi up` so it exports it, or set it in the descriptor")
            raise ConfigError(f"{where} lacks `{field}`; {hint}") from None
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{where}: `{field}`: {_unknown_key(model, tuple(first['loc']))}") from None
        from infra.config import _FieldError

        error = (first.get("ctx") or {}).get("error")
        if isinstance(error, _FieldError):
            field = _field_path((*first["loc"], error.field))
        raise ConfigError(f"{where}: `{field}`: {error or first['msg']}") from None
    if descriptor.region != region:
        raise ConfigError(f"{where} describes region {_shown(descriptor.region)}, but this layer deploys to "
                          f"{region}; point it at the cloud layer of its own region")
    if descriptor.environment != environment:
        raise ConfigError(f"{where} describes environment {inputs.excerpt(descriptor.environment)}, but this layer "
                          f"is {environment!r}; point it at the cloud layer of its own environment")
    if isinstance(descriptor, CustomerClusterDescriptor):
        from infra.config import CUSTOMER_ENVIRONMENTS

        if descriptor.environment not in CUSTOMER_ENVIRONMENTS:
            raise ConfigError(f"{where}: `environment`: {inputs.excerpt(descriptor.environment)} runs on AWS, with "
                              f"its cloud layer's descriptor; a customer's cluster is "
                              f"{', '.join(CUSTOMER_ENVIRONMENTS)}")
        check_registry_allowed(descriptor, where)
    return descriptor


# Settings a customer's cluster states elsewhere in its descriptor, or that only the cloud
# layer reads, with where they go instead.
_NOT_CUSTOMER_SETTINGS = {
    "region": "the descriptor's `region` is the site",
    "environment": "the descriptor's `environment` names it",
    "residency": "the cluster is in-country by construction; its `region` is the site",
    "nodePools": "the descriptor's `nodes` describe the customer's nodes",
    "storage": "the descriptor's `objectStorage` and `storageClasses` describe the customer's storage",
    "network": "the customer's networks are the `cidrs` of objectStorage and services",
    "cluster": "the descriptor's `cluster` names the kubeconfig context",
    "deployRunner": "the cluster layer is applied from inside the customer's network",
    "layer": "the stack's mlplat:layer says it",
}


# What serving (settings.inference) does not build on a customer's cluster yet, with why
# (docs/onprem.md, "Not yet"): each reads its credentials or keys through AWS today. Turned
# on, each is refused, never silently left out (request logging is on by default, so it is
# turned off by name).
NOT_YET_IN_CUSTOMER_SERVING = {
    "requestLogging": "request logging (its logs are written under a KMS key through Pod Identity)",
    "drift": "the drift check (it reads the request logs and its tenant's tracking secret through Pod Identity)",
    "loadBalancer": "the load balancer (an AWS NLB; on a customer's cluster the gateway is reached in-cluster only)",
}


def customer_settings(descriptor: CustomerClusterDescriptor, where: str) -> dict[str, Any]:
    """The environment's settings (PlatformConfig fields, camelCase) for a cluster the
    customer runs: the descriptor's `settings` plus what its other sections say (the site,
    the node groups as pools of their node classes, a shared scratch where a ReadWriteMany
    class is named). Registers the node classes in the instance catalog first."""
    from infra.catalog import NodeClassError, register_node_class

    settings = dict(descriptor.settings)
    for key in settings:
        if key in _NOT_CUSTOMER_SETTINGS:
            raise ConfigError(f"{where}: `settings.{key}`: is not set on a customer's cluster; "
                              f"{_NOT_CUSTOMER_SETTINGS[key]}")
    addons = dict(settings.get("addons") or {})
    if "chartMirror" in addons:
        raise ConfigError(f"{where}: `settings.addons.chartMirror`: is not set on a customer's cluster; charts come "
                          f"from registry.host ({descriptor.chart_mirror})")
    mode = addons.setdefault("devicePluginMode", "gpu-operator")
    if mode != "gpu-operator" and any(g.gpus for g in descriptor.nodes):
        raise ConfigError(f"{where}: `settings.addons.devicePluginMode`: {inputs.excerpt(mode)}: bare-metal GPU "
                          "nodes need the driver and the container toolkit, which only the GPU Operator installs; use "
                          "gpu-operator or leave it unset")
    for key, service, needs in (("tracking", descriptor.services.postgres, "services.postgres (MLflow's database)"),
                                ("features", descriptor.services.redis, "services.redis (Feast's online store)")):
        section = dict(settings.get(key) or {})
        if section.setdefault("enabled", service is not None) and service is None:
            raise ConfigError(f"{where}: `settings.{key}.enabled`: is true but the descriptor names no {needs}; "
                              f"add it, or set settings.{key}.enabled: false")
        settings[key] = section
    serving = settings.get("inference")
    if isinstance(serving, dict) and serving.get("enabled", True):
        defaults = {"requestLogging": True, "drift": False, "loadBalancer": False}
        for key, what in NOT_YET_IN_CUSTOMER_SERVING.items():
            part = serving.get(key)
            on = part.get("enabled", defaults[key]) if isinstance(part, dict) else (part is not None or defaults[key])
            if on:
                raise ConfigError(f"{where}: `settings.inference.{key}.enabled`: {what} is not built on a customer's "
                                  f"cluster yet (docs/onprem.md); set settings.inference.{key}.enabled: false")
    for index, group in enumerate(descriptor.nodes):
        try:
            register_node_class(group.node_class())
        except NodeClassError as err:
            raise ConfigError(f"{where}: `nodes[{index}].instanceType`: {err}") from None
    return {
        **settings,
        "addons": addons,
        "region": descriptor.region,
        "environment": descriptor.environment,
        "residency": {"allowedRegions": [descriptor.region]},
        "nodePools": [{"name": g.name, "role": g.role, "instanceType": g.instance_type, "minSize": g.count,
                       "maxSize": g.count} for g in descriptor.nodes],
        # Multi-node training keeps its checkpoints on a shared file system: here, each
        # tenant's claim of the ReadWriteMany class.
        "storage": {"lustre": {"enabled": descriptor.storage_classes.shared is not None}},
    }


def _unknown_key(model: type[_Model], loc: tuple[Any, ...]) -> str:
    """'unknown key', with the closest key the descriptor knows there."""
    import difflib

    from infra.config import _model_at

    at = _model_at(model, loc[:-1])
    known = sorted(f.alias or name for name, f in at.model_fields.items()) if at else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean `{close[0]}`?"
    return f"unknown key; the keys here are {', '.join(known)}" if known else "unknown key; remove it"


def _field_path(loc: tuple[Any, ...]) -> str:
    """('nodes', 1, 'fabric', 'kind') -> 'nodes[1].fabric.kind'."""
    path = ""
    for part in loc:
        part = part if isinstance(part, int) else _shown(str(part))  # a key the customer wrote
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


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


def environment_settings(stack: str, registry: str | None = None) -> Any:
    """The settings (a PlatformConfig) of the environment `stack` belongs to, for the verbs
    that run outside the program (`mlplat mirror`): the cloud layer's stack file, or what a
    customer's cluster layer states in its descriptor, checked as the program checks it.
    `registry`: where the verb copies to, which must be the descriptor's registry."""
    from infra.config import CLUSTER_SUFFIX, ClusterLayerConfig, load_layer, load_stack

    environment = stack.removesuffix(CLUSTER_SUFFIX)
    layer = load_layer(stack)
    if not isinstance(layer, ClusterLayerConfig) or layer.descriptor is None:
        return load_stack(environment)
    source = f"{PROJECT}:descriptor"
    descriptor = parse_descriptor(layer.descriptor, layer=stack, source=source, environment=layer.environment,
                                  region=layer.region)
    where = f"cluster layer {stack}: {source}"
    if isinstance(descriptor, CustomerClusterDescriptor) and registry not in (None, descriptor.registry_host):
        raise ConfigError(f"{where}: registry.host is {descriptor.registry_host}, but the copy goes to {registry}; "
                          "mirror into the registry the cluster pulls from")
    return descriptor_config(descriptor, where)


def descriptor_config(descriptor: ClusterDescriptor | CustomerClusterDescriptor, where: str) -> Any:
    """The environment's settings (a PlatformConfig) that `descriptor` carries, checked as the
    cloud layer checks its stack file; a customer's under its site's rules."""
    if isinstance(descriptor, CustomerClusterDescriptor):
        return settings_from_descriptor(customer_settings(descriptor, where), f"{where}: settings", customer_site=True)
    return settings_from_descriptor(descriptor.settings, f"{where}: settings")
