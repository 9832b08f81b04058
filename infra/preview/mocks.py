"""Run the real program under Pulumi's mocks and record what the engine would receive.

`RecordingMonitor` sits where the resource monitor sits: it sees every
`RegisterResourceRequest` whole (parent, provider reference, property dependencies,
protect/retain options), which `Mocks.new_resource` alone does not show.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.mocks import MockMonitor, _resolve_callbacks
from pulumi.runtime.settings import ROOT, SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra.preview.fixtures import InvokeRefused, RegionFixture, UnansweredInvoke

# Pulumi's wire signatures (sdk/go/common/resource/sig): how secrets, unknowns and
# resource references look inside a serialized property Struct.
SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


@dataclass
class Registration:
    """One resource as the engine would receive it."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    provider_ref: str  # "<provider urn>::<provider id>", or "" where none was given
    properties: struct_pb2.Struct  # the inputs, serialized exactly as the SDK sent them
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    additional_secret_outputs: list[str] = field(default_factory=list)
    # The program's transforms on this resource (callables), which the engine also applies
    # to the children a provider registers under it.
    transforms: list[Any] = field(default_factory=list, repr=False, compare=False)
    _masked: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # The unmasked inputs where they are known without decoding (a chart's child: the object
    # the preview rendered); None: decode `properties`.
    known_inputs: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def provider_urn(self) -> str:
        return self.provider_ref.rsplit("::", 1)[0] if self.provider_ref else ""

    @property
    def is_provider(self) -> bool:
        return self.type.startswith("pulumi:providers:")

    def inputs(self, mask_secrets: bool = True) -> dict[str, Any]:
        """Plain inputs for reports: secrets masked, references shown as URNs. The masked
        form is decoded once and shared by every report: treat it as read-only."""
        if not mask_secrets:
            if self.known_inputs is not None:
                return self.known_inputs
            return plain(json_format.MessageToDict(self.properties), mask_secrets=False)
        if self._masked is None:
            self._masked = plain(json_format.MessageToDict(self.properties), mask_secrets=True)
        return self._masked


def plain(value: Any, mask_secrets: bool = True) -> Any:
    if isinstance(value, dict):
        sig = value.get(SIG_KEY)
        if sig == SECRET_SIG:
            return "[secret]" if mask_secrets else plain(value.get("value"), mask_secrets)
        if sig == RESOURCE_SIG:
            return value.get("urn")
        if sig == OUTPUT_SIG:
            if value.get("secret") and mask_secrets:
                return "[secret]"
            return plain(value.get("value", UNKNOWN), mask_secrets)
        return {k: plain(v, mask_secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, mask_secrets) for v in value]
    if value == UNKNOWN:
        return "[unknown]"
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire has only doubles; 2.0 was written as 2
    return value


class DuplicateUrn(Exception):
    """The real engine rejects two resources with one URN; mocks would accept them."""


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, on_register: Callable[[Registration], None] | None = None):
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}
        self.outputs: dict[str, list[str]] = {}  # component urn -> names it registered as outputs
        self.duplicates: list[str] = []
        self._on_register = on_register

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        self.outputs[request.urn] = sorted(request.outputs.fields.keys())
        return super().RegisterResourceOutputs(request)

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The engine leaves the root stack out of its children's type chain; mocks don't.
        if parent.split("::")[2:3] == ["pulumi:pulumi:Stack"]:
            parent = ""
        return super().make_urn(parent, type_, name)

    def add(self, reg: Registration) -> None:
        """A registration made on the program's behalf (a remote component's child)."""
        if reg.urn in self.registrations:
            self.duplicates.append(reg.urn)
        self.registrations[reg.urn] = reg
        if self._on_register is not None:
            self._on_register(reg)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        if request.type != "pulumi:pulumi:Stack":
            urn = self.make_urn(request.parent, request.type, request.name)
            if urn in self.registrations:
                self.duplicates.append(urn)
            reg = Registration(
                urn=urn,
                type=request.type,
                name=request.name,
                parent=request.parent,
                custom=bool(request.custom),
                provider_ref=request.provider,
                properties=request.object,
                dependencies=list(request.dependencies),
                property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                protect=request.protect if request.HasField("protect") else False,
                retain_on_delete=request.retainOnDelete if request.HasField("retainOnDelete") else False,
                delete_before_replace=bool(request.deleteBeforeReplace),
                ignore_changes=list(request.ignoreChanges),
                additional_secret_outputs=list(request.additionalSecretOutputs),
                transforms=_resolve_callbacks(request.transforms),
            )
            self.registrations[urn] = reg
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack" and self._on_register is not None:
            self._on_register(self.registrations[response.urn])
        return response


