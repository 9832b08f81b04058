"""The red team's corpus: programs that try to get past the pack, each previewed as prod with
prod's policy config (`mlplat preview --stack prod --program FILE`), each refused by exactly the
rule meant for it; and compliant look-alikes in AWS's and Kubernetes' documented shapes, which
must pass. One goes through the command line; the rest share one pack process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.cli import main
from infra.preview.analyzer import PolicyPackProcess
from infra.preview.engine import load_program, run_preview

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "redteam"
PSS = "k8s-pod-security-standards"

# attempt -> the rule (or rules) that must refuse it, and nothing else
ATTEMPTS: dict[str, str | tuple[str, ...]] = {
    "image_from_another_account.py": "k8s-images-from-allowed-registries",
    "operator_image_from_another_account.py": "k8s-images-from-allowed-registries",
    # The namespace and the pod in it are two attempts in one program: each its own rule.
    "namespace_without_pod_security.py": ("k8s-namespaces-enforce-pod-security", PSS),
    "init_container_kubelet_hostpath.py": PSS,
    "impersonated_system_daemonset.py": PSS,
    "tls_deny_names_another_bucket.py": "s3-buckets-tls-only",
    "tls_deny_narrowed.py": "s3-buckets-tls-only",
    "backup_copy_abroad.py": "no-data-paths-abroad",
    "eventbridge_target_abroad.py": "no-data-paths-abroad",
    "logs_subscription_abroad.py": "no-data-paths-abroad",
    "provider_endpoint_abroad.py": "no-data-paths-abroad",
    "endpoint_abroad_in_capitals.py": "no-data-paths-abroad",
    "region_escaped_in_json.py": "no-data-paths-abroad",
    "sovereign_cloud_queue.py": "no-data-paths-abroad",
    "lambda_url_abroad.py": "no-data-paths-abroad",
    "s3_legacy_endpoint_abroad.py": "no-data-paths-abroad",
    "cache_endpoint_abroad.py": "no-data-paths-abroad",
    "key_open_to_everyone.py": "no-external-access",
    "bucket_policy_another_account.py": "no-external-access",
    "bucket_policy_not_principal.py": "no-external-access",
    "queue_open_to_everyone.py": "no-external-access",
    "repository_pull_by_another_account.py": "no-external-access",
    "role_trust_of_an_unknown_account.py": "no-external-access",
    "privilege_escalation_unset.py": PSS,
    "host_port.py": PSS,
    "runtime_socket_hostpath.py": PSS,
    "net_raw_kept.py": PSS,
    "seccomp_on_one_container_of_two.py": PSS,
    "token_mounted_by_default.py": "k8s-service-account-tokens-where-needed",
    "workload_in_default_namespace.py": "k8s-no-workloads-in-default-namespace",
    "malformed_digest.py": "k8s-images-pinned",
    "sns_subscription_by_email.py": "no-data-paths-abroad",
    "pod_endpoint_abroad.py": "no-data-paths-abroad",
    "vpc_endpoint_to_another_region.py": "no-data-paths-abroad",
    "private_subnet_straight_to_nat.py": "no-open-internet-egress",
}
LOOK_ALIKES = sorted(p.name for p in (CORPUS / "compliant").glob("*.py"))


@pytest.fixture(scope="module")
def pack():
    process = PolicyPackProcess()
    yield process
    process.close()


def verdict(program: Path, pack: PolicyPackProcess):
    result = run_preview("prod", program=load_program(program), pack=pack)
    assert result.engine_errors == []
    return result.verdict


def test_every_attempt_in_the_corpus_has_an_expectation():
    assert {p.name for p in CORPUS.glob("*.py")} == set(ATTEMPTS)
    assert len(LOOK_ALIKES) >= 5


@pytest.mark.parametrize(("program", "rules"), sorted(ATTEMPTS.items()))
def test_each_attempt_is_refused_by_its_rule(program, rules, pack):
    expected = {rules} if isinstance(rules, str) else set(rules)
    found = verdict(CORPUS / program, pack)
    assert {v.policy for v in found.violations} == expected, [(v.policy, v.message) for v in found.violations]
    assert all(v.level == "mandatory" for v in found.violations)


@pytest.mark.parametrize("program", LOOK_ALIKES)
def test_each_look_alike_passes(program, pack):
    found = verdict(CORPUS / "compliant" / program, pack)
    assert [(v.policy, v.message) for v in found.violations] == []


def test_an_attempt_through_the_command_line(tmp_path, capsys):
    report = tmp_path / "report.json"
    code = main(["preview", "--stack", "prod", "--program", str(CORPUS / "image_from_another_account.py"),
                 "--json", str(report), "--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert "k8s-images-from-allowed-registries (mandatory):" in out and "999999999999" in out
    assert {v["policy"] for v in json.loads(report.read_text())["violations"]} == {"k8s-images-from-allowed-registries"}
