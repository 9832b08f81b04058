"""Who, outside the environment's accounts, a resource policy or a trust policy lets in.

Each Allow statement is evaluated against the request an outsider can make: an authenticated
principal of an account not on the list (and of no trusted organisation), or an anonymous
caller, calling directly (so with no aws:SourceAccount or aws:SourceArn, which AWS sets only on
a service's calls made for a resource's owner). A statement lets the outsider in when its
principal block admits them and every condition in it can hold for such a request. The
conditions that cannot are the ones IAM Access Analyzer also takes as confining access to an
account or organisation:

- aws:PrincipalAccount, kms:CallerAccount, aws:SourceAccount, aws:SourceOwner with the
  accounts on the list (StringEquals and friends; *IfExists does not confine an anonymous
  caller, who has no account);
- aws:PrincipalOrgID with the organisations on the list;
- aws:PrincipalArn and aws:SourceArn with ARNs of the listed accounts (or, for aws:SourceArn,
  S3 bucket ARNs: bucket names are global, and an owned bucket is no one else's).

A value with a wildcard in the account confines nothing, nor does a negated operator or any
other key: aws:SourceIp, aws:SourceVpc(e) and the like can be met from another account.
`NotPrincipal` with Allow is refused outright: it admits everyone not named. AWS service
principals (`logs.amazonaws.com`) are not external access, as Access Analyzer has it: the
service acts for the resource's owner. A federated principal (an OIDC or SAML provider) is
external unless it is a provider of a listed account and a condition names the identity's
subject (`<provider>:sub`), without which any identity the provider vouches for may assume.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .common import UNKNOWN, get, items

ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
IAM_ARN = re.compile(r"^arn:aws[a-z-]*:(?:iam|sts)::(?P<account>[0-9]{12}|\*?):")
ANY_ARN = re.compile(r"^arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(?P<account>[^:]*):")
S3_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::[^*?]+$")

# Positive operators: the key must equal (or match) one of the values.
EQUALS = frozenset({"StringEquals", "StringEqualsIgnoreCase", "StringLike", "ArnEquals", "ArnLike"})
ACCOUNT_KEYS = frozenset({"aws:principalaccount", "kms:calleraccount", "aws:sourceaccount", "aws:sourceowner"})
# Keys an anonymous caller lacks, and keys AWS sets only on a service's calls: with
# ...IfExists such a key stops confining a request that lacks it.
PRINCIPAL_KEYS = frozenset({"aws:principalaccount", "kms:calleraccount", "aws:principalorgid", "aws:principalarn"})
SOURCE_KEYS = frozenset({"aws:sourceaccount", "aws:sourceowner", "aws:sourcearn"})


@dataclass(frozen=True)
class Trust:
    accounts: frozenset[str]
    organizations: frozenset[str]


@dataclass(frozen=True)
class Opening:
    statement: str  # "Statement[2] (Sid)"
    who: str  # what outsider gets in
    actions: str


def statements(document: Any) -> list[Any]:
    value = get(document, "Statement")
    if isinstance(value, Mapping):
        return [value]
    return items(value)


def _listed(value: Any) -> list[Any]:
    if value is None or value is UNKNOWN:
        return []
    return [value] if isinstance(value, (str, bool, int, float, Mapping)) else items(value)


def _account_of(principal: str) -> str | None:
    """The account of an AWS principal (`123456789012`, an IAM/STS ARN); "*" for anyone."""
    if principal == "*":
        return "*"
    if ACCOUNT_ID.match(principal):
        return principal
    match = IAM_ARN.match(principal)
    if match:
        return match["account"] or "*"
    return "*"  # an unrecognised form: assume the worst


def _confining(operator: str, key: str, values: list[Any], trust: Trust, anonymous: bool) -> bool:
    """Whether one condition entry cannot hold for an outsider's direct request."""
    base = operator.split(":", 1)[-1]  # ForAnyValue:StringEquals -> StringEquals
    if operator.startswith("ForAllValues:"):
        return False  # true when the key is absent
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base not in EQUALS or not values:
        return False
    key = key.lower()
    strings = [str(v) for v in values]
    if if_exists and (key in SOURCE_KEYS or (anonymous and key in PRINCIPAL_KEYS)):
        return False
    if key in ACCOUNT_KEYS:
        return all(v in trust.accounts for v in strings)
    if key == "aws:principalorgid":
        return all(v in trust.organizations for v in strings)
    if key in ("aws:principalarn", "aws:sourcearn"):
        def owned(arn: str) -> bool:
            if key == "aws:sourcearn" and S3_ARN.match(arn):
                return True
            match = ANY_ARN.match(arn)
            return bool(match) and match["account"] in trust.accounts
        return all(owned(v) for v in strings)
    return False


def _conditions_confine(condition: Any, trust: Trust, anonymous: bool) -> bool:
    if not isinstance(condition, Mapping):
        return False
    for operator in condition:
        block = get(condition, operator)
        if not isinstance(block, Mapping):
            continue
        for key in block:
            if _confining(str(operator), str(key), _listed(get(block, key)), trust, anonymous):
                return True
    return False


def _names_subject(condition: Any) -> bool:
    """A positive condition on an identity provider's `sub` claim."""
    if not isinstance(condition, Mapping):
        return False
    for operator in condition:
        block = get(condition, operator)
        if isinstance(block, Mapping) and str(operator).removeprefix("ForAnyValue:").removesuffix("IfExists") in EQUALS:
            if any(str(key).lower().endswith(":sub") and _listed(get(block, key)) for key in block):
                return True
    return False


def _outsiders(principal: Any, condition: Any, trust: Trust) -> list[str]:
    """The outsiders a statement's principal block admits and its conditions do not stop."""
    found = []
    if principal == "*":
        principal = {"AWS": "*"}
    if not isinstance(principal, Mapping):
        return ["an unreadable principal"] if principal is not None else []
    for kind in principal:
        for value in _listed(get(principal, kind)):
            value = str(value)
            if kind == "AWS":
                account = _account_of(value)
                if account in trust.accounts:
                    continue
                anonymous = account == "*"
                if _conditions_confine(condition, trust, anonymous):
                    continue
                found.append("anyone (Principal *)" if anonymous else f"account {account} ({value})")
            elif kind == "Federated":
                match = IAM_ARN.match(value)
                if match and match["account"] in trust.accounts and _names_subject(condition):
                    continue
                found.append(f"any identity {value} vouches for")
            elif kind == "CanonicalUser":
                found.append(f"the S3 canonical user {value}")
            # Service principals act for the resource's owner: not external access.
    return found


def openings(document: Any, trust: Trust) -> tuple[list[Opening], list[str]]:
    """What a policy document opens to outsiders, and the statements it refuses outright
    (Allow with NotPrincipal)."""
    opened, refused = [], []
    for i, statement in enumerate(statements(document)):
        if not isinstance(statement, Mapping) or get(statement, "Effect") != "Allow":
            continue
        sid = get(statement, "Sid")
        label = f"Statement[{i}]" + (f" ({sid})" if isinstance(sid, str) and sid else "")
        if get(statement, "NotPrincipal") is not None:
            refused.append(f"{label}: Allow with NotPrincipal admits every principal it does not name")
            continue
        actions = ", ".join(str(a) for a in _listed(get(statement, "Action"))) or \
            f"every action but {', '.join(str(a) for a in _listed(get(statement, 'NotAction')))}"
        for who in _outsiders(get(statement, "Principal"), get(statement, "Condition"), trust):
            opened.append(Opening(label, who, actions))
    return opened, refused