STACK_REFERENCE = "pulumi:pulumi:StackReference"


def stable_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:17]


class PreviewMocks(pulumi.runtime.Mocks):
    """Answers invokes from the region fixture and gives every resource plausible,
    deterministic outputs (ids, ARNs in the resource's own region)."""

    def __init__(self, fixture: RegionFixture, stack_outputs: dict[str, dict[str, Any]] | None = None) -> None:
        self.fixture = fixture
        self.provider_regions: dict[str, str] = {}  # provider urn-less id -> region
        self.invokes: list[str] = []
        # What each StackReference reads: stack name -> its outputs (the cluster layer's
        # descriptor, from the cloud layer's preview).
        self.stack_outputs = stack_outputs or {}

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict | tuple[dict, list[tuple[str, str]]]:
        self.invokes.append(args.token)
        try:
            return self.fixture.answer(args.token, args.args)
        except InvokeRefused as err:  # AWS found nothing: the invoke fails, as the provider's would
            return {}, [("", str(err))]
        except UnansweredInvoke:
            raise
        except Exception as err:  # noqa: BLE001 - a fixture's own fault fails the invoke, named; an exception
            # escaping here would leave the invoke's call outstanding, and a program that catches the error
            # (preflight's region_lookup does) would then wait for it forever.
            return {}, [("", f"the offline preview's fixture for {args.token} failed: {type(err).__name__}: {err}")]

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        inputs = dict(args.inputs)
        if args.typ == STACK_REFERENCE:
            name = args.resource_id or inputs.get("name") or args.name
            return name, {"name": name, "outputs": self.stack_outputs.get(name, {}), "secretOutputNames": []}
        if args.typ.startswith("pulumi:providers:"):
            ident = stable_id(args.typ, args.name)
            self.provider_regions[ident] = inputs.get("region", "")
            return ident, inputs
        provider_id = args.provider.rsplit("::", 1)[-1] if args.provider else ""
        region = inputs.get("region") or self.provider_regions.get(provider_id) or self.fixture.region
        ident = stable_id(args.typ, args.name)
        outputs = computed_outputs(args.typ, args.name, inputs, ident, region, self.fixture.account_id)
        return outputs.pop("id", ident), {**inputs, **outputs}


