"""Encryption in transit: load balancers and caches speak TLS 1.2 or later."""

from __future__ import annotations

import re
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, aws_types, flag, get, items, resource_rule
from .controls import cis_eks, iso

LISTENERS = aws_types("lb/listener:Listener", "alb/listener:Listener")
CLASSIC_LBS = aws_types("elb/loadBalancer:LoadBalancer")

# ELB security policy names carry their minimum protocol version: ELBSecurityPolicy-TLS13-1-2-2021-06,
# ELBSecurityPolicy-TLS-1-2-2017-01, ELBSecurityPolicy-FS-1-2-Res-2020-10. Names without one
# (ELBSecurityPolicy-2016-08, the API default) accept TLS 1.0.
POLICY_VERSION = re.compile(r"^ELBSecurityPolicy-(TLS13|TLS|FS)-1-([0-3])-")

TLS_SCHEMA = {
    "minimumTlsVersion": {
        "type": "string",
        "enum": ["1.2", "1.3"],
        "default": "1.2",
        "description": "Lowest TLS version a listener's security policy may accept.",
    },
    "requireTls13Policy": {
        "type": "boolean",
        "default": False,
        "description": "Require an ELBSecurityPolicy-TLS13-* policy (TLS 1.3 offered to clients that support it).",
    },
}


def policy_minimum(policy: str) -> tuple[int, int] | None:
    match = POLICY_VERSION.match(policy)
    return (1, int(match.group(2))) if match else None


def _redirects_to_https(actions: Any) -> bool:
    actions = items(actions)
    return bool(actions) and all(
        get(a, "type") == "redirect" and str(get(a, "redirect", "protocol") or "").upper() == "HTTPS" for a in actions
    )


def _check_listeners(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in CLASSIC_LBS:
        for i, listener in enumerate(items(get(args.props, "listeners"))):
            protocol = str(get(listener, "lbProtocol") or "").upper()
            if protocol not in ("HTTPS", "SSL"):
                report(f"{where}: listeners[{i}].lbProtocol is {protocol or 'unset'}; use HTTPS or SSL")
        report(f"{where}: a Classic Load Balancer cannot be pinned to a TLS 1.2+ policy by this pack; use an "
               "Application or Network Load Balancer")
        return
    protocol = get(args.props, "protocol")
    if protocol is UNKNOWN:
        return
    protocol = str(protocol or "").upper()
    if protocol in ("HTTP",) and _redirects_to_https(get(args.props, "defaultActions")):
        return  # carries no data: every request is answered with a redirect to HTTPS
    if protocol == "GENEVE":
        args.not_applicable("Gateway Load Balancer listener: traffic stays encapsulated to appliances")
    if protocol not in ("HTTPS", "TLS"):
        report(f"{where}: protocol is {protocol or 'unset (HTTP/TCP)'}; listeners must terminate TLS (HTTPS or "
               "TLS), or only redirect HTTP to HTTPS")
        return
    policy = get(args.props, "sslPolicy")
    if policy is UNKNOWN:
        return
    if not isinstance(policy, str) or not policy:
        report(f"{where}: no sslPolicy, so AWS applies ELBSecurityPolicy-2016-08, which accepts TLS 1.0; set "
               "ELBSecurityPolicy-TLS13-1-2-2021-06 or stricter")
        return
    minimum = policy_minimum(policy)
    wanted = tuple(int(x) for x in str(settings["minimumTlsVersion"]).split("."))
    if minimum is None or minimum < wanted:
        shown = "TLS 1.0" if minimum is None else f"TLS {minimum[0]}.{minimum[1]}"
        report(f"{where}: sslPolicy {policy} accepts {shown}; the minimum is TLS {settings['minimumTlsVersion']}")
    elif settings["requireTls13Policy"] and not policy.startswith("ELBSecurityPolicy-TLS13-"):
        report(f"{where}: sslPolicy {policy} does not offer TLS 1.3; use an ELBSecurityPolicy-TLS13-* policy")


load_balancer_listeners_tls = resource_rule(
    name="load-balancer-listeners-tls",
    description="Load-balancer listeners terminate TLS (HTTPS or TLS) with a security policy whose minimum is "
    "TLS 1.2 (TLS 1.3 policies preferred); plain HTTP only to redirect to HTTPS.",
    applies=LISTENERS | CLASSIC_LBS,
    check=_check_listeners,
    config=TLS_SCHEMA,
    framework=cis_eks("5.4.5", "Encrypt traffic to HTTPS load balancers with TLS certificates"),
    remediation="Use protocol HTTPS (ALB) or TLS (NLB) with a certificate from ACM in the same region and "
    "ssl_policy=\"ELBSecurityPolicy-TLS13-1-2-2021-06\" (or a TLS13-1-3 policy).",
    tags=["encryption-in-transit"],
)


CACHE_GROUPS = aws_types("elasticache/replicationGroup:ReplicationGroup")
CACHE_CLUSTERS = aws_types("elasticache/cluster:Cluster")
SERVERLESS_CACHES = aws_types("elasticache/serverlessCache:ServerlessCache")


def _check_cache_transit(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in SERVERLESS_CACHES:
        return  # serverless caches accept TLS connections only
    if args.resource_type in CACHE_CLUSTERS and get(args.props, "replicationGroupId") is not None:
        args.not_applicable("member of a replication group, judged there")
    enabled = flag(get(args.props, "transitEncryptionEnabled"))
    if enabled is not True and enabled is not UNKNOWN:
        report(f"{where}: transitEncryptionEnabled is not true; clients could connect without TLS")
        return
    mode = get(args.props, "transitEncryptionMode")
    if isinstance(mode, str) and mode.lower() == "preferred":
        report(f"{where}: transitEncryptionMode \"preferred\" still accepts plaintext; use \"required\"")


elasticache_encrypted_in_transit = resource_rule(
    name="elasticache-encrypted-in-transit",
    description="ElastiCache replication groups and clusters require TLS from clients.",
    applies=CACHE_GROUPS | CACHE_CLUSTERS | SERVERLESS_CACHES,
    check=_check_cache_transit,
    framework=iso("A.8.24", "Use of cryptography: data in transit is encrypted."),
    remediation="Set transit_encryption_enabled=True (and transit_encryption_mode=\"required\").",
    tags=["encryption-in-transit"],
)
