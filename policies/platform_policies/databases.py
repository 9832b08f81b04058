"""Databases: RDS and Aurora reachable only inside the VPC, and only over TLS.

Whether a database forces TLS lives in its parameter group, a resource of its own: the
database must name one of the stack's (the `default.*` groups are AWS's and cannot be
changed), and that group must set the engine's switch (`rds.force_ssl` 1 for PostgreSQL,
`require_secure_transport` ON for MySQL and MariaDB). Both are judged on the resource
itself, so the engine refuses either before it is created.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, aws_types, flag, get, items, resource_rule
from .controls import TLS_TO_STORAGE

INSTANCES = aws_types("rds/instance:Instance", "rds/clusterInstance:ClusterInstance")
CLUSTERS = aws_types("rds/cluster:Cluster")
PARAMETER_GROUPS = aws_types("rds/parameterGroup:ParameterGroup", "rds/clusterParameterGroup:ClusterParameterGroup")
# The parameter that refuses plain connections, and the values that turn it on, by the
# engine family's prefix.
TLS_SWITCHES: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    (("postgres", "aurora-postgresql"), "rds.force_ssl", ("1",)),
    (("mysql", "aurora-mysql", "mariadb"), "require_secure_transport", ("1", "on")),
)
# Aurora instances take the cluster's parameter group for TLS; the cluster is judged.
GROUP_OF = {"aws:rds/instance:Instance": "parameterGroupName", "aws:rds/cluster:Cluster": "dbClusterParameterGroupName"}


def _switch(family: Any) -> tuple[str, tuple[str, ...]] | None:
    if not isinstance(family, str):
        return None
    for prefixes, name, values in TLS_SWITCHES:
        if family.startswith(prefixes):
            return name, values
    return None


def _check_databases(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    where = f"{kind} '{args.name}'"
    if kind in INSTANCES and flag(get(props, "publiclyAccessible")) is True:
        report(f"{where}: publiclyAccessible is true, which gives it an address the internet can reach; set it to "
               "false and reach it from inside the VPC")
    engine = get(props, "engine")
    if kind in GROUP_OF and not (kind in INSTANCES and isinstance(engine, str) and engine.startswith("aurora")):
        group = get(props, GROUP_OF[kind])
        if group is not UNKNOWN and (not isinstance(group, str) or group.startswith("default.")):
            report(f"{where}: {GROUP_OF[kind]} is {group!r}; name a parameter group of the stack's that forces TLS "
                   "(AWS's default groups cannot be changed)")
    if kind in PARAMETER_GROUPS:
        switch = _switch(get(props, "family"))
        if switch is None:
            return
        name, values = switch
        set_to = {get(p, "name"): get(p, "value") for p in items(get(props, "parameters"))}
        value = set_to.get(name)
        if value is UNKNOWN:
            return
        if not isinstance(value, str) or value.lower() not in values:
            report(f"{where}: {name} is {value!r}, so clients may connect without TLS; set {name} to {values[-1]}")


databases_private_and_tls = resource_rule(
    name="databases-private-and-tls",
    description="RDS and Aurora instances are not publicly accessible; every database names a parameter group of "
    "the stack's, and every PostgreSQL, MySQL or MariaDB parameter group forces TLS (rds.force_ssl, "
    "require_secure_transport).",
    applies=INSTANCES | CLUSTERS | PARAMETER_GROUPS,
    check=_check_databases,
    framework=TLS_TO_STORAGE,
    remediation="Set publicly_accessible=False; create an aws.rds.ParameterGroup (ClusterParameterGroup for "
    "Aurora) with rds.force_ssl=1 (PostgreSQL) or require_secure_transport=ON (MySQL) and name it on the database.",
    tags=["exposure", "encryption-in-transit"],
)
