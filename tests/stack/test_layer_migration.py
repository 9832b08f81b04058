"""Moving a stack made before the layers split: the `pulumi state move`s of
docs/layers.md, applied with the tool's rules to every resource each single stack
registered (tests/fixtures/single_stack), leave every resource where the two layers'
programs declare it, under the same identity, and never touch a data-bearing resource.

`pulumi state move` (Pulumi CLI 3.226+): a moved component takes all its children; a
moved resource whose parent stays behind is re-parented to the destination's root (its
URN's type chain loses the parent's types); providers are copied, not moved. The engine
identifies a resource by its full type chain and name, which mocks shorten to the last
parent's type, so identities are computed here from the parent links."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import load_stack
from tests.conftest import STACKS, preview

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "single_stack"
# Never moved, never replaced: their identity in the cloud layer must be what it was.
DATA_BEARING = ("aws:kms/key:Key", "aws:s3/bucket:Bucket", "aws:fsx/lustreFileSystem:LustreFileSystem",
                "aws:ecr/repository:Repository", "aws:eks/cluster:Cluster")
# docs/layers.md: what moves to the cluster layer, and what comes back to the cloud layer.
TO_CLUSTER = ("mlplat:tenancy:Tenancy", "mlplat:addons:ClusterAddons", "mlplat:training:TrainingJob",
              "mlplat:inference:InferenceService")
BACK_TO_CLOUD = ("mlplat:iam:PodIdentityRole", "aws:eks/accessEntry:AccessEntry")
# The account's EBS defaults, which single stacks all made: only the stack that owns them
# (storage.ebsAccountDefaults) still does. The others drop them from their state with
# `pulumi state delete` before their next `up` (docs/layers.md): their state holds them
# without the retain flag, so an `up` would reset the account's default key.
ACCOUNT_EBS_DEFAULTS = ("mlplat:storage:VolumeEncryption", "aws:ebs/defaultKmsKey:DefaultKmsKey",
                        "aws:ebs/encryptionByDefault:EncryptionByDefault")
# Objects the program stopped declaring after the split, on purpose: the next `up` deletes
# them. Nothing here holds data.
RETIRED = {
    ("mlplat:inference:InferenceService$kubernetes:core/v1:Service", "service-inference-triton"):
        "clients reach Triton only through the gateway now, by way of triton-stable and triton-canary",
    ("mlplat:inference:InferenceService$kubernetes:networking.k8s.io/v1:NetworkPolicy",
     "networkpolicy-inference-allow-clients"): "replaced by allow-gateway: only the gateway's proxies reach Triton",
    ("mlplat:network:Network$aws:ec2/routeTable:RouteTable", "network-public"):
        "a restricted environment's egress goes through its firewall: each zone's public subnet has its own table "
        "(network-public-<zone>) that sends the private subnet's return traffic back through the zone's firewall "
        "endpoint; the shared table held routes only",
    ("mlplat:storage:LustreScratch$aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "lustre"):
        "replaced by one link per tenant (lustre-<tenant>), each its directory to its prefix; the link keeps "
        "deleteDataInFilesystem false, so removing it removes no file",
}


def _type(urn: str) -> str:
    return urn.split("::")[2].split("$")[-1]


def _name(urn: str) -> str:
    return "::".join(urn.split("::")[3:])


class State:
    """One stack's resources: urn -> parent urn ('' for the root)."""

    def __init__(self, parents: dict[str, str]) -> None:
        self.parents = dict(parents)

    def descendants(self, urns: set[str]) -> set[str]:
        found, grew = set(urns), True
        while grew:
            more = {u for u, p in self.parents.items() if p in found and not _type(u).startswith("pulumi:providers:")}
            grew = bool(more - found)
            found |= more
        return found

    def identity(self, urn: str) -> tuple[str, str]:
        """(full type chain, name), as the engine names the resource."""
        chain, parent = [_type(urn)], self.parents.get(urn, "")
        while parent:
            chain.insert(0, _type(parent))
            parent = self.parents.get(parent, "")
        return "$".join(chain), _name(urn)


def move(source: State, dest: State, urns: set[str]) -> None:
    moved = source.descendants(urns)
    for urn in moved:
        parent = source.parents[urn]
        dest.parents[urn] = parent if parent in moved else ""
    for urn in moved:
        del source.parents[urn]


def single_stack(environment: str) -> State:
    rows = [line.split("\t") for line in (FIXTURES / f"{environment}.urns").read_text().splitlines()
            if line and not line.startswith("#")]
    return State({urn: parent for urn, parent in rows})


def program_identities(result) -> dict[tuple[str, str], str]:
    """identity -> type of everything a layer's program registers (providers aside)."""
    state = State({r.urn: r.parent if "pulumi:pulumi:Stack" not in r.parent else "" for r in result.registrations})
    return {state.identity(r.urn): r.type for r in result.registrations if not r.is_provider}


def migrate(environment: str) -> tuple[State, State]:
    cloud, cluster = single_stack(environment), State({})
    roots = {u for u, p in cloud.parents.items() if not p and _type(u) in TO_CLUSTER}
    storage_class = {u for u, p in cloud.parents.items()
                     if _type(u) == "kubernetes:storage.k8s.io/v1:StorageClass" and _type(p) == "mlplat:cluster:CoreAddons"}
    move(cloud, cluster, roots | storage_class)
    back = {u for u, p in cluster.parents.items() if _type(u) in BACK_TO_CLOUD and _type(p) != _type(u)}
    move(cluster, cloud, back)
    return cloud, cluster


@pytest.mark.parametrize("environment", STACKS)
def test_after_the_moves_each_layer_declares_every_resource_it_holds(environment):
    before = single_stack(environment)
    cloud, cluster = migrate(environment)
    assert len(cloud.parents) + len(cluster.parents) == len(before.parents)  # nothing lost or doubled
    for state, result, layer in ((cloud, preview(environment), "cloud"),
                                 (cluster, preview(f"{environment}-cluster"), "cluster")):
        declared = program_identities(result)
        held = {state.identity(u): _type(u) for u in state.parents if not _type(u).startswith("pulumi:providers:")}
        released = ACCOUNT_EBS_DEFAULTS if layer == "cloud" and not load_stack(environment).storage.ebs_account_defaults \
            else ()
        orphans = sorted(f"{t} {i}" for i, t in held.items()
                         if i not in declared and t not in released and i not in RETIRED)
        assert orphans == [], f"{layer} layer would delete what it holds: {orphans[:5]}"


@pytest.mark.parametrize("environment", STACKS)
def test_no_data_bearing_resource_moves_or_changes_identity(environment):
    before = single_stack(environment)
    cloud, _cluster = migrate(environment)
    data = [u for u in before.parents if _type(u) in DATA_BEARING]
    assert data
    for urn in data:
        assert urn in cloud.parents, urn
        assert cloud.identity(urn) == before.identity(urn), urn
    declared = program_identities(preview(environment))
    assert all(before.identity(u) in declared for u in data)


@pytest.mark.parametrize("environment", STACKS)
def test_the_layers_split_aws_from_kubernetes(environment):
    cloud, cluster = preview(environment), preview(f"{environment}-cluster")
    assert not [r.urn for r in cloud.registrations if r.type.startswith("kubernetes:")]
    assert not [r.urn for r in cluster.registrations if r.type.startswith("aws:")]
    assert not [r.urn for r in cluster.registrations if r.type == "pulumi:providers:aws"]
