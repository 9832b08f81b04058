"""`mlplat bootstrap`'s documents: whom the deployer and the preview role trust, claim by
claim as STS compares them (StringEquals exactly, StringLike with * and ?), and what the
roles may do outside the region."""

from __future__ import annotations

import fnmatch

import pytest

from infra.bootstrap import (GITHUB_OIDC, GLOBAL_SERVICES, BootstrapError, Plan, deployer_trust, make_plan,
                             preview_trust, region_fence)
from infra.config import load_stack

PLAN = Plan("111122223333", "me-central-1", "mlplat/mlplat", ("staging", "prod"))
MAIN = "refs/heads/main"


def subject(environment: str, workflow: str = "deploy-environment.yml", ref: str = MAIN,
            repository: str = "mlplat/mlplat") -> str:
    """GitHub's subject claim with the repository's template: repo, context, job_workflow_ref."""
    return (f"repo:{repository}:environment:{environment}:job_workflow_ref:"
            f"{repository}/.github/workflows/{workflow}@{ref}")


def admits(trust: dict, claims: dict[str, str]) -> bool:
    """Whether a web-identity request with these claims meets the one statement's conditions."""
    [statement] = trust["Statement"]
    assert statement["Principal"] == {"Federated": PLAN.oidc_provider_arn}
    for operator, keys in statement["Condition"].items():
        for key, wanted in keys.items():
            wanted = wanted if isinstance(wanted, list) else [wanted]
            value = claims.get(key.removeprefix(f"{GITHUB_OIDC}:"))
            if value is None:
                return False
            match = {"StringEquals": lambda w, v=value: v == w,
                     "StringLike": lambda w, v=value: fnmatch.fnmatchcase(v, w)}[operator]
            if not any(match(w) for w in wanted):
                return False
    return True


@pytest.mark.parametrize("claims, expected", [
    ({"aud": "sts.amazonaws.com", "sub": subject("prod")}, True),
    ({"aud": "sts.amazonaws.com", "sub": subject("staging")}, True),
    # The same workflow from another branch, a pull request's ref, or a tag.
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", ref="refs/heads/feature")}, False),
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", ref="refs/pull/7/merge")}, False),
    # Another workflow of the repository on main (the preview, or one a contributor adds).
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", workflow="preview.yml")}, False),
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", workflow="deploy-environment.yml.evil")}, False),
    # An environment this account does not deploy; another repository; another audience.
    ({"aud": "sts.amazonaws.com", "sub": subject("dev")}, False),
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", repository="mlplat/mlplat-fork")}, False),
    ({"aud": "https://github.com/mlplat", "sub": subject("prod")}, False),
    # GitHub's default subject (the template not customised): no workflow named.
    ({"aud": "sts.amazonaws.com", "sub": "repo:mlplat/mlplat:environment:prod"}, False),
])
def test_the_deployer_trusts_only_the_deploy_workflow_on_main(claims, expected):
    assert admits(deployer_trust(PLAN), claims) is expected
    # Exact subjects only: a pattern would let a look-alike through.
    assert "StringLike" not in deployer_trust(PLAN)["Statement"][0]["Condition"]


@pytest.mark.parametrize("claims, expected", [
    ({"aud": "sts.amazonaws.com", "sub": subject("preview", "preview.yml", "refs/pull/7/merge")}, True),
    ({"aud": "sts.amazonaws.com", "sub": subject("preview", "preview.yml", MAIN)}, True),
    ({"aud": "sts.amazonaws.com", "sub": subject("prod", "preview.yml", "refs/pull/7/merge")}, False),
    ({"aud": "sts.amazonaws.com", "sub": subject("preview", "deploy-environment.yml")}, False),
    ({"aud": "sts.amazonaws.com", "sub": subject("preview", "preview.yml", "refs/pull/7/merge", "evil/mlplat")},
     False),
])
def test_the_preview_role_trusts_the_pull_request_workflow_in_its_environment(claims, expected):
    assert admits(preview_trust(PLAN), claims) is expected


def test_the_roles_act_only_in_the_region_except_for_global_services():
    [deny] = region_fence(PLAN)["Statement"]
    assert deny["Effect"] == "Deny" and deny["Resource"] == "*"
    assert deny["Condition"] == {"StringNotEquals": {"aws:RequestedRegion": "me-central-1"}}
    assert {"iam:*", "sts:*"} <= set(deny["NotAction"]) == set(GLOBAL_SERVICES)
    # No regional service of the platform is exempt.
    assert not {"s3:*", "kms:*", "ec2:*", "eks:*", "ecr:*", "backup:*", "logs:*"} & set(deny["NotAction"])


def test_the_plan_takes_the_repository_from_the_stack_files():
    plan = make_plan("111122223333", "me-central-1", ["prod", "prod"], None, load_stack)
    assert (plan.repository, plan.environments) == ("mlplat/mlplat", ("prod",))
    assert plan.secrets_provider == "awskms://alias/mlplat-state-secrets?region=me-central-1"
    # Every AWS stack file names exactly this provider for its state secrets.
    import yaml

    from infra.config import STACKS_DIR

    for path in STACKS_DIR.glob("Pulumi.*.yaml"):
        if path.name != "Pulumi.onprem.yaml":
            assert yaml.safe_load(path.read_text())["secretsprovider"] == plan.secrets_provider, path.name


def test_a_cluster_layer_is_no_environment_to_bootstrap():
    with pytest.raises(BootstrapError, match=r"^--environment prod-cluster: "):
        make_plan("111122223333", "me-central-1", ["prod-cluster"], None, load_stack)