def computed_outputs(typ: str, name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    """Outputs the provider would compute, enough for the program's `apply`s."""
    service = typ.split(":")[1].split("/")[0] if typ.startswith("aws:") else ""
    kind = typ.rsplit(":", 1)[-1]
    handler = _OUTPUTS.get(typ)
    outputs: dict[str, Any] = {
        "arn": f"arn:aws:{service}:{region}:{account}:{kind.lower()}/{ident}",
        "tagsAll": inputs.get("tags") or {},
    }
    if handler is not None:
        outputs.update(handler(name, inputs, ident, region, account))
    return outputs


def _bucket(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    bucket = inputs.get("bucket") or f"{name}-{ident}"
    return {
        "id": bucket,
        "bucket": bucket,
        "arn": f"arn:aws:s3:::{bucket}",
        "bucketDomainName": f"{bucket}.s3.amazonaws.com",
        "bucketRegionalDomainName": f"{bucket}.s3.{region}.amazonaws.com",
        "region": region,
    }


def _kms_key(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    key_id = f"{ident[:8]}-{ident[8:12]}-4{ident[12:15]}-8{ident[15:17]}0-{ident[:12]}"
    return {"id": key_id, "keyId": key_id, "arn": f"arn:aws:kms:{region}:{account}:key/{key_id}"}


def _kms_alias(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    alias = inputs.get("name", f"alias/{name}")
    return {"id": alias, "arn": f"arn:aws:kms:{region}:{account}:{alias}", "targetKeyArn": ""}


def _prefixed_id(prefix: str) -> Callable[[str, dict, str, str, str], dict[str, Any]]:
    """EC2-style ids (`vpc-…`, `subnet-…`) and the matching ARN."""

    def outputs(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
        kind = {"sg": "security-group", "rtb": "route-table", "igw": "internet-gateway", "nat": "natgateway",
                "vpce": "vpc-endpoint", "fl": "vpc-flow-log", "lt": "launch-template"}.get(prefix, prefix)
        return {"id": f"{prefix}-{ident}", "arn": f"arn:aws:ec2:{region}:{account}:{kind}/{prefix}-{ident}"}

    return outputs


def _vpc(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    return {**_prefixed_id("vpc")(name, inputs, ident, region, account),
            "defaultSecurityGroupId": f"sg-d{ident[1:]}", "mainRouteTableId": f"rtb-m{ident[1:]}"}


def _subnet(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    from infra.preview.fixtures import ZONES

    zone_id = inputs.get("availabilityZoneId", "")
    zone_name = dict((z_id, z_name) for z_name, z_id in ZONES.get(region, ())).get(zone_id, "")
    return {**_prefixed_id("subnet")(name, inputs, ident, region, account), "availabilityZone": zone_name}


def _eip(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    return {"id": f"eipalloc-{ident}", "allocationId": f"eipalloc-{ident}", "publicIp": "198.51.100.10"}


def _log_group(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    group = inputs.get("name") or f"{name}-{ident}"
    return {"id": group, "name": group, "arn": f"arn:aws:logs:{region}:{account}:log-group:{group}"}


def _iam_role(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    role = inputs.get("name") or f"{name}-{ident[:7]}"
    return {"id": role, "name": role, "arn": f"arn:aws:iam::{account}:role/{role}", "uniqueId": f"AROA{ident.upper()}"}


def _launch_template(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    return {**_prefixed_id("lt")(name, inputs, ident, region, account), "latestVersion": 1, "defaultVersion": 1}


def _placement_group(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    group = inputs.get("name") or f"{name}-{ident[:7]}"
    return {"id": group, "name": group, "placementGroupId": f"pg-{ident}",
            "arn": f"arn:aws:ec2:{region}:{account}:placement-group/{group}"}


def _eks_cluster(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    cluster = inputs.get("name") or f"{name}-{ident[:7]}"
    vpc_config = dict(inputs.get("vpcConfig") or {})
    vpc_config.update({"clusterSecurityGroupId": f"sg-c{ident[1:]}", "vpcId": "vpc-preview"})
    return {
        "id": cluster,
        "name": cluster,
        "arn": f"arn:aws:eks:{region}:{account}:cluster/{cluster}",
        "endpoint": f"https://{ident.upper()}.gr7.{region}.eks.amazonaws.com",
        "certificateAuthority": {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCnByZXZpZXcKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="},
        "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{region}.amazonaws.com/id/{ident.upper()}"}]}],
        "vpcConfig": vpc_config,
        "platformVersion": "eks.1",
        "status": "ACTIVE",
        "clusterId": ident,
    }


def _eks_node_group(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    group = inputs.get("nodeGroupName") or name
    cluster = inputs.get("clusterName", "")
    return {"id": f"{cluster}:{group}", "nodeGroupName": group, "status": "ACTIVE",
            "arn": f"arn:aws:eks:{region}:{account}:nodegroup/{cluster}/{group}/{ident}"}


def _eks_addon(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    cluster, addon = inputs.get("clusterName", ""), inputs.get("addonName", name)
    return {"id": f"{cluster}:{addon}", "arn": f"arn:aws:eks:{region}:{account}:addon/{cluster}/{addon}/{ident}"}


def _ecr_repository(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    repository = inputs.get("name") or f"{name}-{ident}"
    return {"id": repository, "name": repository, "registryId": account,
            "arn": f"arn:aws:ecr:{region}:{account}:repository/{repository}",
            "repositoryUrl": f"{account}.dkr.ecr.{region}.amazonaws.com/{repository}"}


def _lustre(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    fs_id = f"fs-{ident}"
    return {"id": fs_id, "arn": f"arn:aws:fsx:{region}:{account}:file-system/{fs_id}",
            "dnsName": f"{fs_id}.fsx.{region}.amazonaws.com", "mountName": ident[:8]}


def _data_repository_association(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    return {"id": f"dra-{ident}", "associationId": f"dra-{ident}",
            "arn": f"arn:aws:fsx:{region}:{account}:association/{inputs.get('fileSystemId', '')}/dra-{ident}"}


def _rds_instance(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    db = inputs.get("identifier") or f"{name}-{ident}"
    address = f"{db}.{ident[:12]}.{region}.rds.amazonaws.com"
    outputs: dict[str, Any] = {"id": db, "arn": f"arn:aws:rds:{region}:{account}:db:{db}", "address": address,
                               "endpoint": f"{address}:{inputs.get('port', 5432)}", "port": inputs.get("port", 5432)}
    if inputs.get("manageMasterUserPassword"):
        # RDS names the secret it makes rds!db-<resource id>.
        secret = f"arn:aws:secretsmanager:{region}:{account}:secret:rds!db-{ident[:8]}-{ident[8:14]}"
        outputs["masterUserSecrets"] = [{"secretArn": secret, "kmsKeyId": inputs.get("masterUserSecretKmsKeyId", ""),
                                         "secretStatus": "active"}]
    return outputs


def _replication_group(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    group = inputs.get("replicationGroupId") or f"{name}-{ident}"
    # With TLS, ElastiCache names the primary endpoint master.<group>.<hash>.<region code>.cache...
    return {"id": group, "arn": f"arn:aws:elasticache:{region}:{account}:replicationgroup:{group}",
            "primaryEndpointAddress": f"master.{group}.{ident[:6]}.{region}.cache.amazonaws.com",
            "memberClusters": [f"{group}-{i:03d}" for i in range(1, int(inputs.get("numCacheClusters", 1)) + 1)]}


def _cache_user(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    user = inputs.get("userId") or f"{name}-{ident}"
    return {"id": user, "arn": f"arn:aws:elasticache:{region}:{account}:user:{user}"}


def _secret(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    secret = inputs.get("name") or f"{name}-{ident}"
    arn = f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}-{ident[:6]}"
    return {"id": arn, "arn": arn}


def _trail(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    trail = inputs.get("name") or f"{name}-{ident}"
    arn = f"arn:aws:cloudtrail:{region}:{account}:trail/{trail}"
    return {"id": arn, "name": trail, "arn": arn, "homeRegion": region}


def _network_firewall(name: str, inputs: dict, ident: str, region: str, account: str) -> dict[str, Any]:
    """One endpoint per subnet mapping, as Network Firewall reports them once in sync."""
    states = [{"availabilityZone": region, "attachments": [{"subnetId": m.get("subnetId"), "status": "READY",
                                                             "endpointId": f"vpce-{stable_id('fw', str(m.get('subnetId')))[:17]}"}]}
              for m in inputs.get("subnetMappings") or []]
    return {"firewallStatuses": [{"syncStates": states, "status": "READY"}], "updateToken": ident}


# Type-specific outputs. Other components add theirs here as the program grows.
_OUTPUTS: dict[str, Callable[[str, dict, str, str, str], dict[str, Any]]] = {
    "aws:s3/bucket:Bucket": _bucket,
    "aws:kms/key:Key": _kms_key,
    "aws:kms/alias:Alias": _kms_alias,
    "aws:ec2/vpc:Vpc": _vpc,
    "aws:ec2/subnet:Subnet": _subnet,
    "aws:ec2/securityGroup:SecurityGroup": _prefixed_id("sg"),
    "aws:ec2/internetGateway:InternetGateway": _prefixed_id("igw"),
    "aws:ec2/natGateway:NatGateway": _prefixed_id("nat"),
    "aws:ec2/eip:Eip": _eip,
    "aws:ec2/routeTable:RouteTable": _prefixed_id("rtb"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": _prefixed_id("vpce"),
    "aws:ec2/flowLog:FlowLog": _prefixed_id("fl"),
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:ec2/placementGroup:PlacementGroup": _placement_group,
    "aws:cloudwatch/logGroup:LogGroup": _log_group,
    "aws:iam/role:Role": _iam_role,
    "aws:eks/cluster:Cluster": _eks_cluster,
    "aws:eks/nodeGroup:NodeGroup": _eks_node_group,
    "aws:eks/addon:Addon": _eks_addon,
    "aws:ecr/repository:Repository": _ecr_repository,
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": _data_repository_association,
    "aws:cloudtrail/trail:Trail": _trail,
    "aws:rds/instance:Instance": _rds_instance,
    "aws:secretsmanager/secret:Secret": _secret,
    "aws:elasticache/replicationGroup:ReplicationGroup": _replication_group,
    "aws:elasticache/user:User": _cache_user,
    "aws:networkfirewall/firewall:Firewall": _network_firewall,
}


def run_program(
    program: Callable[[], Any],
    mocks: pulumi.runtime.Mocks,
    monitor: MockMonitor,
    *,
    project: str,
    stack: str,
) -> None:
    """Run `program` as the language host would, under the given mocks and monitor,
    and wait until every registration has been answered."""
    ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=True, monitor=monitor)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    _sync_await(run_pulumi_func(program))


def stack_exports() -> dict[str, Any]:
    """The program's `pulumi.export`s once it has run, as `pulumi stack output` shows them
    (secrets masked). Under mocks the root stack registers its outputs before the program
    runs, so they are read from the stack resource itself."""
    from pulumi.runtime.settings import get_root_resource

    root = get_root_resource()
    exports: dict[str, Any] = {}
    for name, value in (getattr(root, "outputs", None) or {}).items():
        output = pulumi.Output.from_input(value)
        secret = _sync_await(output.is_secret())
        exports[name] = "[secret]" if secret else _sync_await(output.future())
    return exports
