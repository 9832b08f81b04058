"""Deliberately non-compliant programs, previewed offline as a user would with
`mlplat preview --stack dev --program FILE`: each is blocked (exit 1) by exactly the rule
it breaks, and the JSON report names that rule for the offending resource."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from platform_policies import ALL_POLICIES

from infra.cli import main
from infra.preview.analyzer import PolicyPackProcess
from infra.preview.engine import load_program, run_preview
from tests.stack.test_redteam import ATTEMPTS

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs"

# fixture program -> the rule it breaks (or the rules: a replica abroad is both a
# cross-region copy and a global table)
EXPECTED: dict[str, str | tuple[str, ...]] = {
    "bucket_outside_region.py": "aws-resources-in-allowed-regions",
    "az_outside_region.py": "availability-zones-in-allowed-regions",
    "dynamodb_replica_abroad.py": ("no-cross-region-replication", "dynamodb-single-region-tables"),
    "dynamodb_table_replica.py": "dynamodb-single-region-tables",
    "multi_region_key.py": "kms-keys-single-region",
    "transfer_acceleration.py": "no-global-edge-data-paths",
    "bucket_sse_s3.py": "s3-buckets-encrypted-with-cmk",
    "unencrypted_volume.py": "block-storage-encrypted-with-cmk",
    "lustre_scratch.py": "file-systems-encrypted-with-cmk",
    "eks_secrets_plain.py": "eks-secrets-encrypted-with-cmk",
    "log_group_plain.py": "logs-encrypted-with-cmk",
    "ecr_aes256.py": "registries-encrypted-with-cmk",
    "dynamodb_default_key.py": "databases-encrypted-with-cmk",
    "sqs_managed_sse.py": "messaging-encrypted-with-cmk",
    "key_without_rotation.py": "kms-keys-rotate",
    "bucket_without_tls_policy.py": "s3-buckets-tls-only",
    "http_listener.py": "load-balancer-listeners-tls",
    "cache_plaintext.py": "elasticache-encrypted-in-transit",
    "bucket_public_access.py": "s3-public-access-settings",
    "bucket_without_access_block.py": "s3-buckets-block-public-access",
    "ssh_from_anywhere.py": "no-world-open-ports",
    "public_database.py": "databases-private-and-tls",
    "secret_default_key.py": "secrets-encrypted-with-cmk",
    "https_to_nodes.py": "no-world-open-ingress",
    "public_eks_endpoint.py": "eks-endpoint-private",
    "public_subnet_nodes.py": "no-public-ips-on-nodes",
    "image_from_docker_hub.py": "k8s-images-from-allowed-registries",
    "image_latest.py": "k8s-images-pinned",
    "chart_from_upstream.py": "k8s-charts-from-allowed-registries",
    "container_without_limits.py": "k8s-containers-have-limits",
    "gpu_pod_without_toleration.py": "k8s-gpu-pods-use-limits-and-tolerate-taint",
    "privileged_daemonset.py": "k8s-pod-security-standards",
    "root_workload.py": "k8s-pod-security-standards",
    "added_capability.py": "k8s-pod-security-standards",
    "untagged_volume.py": "storage-and-compute-tagged",
    "feature_server_exposed.py": "feature-server-in-cluster",
}
# Previewed with a customer's cluster's policy config (the rules judge only there).
CUSTOMER_CONFIG = Path(__file__).resolve().parents[2] / "policies" / "config" / "onprem.json"
EXPECTED_ON_CUSTOMER_CLUSTER: dict[str, str] = {
    "customer_aws_resource.py": "no-aws-resources-on-customer-cluster",
    "customer_http_object_store.py": "object-store-endpoints-allowed",
    "customer_load_balancer.py": "nothing-exposed-outside-the-cluster",
    "customer_encryption_unnamed.py": "object-store-encryption-named",
    "customer_encryption_unstated.py": "object-store-encryption-stated",
}


def test_every_rule_has_a_fixture_and_every_fixture_an_expectation():
    named = {r for rules in EXPECTED.values() for r in ((rules,) if isinstance(rules, str) else rules)}
    named |= set(EXPECTED_ON_CUSTOMER_CLUSTER.values())
    # Rules whose only fixtures are the red team's attempts (tests/stack/test_redteam.py).
    named |= {r for rules in ATTEMPTS.values() for r in ((rules,) if isinstance(rules, str) else rules)}
    assert sorted(named) == sorted(p.name for p in ALL_POLICIES)
    programs = {p.name for p in PROGRAMS.glob("*.py") if not p.name.startswith("_")}
    # default_provider.py is an engine error, covered in test_preview_cli.py
    assert programs - {"default_provider.py"} == set(EXPECTED) | set(EXPECTED_ON_CUSTOMER_CLUSTER)


@pytest.fixture(scope="module")
def pack():
    process = PolicyPackProcess()
    yield process
    process.close()


@pytest.mark.parametrize(("program", "rule"), sorted(EXPECTED.items()) + sorted(EXPECTED_ON_CUSTOMER_CLUSTER.items()))
def test_fixture_is_blocked_by_its_rule(program, rule, pack):
    """Each program in one pack process, as `mlplat preview --stack dev --program FILE` runs it."""
    rules = {rule} if isinstance(rule, str) else set(rule)
    customer = CUSTOMER_CONFIG if program in EXPECTED_ON_CUSTOMER_CLUSTER else None
    result = run_preview("dev", program=load_program(PROGRAMS / program), pack=pack, policy_config=customer)
    assert result.engine_errors == []
    verdict = result.verdict
    assert {v.policy for v in verdict.violations} == rules, [(v.policy, v.message) for v in verdict.violations]
    assert all(v.level == "mandatory" and v.urn for v in verdict.violations)
    assert all(verdict.failed.get(one) for one in rules)


@pytest.mark.parametrize(("program", "rule"), [("privileged_daemonset.py", "k8s-pod-security-standards"),
                                               ("customer_load_balancer.py", "nothing-exposed-outside-the-cluster")])
def test_a_fixture_through_the_command_line(program, rule, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    customer = ["--policy-config", str(CUSTOMER_CONFIG)] if program in EXPECTED_ON_CUSTOMER_CLUSTER else []
    code = main(["preview", "--stack", "dev", "--program", str(PROGRAMS / program), "--json", str(report_path),
                 "--quiet", *customer])
    out = capsys.readouterr().out
    assert code == 1, out
    report = json.loads(report_path.read_text())
    assert report["engineErrors"] == []
    assert {v["policy"] for v in report["violations"]} == {rule}
    assert f"{rule} (mandatory):" in out
    assert {row["policy"]: row for row in report["policies"]}[rule]["failed"] >= 1
