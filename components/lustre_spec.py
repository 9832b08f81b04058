"""FSx for Lustre facts and the scratch file system's network rules, as plain data.
Nothing here imports Pulumi (the stack config validates against these too)."""

from __future__ import annotations

from dataclasses import dataclass

from components.tenant_paths import datasets_prefix

DEPLOYMENT_TYPE = "PERSISTENT_2"
LUSTRE_VERSION = "2.15"

# PERSISTENT_2 on SSD: MB/s of throughput per TiB of storage.
PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)
# PERSISTENT_2 on SSD: 1200 GiB, or a multiple of 2400 GiB.
SMALLEST_CAPACITY_GIB = 1200
CAPACITY_STEP_GIB = 2400

# Lustre's LNET port, and the ports its servers and clients talk on.
LUSTRE_PORTS = ((988, 988), (1018, 1023))

# Where a tenant's datasets appear, inside its own directory of the file system (which its
# pods mount as their scratch root): /<tenant>/datasets mirrors s3://<datasets>/<tenant>/, so
# a tenant sees, and can export to, only its own prefix of the bucket.
DATASETS_PATH = "/datasets"
# FSx for Lustre links at most this many paths to S3 (data repository associations).
MAX_ASSOCIATIONS = 8


def tenant_datasets_path(tenant: str) -> str:
    """Where a tenant's datasets are on the file system (its pods see them at DATASETS_PATH
    under their scratch mount)."""
    return f"/{tenant}{DATASETS_PATH}"


def tenant_datasets_prefix(bucket: str, tenant: str) -> str:
    return f"s3://{bucket}/{datasets_prefix(tenant)}"


def tenants_error(count: int) -> str | None:
    """None if the file system can link this many tenants' directories, else why not."""
    if count > MAX_ASSOCIATIONS:
        return (f"{count} tenants, but Lustre links at most {MAX_ASSOCIATIONS} directories to the datasets bucket "
                "(one per tenant's own prefix)")
    return None
# The bucket's new, changed and deleted objects show in the file system. Back to the
# bucket go only new and changed files: exporting deletions would let an `rm` under
# /datasets delete in S3, past the read-only grant training pods have on the bucket. A
# changed file still overwrites its object; the replaced version is kept for
# storage.datasetVersionDays, so it can be restored.
IMPORT_EVENTS = ("NEW", "CHANGED", "DELETED")
EXPORT_EVENTS = ("NEW", "CHANGED")


def capacity_allowed(gib: int) -> bool:
    return gib == SMALLEST_CAPACITY_GIB or (gib > 0 and gib % CAPACITY_STEP_GIB == 0)


def capacity_error(gib: object) -> str | None:
    """None if FSx accepts this PERSISTENT_2 capacity, else why not (one line)."""
    if isinstance(gib, bool) or not isinstance(gib, int) or not capacity_allowed(gib):
        return (
            f"{gib!r} GiB is not a PERSISTENT_2 capacity; allowed: {SMALLEST_CAPACITY_GIB} or a multiple of "
            f"{CAPACITY_STEP_GIB} ({CAPACITY_STEP_GIB}, {2 * CAPACITY_STEP_GIB}, {3 * CAPACITY_STEP_GIB}, ...)"
        )
    return None


def throughput_error(value: object) -> str | None:
    """None if FSx accepts this PERSISTENT_2 per-unit throughput, else why not (one line)."""
    if isinstance(value, bool) or value not in PERSISTENT_2_THROUGHPUTS:
        return (
            f"{value!r} is not a PERSISTENT_2 throughput; allowed: "
            f"{', '.join(map(str, PERSISTENT_2_THROUGHPUTS))} (MB/s per TiB)"
        )
    return None


@dataclass(frozen=True)
class Rule:
    direction: str  # "ingress" or "egress", seen from the file system's security group
    peer: str  # "nodes" (the cluster's node security group), "self", or "lustre" (the file system's group)
    from_port: int
    to_port: int

    @property
    def description(self) -> str:
        ports = str(self.from_port) if self.from_port == self.to_port else f"{self.from_port}-{self.to_port}"
        way = "from" if self.direction == "ingress" else "to"
        who = {"nodes": "cluster nodes", "self": "the file system's own servers", "lustre": "the Lustre file system"}
        return f"Lustre TCP {ports} {way} {who[self.peer]}"


def file_system_rules() -> list[Rule]:
    """Lustre ports only, only with the cluster's nodes and between the file system's own
    servers (FSx refuses to create a file system whose group blocks the latter)."""
    return [
        Rule(direction, peer, low, high)
        for direction in ("ingress", "egress")
        for peer in ("nodes", "self")
        for low, high in LUSTRE_PORTS
    ]


def client_rules() -> list[Rule]:
    """What the nodes' group must accept from the file system: Lustre servers call back to
    their clients on the same ports. `peer` here is the file system's group."""
    return [Rule("ingress", "lustre", low, high) for low, high in LUSTRE_PORTS]
