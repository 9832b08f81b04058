"""ECR's image scan, judged (tests/checks/security.py `images`): recorded answers of
`aws ecr describe-image-scan-findings` (tests/fixtures/image_scans, checked against the ECR
API model botocore ships) for a clean image, a planted HIGH CVE (basic scanning), a
CRITICAL one (enhanced scanning, Amazon Inspector), an image ECR cannot scan, a scan still
in progress and a garbled file. A finding rated HIGH, CRITICAL or not rated fails unless
tests/checks/security_accepted.yaml accepts it for that image until a date; MEDIUM and
below are listed; a scan that has not finished, or a file that is not such an answer, is
one line and exit 2. No network: the answers are files."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checks import security
from tests.checks.security import ScanError, image_targets, load_accepted, read_image_scan, scan_images

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "image_scans"
TODAY = dt.date.today()
CLEAN = FIXTURES / "training-clean.json"  # MEDIUM, LOW and INFORMATIONAL only
HIGH = FIXTURES / "serving-high.json"  # CVE-2024-6387 (openssh) rated HIGH, planted
ENHANCED = FIXTURES / "python-enhanced-critical.json"  # CVE-2024-45491 CRITICAL, one CLOSED, one MEDIUM
IN_PROGRESS = FIXTURES / "checks-in-progress.json"
UNSUPPORTED = FIXTURES / "node-debug-unsupported.json"
GARBLED = FIXTURES / "serving-garbled.json"  # the HIGH answer cut in half
NONE_ACCEPTED = "pip-audit: []\n"


@pytest.fixture()
def nothing_accepted(tmp_path: Path) -> Path:
    path = tmp_path / "accepted.yaml"
    path.write_text(NONE_ACCEPTED)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.checks.security", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


# --- the recorded answers are AWS's shape -------------------------------------------------------

def _conforms(value, shape, at: str) -> list[str]:
    """Where `value` departs from a botocore output shape: unknown members, wrong types,
    values outside an enum. Timestamps as the AWS CLI prints them (ISO 8601) or as numbers."""
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            return [f"{at}: not an object"]
        wrong = [f"{at}.{key}: not in {shape.name}" for key in value if key not in shape.members]
        for key, member in shape.members.items():
            if key in value:
                wrong += _conforms(value[key], member, f"{at}.{key}")
        return wrong
    if kind == "list":
        if not isinstance(value, list):
            return [f"{at}: not a list"]
        return [w for i, item in enumerate(value) for w in _conforms(item, shape.member, f"{at}[{i}]")]
    if kind == "map":
        if not isinstance(value, dict):
            return [f"{at}: not a map"]
        return [w for k, v in value.items() for w in _conforms(k, shape.key, f"{at} key") + _conforms(v, shape.value,
                                                                                                      f"{at}.{k}")]
    if kind == "string":
        if not isinstance(value, str):
            return [f"{at}: not a string"]
        return [f"{at}: {value!r} not in {shape.enum}"] if shape.enum and value not in shape.enum else []
    if kind in ("integer", "long"):
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{at}: not an integer"]
    if kind in ("double", "float"):
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [f"{at}: not a number"]
    if kind == "boolean":
        return [] if isinstance(value, bool) else [f"{at}: not a boolean"]
    if kind == "timestamp":
        if isinstance(value, (int, float)):
            return []
        try:
            dt.datetime.fromisoformat(value)
            return []
        except (TypeError, ValueError):
            return [f"{at}: {value!r} is not a timestamp"]
    return [f"{at}: unexpected shape type {kind}"]


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json") if "garbled" not in p.name))
def test_the_recorded_answers_follow_the_ecr_api_model(fixture):
    botocore = pytest.importorskip("botocore.session")
    output = botocore.get_session().get_service_model("ecr").operation_model("DescribeImageScanFindings").output_shape
    data = json.loads((FIXTURES / fixture).read_text())
    assert _conforms(data, output, "answer") == []
    assert data["repositoryName"].startswith("mlplat/prod/")


def test_the_shape_check_itself_catches_a_departure():
    botocore = pytest.importorskip("botocore.session")
    output = botocore.get_session().get_service_model("ecr").operation_model("DescribeImageScanFindings").output_shape
    data = json.loads(HIGH.read_text())
    data["imageScanFindings"]["findings"][0]["severity"] = "SEVERE"
    data["imageScanFindings"]["findings"][0]["packageName"] = "openssh"
    assert len(_conforms(data, output, "answer")) == 2


# --- judged ---------------------------------------------------------------------------------------

def test_a_clean_image_passes_and_lists_what_is_below_high(nothing_accepted, tmp_path):
    verdict = scan_images([CLEAN], nothing_accepted)
    assert not verdict.failed and verdict.new == []
    assert sorted(f.severity for f in verdict.listed) == ["INFORMATIONAL", "LOW", "MEDIUM"]
    [scan] = verdict.scans
    assert (scan.image, scan.kind, scan.status) == ("training", "basic", "COMPLETE")
    assert scan.completed.startswith("2026-11-24T09:14")
    done = run_cli("images", "--findings", str(CLEAN), "--accepted", str(nothing_accepted),
                   "--markdown", str(tmp_path / "scan.md"))
    assert done.returncode == 0, done.stdout + done.stderr
    markdown = (tmp_path / "scan.md").read_text()
    assert markdown.startswith("### Image scan: no new findings\n")
    assert "3 findings below HIGH (listed, not failing)" in markdown and "CVE-2024-26462" in markdown


def test_a_planted_high_cve_fails_and_is_listed_in_the_markdown(nothing_accepted, tmp_path):
    done = run_cli("images", "--findings", str(CLEAN), str(HIGH), "--accepted", str(nothing_accepted),
                   "--json", str(tmp_path / "scan.json"), "--markdown", str(tmp_path / "scan.md"))
    assert done.returncode == 1, done.stdout + done.stderr
    markdown = (tmp_path / "scan.md").read_text()
    assert markdown.splitlines()[0] == "### Image scan: 1 new finding"
    [row] = [line for line in markdown.splitlines() if "CVE-2024-6387" in line]
    assert "`serving@sha256:" in row and "| HIGH |" in row and "openssh 1:9.6p1-3ubuntu13" in row
    assert "(https://ubuntu.com/security/CVE-2024-6387)" in row
    assert markdown.index("CVE-2024-6387") < markdown.index("<details>")  # the new finding comes first
    report = json.loads((tmp_path / "scan.json").read_text())
    [new] = report["new"]
    assert (new["rule"], new["image"], new["severity"]) == ("CVE-2024-6387", "serving", "HIGH")
    assert {s["image"] for s in report["scans"]} == {"training", "serving"}
    assert "NEW image CVE-2024-6387 HIGH serving@sha256:" in done.stdout


def test_an_enhanced_critical_finding_fails_a_closed_one_is_gone_and_a_medium_one_is_listed(nothing_accepted):
    verdict = scan_images([ENHANCED], nothing_accepted)
    [(finding, expired)] = verdict.new
    assert (finding.rule, finding.severity, finding.image, expired) == ("CVE-2024-45491", "CRITICAL", "python", None)
    assert finding.package == "expat 2.5.0-1" and finding.fix == ("2.5.0-1+deb12u1",)
    assert "CVE-2023-52425" not in {f.rule for f in verdict.listed}  # CLOSED: Inspector no longer finds it
    [medium] = verdict.listed
    assert medium.rule == "CVE-2023-5752" and medium.ids == ("CVE-2023-5752", "GHSA-mq26-g339-26xf")
    assert verdict.scans[0].kind == "enhanced" and verdict.scans[0].status == "ACTIVE"


def _accepting(tmp_path: Path, image: str, vulnerability: str, expires: dt.date) -> Path:
    path = tmp_path / "accepted.yaml"
    path.write_text(f"""
