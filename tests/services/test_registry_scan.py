"""The deploy's image-scan step (tests/checks/registry_scan.py) against real services: a
local registry that skopeo reads the manifests and indexes from, and moto's ECR answering
the scans (its scan-finding results set through moto's own API to recorded AWS answers).
What ECR would refuse, moto refuses too: an image it does not hold, a second scan the
same day (LimitExceededException), so a step that asked about the wrong image or started
a scan it did not need fails these tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import requests

from tests.checks import registry_scan, security
from tests.services.oci import push_image
from tests.services.tracking import REGION

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "image_scans"


@pytest.fixture
def ecr(moto_endpoint, monkeypatch):
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # a session of its own, dropped after the test
    client = boto3.client("ecr", region_name=REGION, endpoint_url=moto_endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    yield client
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10)


def hold(ecr, repository: str, digest: str) -> None:
    """The image in ECR under its registry digest (ECR and the registry are one service in AWS)."""
    existing = {r["repositoryName"] for r in ecr.describe_repositories()["repositories"]}
    if repository not in existing:
        ecr.create_repository(repositoryName=repository)
    ecr.put_image(repositoryName=repository, imageDigest=digest, imageManifest=json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": [{
            "digest": digest}]}))


def answer(endpoint: str, fixture: str, repository: str, digest: str) -> None:
    """What ECR answers for repository@digest: a recorded answer, moved to this image."""
    result = json.loads((FIXTURES / fixture).read_text())
    result.update(repositoryName=repository, imageId={"imageDigest": digest})
    requests.post(f"{endpoint}/moto-api/static/ecr/scan-finding-results",
                  json={"results": [result], "region": REGION}, timeout=10).raise_for_status()


def children(registry, repository: str, index: str) -> dict[str, str]:
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{registry.host}/{repository}@{index}"], capture_output=True, check=True)
    return {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"]
            for m in json.loads(raw.stdout)["manifests"]}


def run_step(monkeypatch, registry, ecr, targets, tmp_path, wait: str = "5", platforms=("linux/amd64",)):
    """The step's command as the workflow calls it, with the plan's targets replaced by
    these (the real plan needs every mirror pinned)."""
    monkeypatch.setattr(security, "image_targets", lambda environment, built: targets)
    monkeypatch.setattr(security, "platforms_of", lambda environment: list(platforms))
    markdown = tmp_path / "image-scan.md"
    code = registry_scan.main(["--stack", "prod", "--registry", registry.host, "--platform-images", "{}",
                               "--out", str(tmp_path / "scans"), "--json", str(tmp_path / "image-scan.json"),
                               "--markdown", str(markdown), "--wait-seconds", wait, "--poll-seconds", "1",
                               "--plain-http"], ecr=ecr)
    return code, markdown.read_text()


def test_an_index_is_judged_by_its_image_for_the_pools_platform_and_a_new_finding_fails(
        registries, ecr, moto_endpoint, monkeypatch, tmp_path, capsys):
    _upstream, registry = registries
    python = push_image(tmp_path / "python", registry, "mlplat/prod/mirror/python:3.12", "python")
    training = push_image(tmp_path / "training", registry, "mlplat/prod/training:1", "training",
                          platforms=("linux/amd64",))
    amd64 = children(registry, "mlplat/prod/mirror/python", python.digest)["linux/amd64"]
    # ECR holds the amd64 image (never scanned: pushed before scanning was on) and the
    # training image, scanned on push. Not the arm64 image: a question about it would fail.
    hold(ecr, "mlplat/prod/mirror/python", amd64)
    hold(ecr, "mlplat/prod/training", training.digest)
    ecr.start_image_scan(repositoryName="mlplat/prod/training", imageId={"imageDigest": training.digest})
    answer(moto_endpoint, "python-enhanced-critical.json", "mlplat/prod/mirror/python", amd64)
    answer(moto_endpoint, "training-clean.json", "mlplat/prod/training", training.digest)

    code, summary = run_step(monkeypatch, registry, ecr, [("python", "mlplat/prod/mirror/python", python.digest),
                                                          ("training", "mlplat/prod/training", training.digest)],
                             tmp_path)
    assert code == 1, capsys.readouterr()
    assert summary.startswith("### Image scan: 1 new finding") and "CVE-2024-45491" in summary
    assert "| CRITICAL |" in summary and "2 image manifests" in summary
    kept = sorted(p.name for p in (tmp_path / "scans").iterdir())
    assert kept == sorted([f"python-{amd64[7:19]}.json", f"training-{training.digest[7:19]}.json"])
    # The python image had no scan: one was started (a second today would be refused).
    with pytest.raises(ecr.exceptions.LimitExceededException):
        ecr.start_image_scan(repositoryName="mlplat/prod/mirror/python", imageId={"imageDigest": amd64})
    assert json.loads((tmp_path / "image-scan.json").read_text())


def test_clean_images_pass_and_a_scan_already_done_is_not_started_again(registries, ecr, moto_endpoint,
                                                                        monkeypatch, tmp_path):
    _upstream, registry = registries
    training = push_image(tmp_path / "training", registry, "mlplat/prod/training:1", "training",
                          platforms=("linux/amd64",))
    hold(ecr, "mlplat/prod/training", training.digest)
    ecr.start_image_scan(repositoryName="mlplat/prod/training", imageId={"imageDigest": training.digest})
    answer(moto_endpoint, "training-clean.json", "mlplat/prod/training", training.digest)
    code, summary = run_step(monkeypatch, registry, ecr, [("training", "mlplat/prod/training", training.digest)],
                             tmp_path)
    # Had the step started a scan, moto would have refused it (one a day) and the step said so.
    assert code == 0, summary
    assert summary.startswith("### Image scan: no new findings")


def test_a_scan_that_does_not_finish_is_waited_for_bounded_then_named(registries, ecr, moto_endpoint, monkeypatch,
                                                                      tmp_path, capsys):
    _upstream, registry = registries
    checks = push_image(tmp_path / "checks", registry, "mlplat/prod/checks:1", "checks", platforms=("linux/amd64",))
    hold(ecr, "mlplat/prod/checks", checks.digest)
    ecr.start_image_scan(repositoryName="mlplat/prod/checks", imageId={"imageDigest": checks.digest})
    answer(moto_endpoint, "checks-in-progress.json", "mlplat/prod/checks", checks.digest)
    code, summary = run_step(monkeypatch, registry, ecr, [("checks", "mlplat/prod/checks", checks.digest)], tmp_path,
                             wait="2")
    out = capsys.readouterr().out
    assert code == 2
    # A line each poll for the 2 seconds allowed, then given up on and named.
    assert [line for line in out.splitlines() if line.startswith("checks: the scan of")] == [
        f"checks: the scan of {checks.digest[7:19]} is IN_PROGRESS ({n}s of 2s)" for n in (0, 1)] + [
        f"checks: the scan of {checks.digest[7:19]} is still IN_PROGRESS after 2s"]
    assert summary.startswith("### Image scan: could not run") and "is IN_PROGRESS" in summary


def test_an_index_without_the_pools_platform_is_named_and_the_rest_still_judged(registries, ecr, moto_endpoint,
                                                                               monkeypatch, tmp_path, capsys):
    _upstream, registry = registries
    arm = push_image(tmp_path / "arm", registry, "mlplat/prod/mirror/python:3.12", "python",
                     platforms=("linux/arm64", "linux/s390x"))
    training = push_image(tmp_path / "training", registry, "mlplat/prod/training:1", "training",
                          platforms=("linux/amd64",))
    hold(ecr, "mlplat/prod/training", training.digest)
    ecr.start_image_scan(repositoryName="mlplat/prod/training", imageId={"imageDigest": training.digest})
    answer(moto_endpoint, "training-clean.json", "mlplat/prod/training", training.digest)
    missing = "sha256:" + "e" * 64
    code, summary = run_step(monkeypatch, registry, ecr, [
        ("python", "mlplat/prod/mirror/python", arm.digest), ("training", "mlplat/prod/training", training.digest),
        ("serving", "mlplat/prod/serving", missing)], tmp_path)
    err = capsys.readouterr().err
    assert code == 2
    assert f"python: mlplat/prod/mirror/python@{arm.digest[:19]} holds no image for linux/amd64" in err
    assert "serving: mlplat/prod/serving@sha256:eeeeeeeeeeee: skopeo inspect failed" in err
    # The image that could be judged was, and the summary says what was not.
    assert summary.startswith("### Image scan: no new findings") and "### Not judged" in summary
    assert "holds no image for linux/amd64" in summary


def test_bad_options_are_one_line_and_exit_2(ecr, tmp_path, capsys):
    for argv, said in ((["--platform-images", "{not json"], "--platform-images is not JSON"),
                       (["--platform-images", "{}", "--wait-seconds", "-1"], "--wait-seconds must be"),
                       (["--platform-images", "{}", "--poll-seconds", "nan"], "--poll-seconds")):
        code = registry_scan.main(["--stack", "prod", "--registry", "127.0.0.1:1", "--out", str(tmp_path / "s"),
                                   "--markdown", str(tmp_path / "m.md"), *argv], ecr=ecr)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and said in err[0], err
        assert (tmp_path / "m.md").read_text().startswith("### Image scan: could not run")