images:
  {image}:
    - id: {vulnerability}
      reason: planted for the test; sshd is not started in the serving image
      expires: {expires.isoformat()}
""")
    return path


def test_an_accepted_finding_passes_until_its_acceptance_expires(tmp_path):
    accepted = _accepting(tmp_path, "serving", "CVE-2024-6387", TODAY)
    verdict = scan_images([HIGH], accepted, today=TODAY)
    assert not verdict.failed and [f.rule for f, _ in verdict.accepted] == ["CVE-2024-6387"]
    assert "| HIGH |" in security.as_markdown(verdict)  # still shown, in the accepted table

    lapsed = scan_images([HIGH], accepted, today=TODAY + dt.timedelta(days=1))
    [(finding, expired)] = lapsed.new
    assert lapsed.failed and finding.rule == "CVE-2024-6387" and expired.expires == TODAY
    assert f"its acceptance expired on {TODAY.isoformat()}" in security.as_markdown(lapsed)


def test_an_acceptance_holds_for_its_own_image_only(tmp_path):
    accepted = _accepting(tmp_path, "training", "CVE-2024-6387", TODAY + dt.timedelta(days=30))
    verdict = scan_images([HIGH, CLEAN], accepted, today=TODAY)
    assert [f.image for f, _ in verdict.new] == ["serving"]
    # The training image was scanned and does not have it: noted, not failing.
    assert [a.where for a in verdict.unmatched_images] == [("training",)]
    assert "note: image acceptance CVE-2024-6387 in image training matched nothing" in security.as_text(verdict)


def test_an_acceptance_matches_a_related_id_of_an_enhanced_finding(tmp_path):
    data = json.loads(ENHANCED.read_text())
    data["imageScanFindings"]["enhancedFindings"][0]["packageVulnerabilityDetails"]["relatedVulnerabilities"] = [
        "GHSA-0000-1111-2222"]
    answer = tmp_path / "python.json"
    answer.write_text(json.dumps(data))
    verdict = scan_images([answer], _accepting(tmp_path, "python", "GHSA-0000-1111-2222", TODAY), today=TODAY)
    assert verdict.new == [] and [f.rule for f, _ in verdict.accepted] == ["CVE-2024-45491"]


def test_an_image_the_registry_cannot_scan_fails_unless_accepted(nothing_accepted, tmp_path):
    verdict = scan_images([UNSUPPORTED], nothing_accepted)
    [(finding, _)] = verdict.new
    assert (finding.rule, finding.severity, finding.image) == ("UNSUPPORTED_IMAGE", "UNSCANNED", "node-debug")
    assert "UnsupportedImageError" in finding.what
    accepted = _accepting(tmp_path, "node-debug", "UNSUPPORTED_IMAGE", TODAY)
    assert not scan_images([UNSUPPORTED], accepted, today=TODAY).failed


def test_a_rating_nobody_gave_fails_like_high(nothing_accepted, tmp_path):
    data = json.loads(HIGH.read_text())
    data["imageScanFindings"]["findings"][0]["severity"] = "UNDEFINED"
    answer = tmp_path / "serving.json"
    answer.write_text(json.dumps(data))
    [(finding, _)] = scan_images([answer], nothing_accepted).new
    assert finding.severity == "UNDEFINED"


# --- bad input: one line, exit 2 -------------------------------------------------------------------

def test_a_scan_not_complete_is_one_line_and_exit_2(nothing_accepted, tmp_path):
    done = run_cli("images", "--findings", str(CLEAN), str(IN_PROGRESS), "--accepted", str(nothing_accepted),
                   "--markdown", str(tmp_path / "scan.md"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "mlplat/prod/checks@sha256:" in done.stderr and "is IN_PROGRESS" in done.stderr
    assert "aws ecr wait image-scan-complete" in done.stderr
    assert (tmp_path / "scan.md").read_text().startswith("### Image scan: could not run")


def test_a_garbled_file_is_one_line_and_exit_2(nothing_accepted):
    done = run_cli("images", "--findings", str(GARBLED), "--accepted", str(nothing_accepted))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{GARBLED}: not JSON" in done.stderr


def _variant(tmp_path: Path, change) -> Path:
    data = json.loads(HIGH.read_text())
    change(data)
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(data))
    return path


def _file(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "answer.json"
    path.write_bytes(content)
    return path


BAD = {
    "missing": (lambda tmp: tmp / "absent.json", "cannot be read"),
    "binary": (lambda tmp: _file(tmp, b"\xff\xfe\x00\x9c"), "not JSON"),
    "empty": (lambda tmp: _file(tmp, b""), "not JSON"),
    "another answer": (lambda tmp: _file(tmp, b'{"images": []}'), "not a describe-image-scan-findings answer"),
    "a tag, not a digest": (lambda tmp: _variant(tmp, lambda d: d.update(imageId={"imageTag": "0.1.0"})),
                            "is not a sha256 digest"),
    "a repository outside the plan": (lambda tmp: _variant(tmp, lambda d: d.update(repositoryName="team/app")),
                                      "'team/app' is not one of the registry plan's"),
    "a platform image as a mirror": (
        lambda tmp: _variant(tmp, lambda d: d.update(repositoryName="mlplat/prod/mirror/serving")),
        "is not one of the registry plan's"),
    "one page of several": (lambda tmp: _variant(tmp, lambda d: d.update(nextToken="eyJ0b2tlbiI6IDJ9")),
                            "one page of the findings"),
    "fewer findings than ECR counts": (
        lambda tmp: _variant(tmp, lambda d: d["imageScanFindings"]["findingSeverityCounts"].update(HIGH=120)),
        "ECR counts 123 findings"),
    "a finding without its id": (
        lambda tmp: _variant(tmp, lambda d: d["imageScanFindings"]["findings"][0].pop("name")),
        "findings[0] has no name"),
    "findings not a list": (lambda tmp: _variant(tmp, lambda d: d["imageScanFindings"].update(findings={})),
                            "imageScanFindings.findings is not a list"),
    "complete without its findings": (lambda tmp: _variant(tmp, lambda d: d.pop("imageScanFindings")),
                                      "has no imageScanFindings"),
    "failed": (lambda tmp: _variant(tmp, lambda d: d.update(imageScanStatus={"status": "FAILED"})), "is FAILED"),
    "active but never completed": (
        lambda tmp: _variant(tmp, lambda d: (d.update(imageScanStatus={"status": "ACTIVE"}),
                                             d["imageScanFindings"].pop("imageScanCompletedAt"))),
        "is ACTIVE"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_no_complete_answer_is_one_line(case, tmp_path):
    make, expected = BAD[case]
    path = make(tmp_path)
    with pytest.raises(ScanError) as raised:
        read_image_scan(path)
    message = str(raised.value)
    assert expected in message and "\n" not in message and str(path) in message


IMAGES_MALFORMED = {
    "an unknown image": ("images:\n  trainng:\n    - {id: CVE-2024-1, reason: a reason of five words, "
                         "expires: 2030-01-01}\n", "'trainng' is not an image of the registry plan; did you mean "
                                                   "'training'?"),
    "not a mapping": ("images:\n  - training\n", "images must map an image name"),
    "no entries": ("images:\n  training: []\n", "images: training: must be a list of entries"),
    "an id with spaces": ("images:\n  training:\n    - {id: CVE 2024 1, reason: a reason of five words, "
                          "expires: 2030-01-01}\n", "id must be one vulnerability id"),
    "no expiry": ("images:\n  training:\n    - {id: CVE-2024-1, reason: a reason of five words}\n",
                  "images: training[0]: expires is missing"),
    "a misspelt key": ("images:\n  training:\n    - {cve: CVE-2024-1, reason: a reason of five words, "
                       "expires: 2030-01-01}\n", "unknown key 'cve'"),
}


@pytest.mark.parametrize("case", sorted(IMAGES_MALFORMED))
def test_a_malformed_images_section_is_one_line(case, tmp_path):
    text, expected = IMAGES_MALFORMED[case]
    path = tmp_path / "accepted.yaml"
    path.write_text(text)
    with pytest.raises(ScanError) as raised:
        load_accepted(path)
    assert expected in str(raised.value) and "\n" not in str(raised.value)


def test_no_findings_files_is_refused(nothing_accepted):
    with pytest.raises(ScanError, match="no scan findings given"):
        scan_images([], nothing_accepted)


# --- what the deploy scans ---------------------------------------------------------------------------

def test_the_targets_are_every_mirror_at_its_pin_and_every_platform_image_as_built(monkeypatch):
    import infra.versions as versions

    pin = "sha256:" + "a" * 64
    built = "sha256:" + "b" * 64
    plan = {
        "python": versions.Image("python", "docker.io/library/python", "3.11", pin),
        "checks": versions.Image("checks", "workloads/images/checks.Dockerfile", "0.1.0", built_here=True,
                                 base="python"),
    }
    monkeypatch.setattr(versions, "IMAGES", plan)
    assert image_targets("prod", {"checks": f"0.1.0-abc@{built}"}) == [
        ("python", "mlplat/prod/mirror/python", pin), ("checks", "mlplat/prod/checks", built)]
    with pytest.raises(ScanError, match="platform image\\(s\\) checks have no tag@digest"):
        image_targets("prod", {})
    with pytest.raises(ScanError, match="'trainer', which is not a platform image"):
        image_targets("prod", {"trainer": f"0.1.0@{built}"})
    plan["kueue"] = versions.Image("kueue", "registry.k8s.io/kueue/kueue", "v0.18.2")  # not pinned
    with pytest.raises(ScanError, match="image\\(s\\) kueue have no digest"):
        image_targets("prod", {"checks": f"0.1.0-abc@{built}"})


def test_the_targets_are_the_environments_own_sites_images(monkeypatch):
    """An AWS environment judges no customer-only image (it never mirrors or runs one), and
    a customer's environment no AWS-only one."""
    import infra.versions as versions

    pin = "sha256:" + "a" * 64
    plan = {
        "python": versions.Image("python", "docker.io/library/python", "3.11", pin),
        "doca-driver": versions.Image("doca-driver", "nvcr.io/nvidia/mellanox/doca-driver", "26.4",
                                      sites=versions.CUSTOMER_ONLY),  # not pinned: judging it would fail
        "fsx": versions.Image("fsx", "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver", "v1.8.0", pin,
                              sites=versions.AWS_ONLY),
    }
    monkeypatch.setattr(versions, "IMAGES", plan)
    assert image_targets("prod", {}) == [("python", "mlplat/prod/mirror/python", pin),
                                         ("fsx", "mlplat/prod/mirror/fsx", pin)]
    with pytest.raises(ScanError, match="image\\(s\\) doca-driver have no digest"):
        image_targets("onprem", {})


def test_the_targets_command_is_one_line_and_exit_2_on_bad_input():
    done = run_cli("image-targets", "--stack", "prod", "--platform-images", "{not json")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is not JSON" in done.stderr, done.stderr
    done = run_cli("image-targets", "--stack", "nowhere", "--platform-images", "{}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


def test_the_platforms_are_those_the_node_pools_run():
    from infra.catalog import lookup
    from infra.config import load_stack

    config = load_stack("prod")
    assert security.platforms_of("prod") == sorted({lookup(p.instance_type).platform for p in config.node_pools})
    assert all(p.startswith("linux/") for p in security.platforms_of("prod"))
