"""The security scan (tests/checks/security.py): the real pip-audit and bandit find nothing
that tests/checks/security_accepted.yaml does not accept; a planted finding, an expired
acceptance and a stale one fail; a malformed accepted-findings file and an advisory
service that can't be reached are one line and exit 2."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checks import security
from tests.checks.security import Acceptance, Finding, ScanError, affects, judge, load_accepted
from tests.services.oci import closed_port

REPO = Path(__file__).resolve().parents[2]
TODAY = dt.date.today()

# Two findings bandit must report, one of them behind a `# nosec` that must not hide it.
PLANTED_CODE = """\
import subprocess

import yaml


def run(command):
    subprocess.call(command, shell=True)  # nosec - a comment must not accept a finding
    return yaml.load(command)
"""
# Jinja2 2.10: CVE-2019-10906 (PYSEC-2019-217, a sandbox escape, fixed in 2.10.1), in the
# committed snapshot and in OSV.
PLANTED_PIN = "jinja2==2.10\n"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.checks.security", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def project() -> security.Verdict:
    return security.scan()


@pytest.fixture()
def planted(tmp_path: Path) -> tuple[Path, Path]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "planted.py").write_text(PLANTED_CODE)
    pins = tmp_path / "requirements.txt"
    pins.write_text(PLANTED_PIN)
    return code, pins


# --- the project itself ---------------------------------------------------------------------

def test_the_project_has_no_unaccepted_findings(project):
    assert not project.failed, security.as_text(project)


def test_both_tools_really_ran_over_the_project(project):
    assert set(project.sources) == {"pip-audit", "bandit"}
    assert "PyPA advisory database at" in project.sources["pip-audit"]
    # Every environment's packages were audited, not skipped (the project's own, editable, is).
    for venv in security.AUDITED_VENVS:
        assert int(re.search(rf"{re.escape(venv)} \((\d+) packages\)", project.sources["pip-audit"])[1]) > 50
    assert int(project.sources["bandit"].split()[0]) > 100
    # Accepted findings were found this run (none is accepted unseen).
    assert {f.tool for f, _ in project.accepted} == {"bandit"}
    assert not any(f.path.startswith(("tests/", ".venv")) for f, _ in project.accepted if f.tool == "bandit")


def test_the_real_accepted_findings_file_loads():
    entries = load_accepted()
    assert {e.tool for e in entries} == {"bandit", "image"}
    assert all(len(e.reason) > 60 for e in entries)
    # The images triaged before a first bring-up: each an image of the AWS plan.
    from infra.versions import plan_images

    triaged = {e.where[0] for e in entries if e.tool == "image"}
    assert triaged and triaged <= set(plan_images("aws"))


# --- planted findings -----------------------------------------------------------------------

def test_a_planted_finding_in_our_code_fails(planted):
    code, _ = planted
    verdict = security.scan(code=[code], tools=("bandit",))
    new = {(f.rule, f.where.rsplit("/", 1)[-1]) for f, _ in verdict.new}
    assert {("B602", "planted.py:7"), ("B506", "planted.py:8")} <= new
    assert verdict.failed


def test_a_planted_vulnerable_pin_fails(planted):
    _, pins = planted
    verdict = security.scan(requirements=pins, venvs=[], tools=("pip-audit",))
    [finding] = [f for f, _ in verdict.new if "CVE-2019-10906" in f.ids]
    assert finding.package.lower() == "jinja2" and finding.where.startswith("jinja2==2.10")
    assert "2.10.1" in finding.fix
    assert verdict.failed


def test_the_command_lists_new_findings_as_json_and_markdown_and_exits_1(planted, tmp_path):
    code, pins = planted
    done = run_cli("--requirements", str(pins), "--code", str(code), "--json", str(tmp_path / "s.json"),
                   "--markdown", str(tmp_path / "s.md"))
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((tmp_path / "s.json").read_text())
    assert {"B602", "B506", "PYSEC-2019-217"} <= {f["rule"] for f in report["new"]}
    markdown = (tmp_path / "s.md").read_text()
    assert markdown.startswith("### Security scan: ") and "new findings" in markdown.splitlines()[0]
    assert "CVE-2019-10906" in markdown and "B602" in markdown and "planted.py:7" in markdown
    assert "PyPA advisory database" in done.stdout


def test_an_accepted_finding_passes_until_its_acceptance_expires(planted, tmp_path):
    code, pins = planted
    accepted = tmp_path / "accepted.yaml"
    accepted.write_text(f"""
pip-audit:
  - package: Jinja2
    id: CVE-2019-10906
    reason: planted for the test, a sandbox escape nothing here reaches
    expires: {TODAY.isoformat()}
bandit:
  - test: B602
    paths: ["{code}/*.py"]
    reason: planted for the test, the shell call of the planted file
    expires: {TODAY.isoformat()}
""")
    verdict = security.scan(accepted_path=accepted, requirements=pins, venvs=[], code=[code])
    assert "CVE-2019-10906" in {i for f, _ in verdict.accepted for i in f.ids}
    assert "B602" in {f.rule for f, _ in verdict.accepted}
    assert "B602" not in {f.rule for f, _ in verdict.new}

    expired = security.scan(accepted_path=accepted, requirements=pins, venvs=[], code=[code],
                            today=TODAY + dt.timedelta(days=1))
    lapsed = {f.rule: a for f, a in expired.new if a is not None}
    assert {"PYSEC-2019-217", "B602"} <= set(lapsed)
    assert lapsed["B602"].expires == TODAY
    assert expired.failed and "its acceptance expired on" in security.as_markdown(expired)


FINDING = Finding("bandit", "B603", "infra/skopeo.py:152", "subprocess call", path="infra/skopeo.py")


def test_an_acceptance_matches_its_test_and_paths_only():
    entry = Acceptance("bandit", "B603", ("infra/*.py",), "a reason of some words", TODAY)
    assert entry.matches(FINDING)
    assert not entry.matches(Finding("bandit", "B602", "infra/skopeo.py:1", "", path="infra/skopeo.py"))
    assert not entry.matches(Finding("bandit", "B603", "bench/x.py:1", "", path="bench/x.py"))


def test_a_bandit_acceptance_that_matches_nothing_fails_and_an_advisory_one_is_noted():
    stale = Acceptance("bandit", "B101", ("infra/gone.py",), "a reason of some words", TODAY)
    advisory = Acceptance("pip-audit", "CVE-2000-1", ("gone",), "a reason of some words", TODAY)
    verdict = judge([FINDING], [stale, advisory], TODAY)
    assert verdict.stale == [stale] and verdict.unmatched_advisories == [advisory]
    assert [f for f, _ in verdict.new] == [FINDING] and verdict.failed
    assert "no longer found" in security.as_markdown(verdict)


# --- bad input: one line, exit 2 -------------------------------------------------------------

MALFORMED = {
    "not YAML": ("bandit: [\n", "not valid YAML at line"),
    "a list": ("- test: B101\n", "must be a mapping with the keys pip-audit, bandit and images"),
    "an unknown section": ("safety: []\n", "unknown key 'safety'"),
    "no reason": ("bandit:\n  - {test: B101, paths: [a.py], expires: 2030-01-01}\n", "bandit[0]: reason is missing"),
    "a reason too short": ("bandit:\n  - {test: B101, paths: [a.py], reason: fine, expires: 2030-01-01}\n",
                           "reason must say why"),
    "a bad date": ("bandit:\n  - {test: B101, paths: [a.py], reason: a reason of five words, expires: 2030-13-01}\n",
                   "expires '2030-13-01' is not a date"),
    "no expiry": ("pip-audit:\n  - {package: pip, id: CVE-2023-5752, reason: a reason of five words}\n",
                  "pip-audit[0]: expires is missing"),
    "a misspelt key": ("bandit:\n  - {test: B101, path: [a.py], reason: a reason of five words, expires: 2030-01-01}\n",
                       "unknown key 'path'"),
    "not a test id": ("bandit:\n  - {test: assert, paths: [a.py], reason: a reason of five words, "
                      "expires: 2030-01-01}\n", "is not a bandit test id"),
    "paths not a list": ("bandit:\n  - {test: B101, paths: a.py, reason: a reason of five words, "
                         "expires: 2030-01-01}\n", "paths must be a list"),
    "binary": (b"\xff\xfe\x00bandit", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_accepted_findings_file_is_one_line(case, tmp_path):
    text, expected = MALFORMED[case]
    path = tmp_path / "accepted.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ScanError) as raised:
        load_accepted(path)
    message = str(raised.value)
    assert expected in message and "\n" not in message and str(path) in message


def test_the_command_says_a_malformed_file_in_one_line_and_exits_2(tmp_path):
    path = tmp_path / "accepted.yaml"
    path.write_text("bandit:\n  - {test: B101, paths: [a.py], reason: a reason of five words, expires: soon}\n")
    done = run_cli("--accepted", str(path), "--markdown", str(tmp_path / "s.md"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "expires 'soon' is not a date" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert (tmp_path / "s.md").read_text().startswith("### Security scan: could not run")


def test_an_advisory_service_that_cannot_be_reached_is_one_line_and_exit_2(planted, tmp_path):
    _, pins = planted
    with closed_port() as port:  # bound, never listening: every connection is refused
        url = f"http://127.0.0.1:{port}/v1/query"
        done = run_cli("--advisories", "osv", "--osv-url", url, "--requirements", str(pins), "--code", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"{url} could not be reached" in done.stderr, done.stderr


# --- the snapshot answers as OSV does ---------------------------------------------------------

def v(text: str):
    from packaging.version import Version

    return Version(text)


def test_osv_ranges_and_versions():
    fixed = {"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.10.1"},
                                                          {"introduced": "3.0"}, {"fixed": "3.1.4"}]}]}
    assert affects(fixed, v("2.10")) and affects(fixed, v("3.1.3"))
    assert not affects(fixed, v("2.10.1")) and not affects(fixed, v("2.11")) and not affects(fixed, v("3.1.4"))
    last = {"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"last_affected": "1.4"}]}]}
    assert affects(last, v("1.4")) and not affects(last, v("1.4.1")) and not affects(last, v("0.9"))
    listed = {"ranges": [{"type": "GIT", "events": [{"introduced": "abc123"}]}], "versions": ["1.2", "not a version"]}
    assert affects(listed, v("1.2")) and not affects(listed, v("1.3"))


def eco(*events: dict) -> dict:
    return {"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, *events]}]}


def test_a_local_label_is_the_release_it_labels():
    assert affects({"versions": ["2.13.0"]}, v("2.13.0+cpu")) and not affects({"versions": ["2.13.0"]}, v("2.13.1+cpu"))
    last = eco({"last_affected": "2.13.0"})
    assert affects(last, v("2.13.0+cpu")) and not affects(last, v("2.13.1+cpu"))
    assert not affects(eco({"fixed": "2.13.0"}), v("2.13.0+cpu"))
    # On the bounds too: the build a bound names is its release.
    built = {"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "2.6.0+cu124"}, {"fixed": "2.7"}]}]}
    assert affects(built, v("2.6.0+cu124")) and affects(built, v("2.6.0"))
    assert not affects(eco({"fixed": "2.0.0+cu118"}), v("2.0.0+cu118"))


def test_a_bound_that_is_not_pep_440_ends_its_range_at_the_next_release_and_never_spares():
    nvd = eco({"last_affected": "2.10.0-NA"})
    assert affects(nvd, v("2.10.0")) and affects(nvd, v("2.9.1")) and not affects(nvd, v("3.3.2"))
    assert affects(nvd, v("2.10.0.post1")) and not affects(nvd, v("2.10.1"))
    cuda = eco({"last_affected": "2.6.0-cu124"})
    assert affects(cuda, v("2.6.0+cpu")) and not affects(cuda, v("2.13.0+cpu"))
    # A fix somewhere after 7.2.0 (a distribution's 7.2.0-12.1): 7.2.0 itself stays affected.
    distro = eco({"fixed": "7.2.0-12.1"})
    assert affects(distro, v("7.2.0")) and not affects(distro, v("7.2.1"))
    # A package with four-part releases: 4.6.0.1 to 4.6.0.10 come before 4.6.0.stable11.
    four = eco({"fixed": "4.6.0.stable11"})
    assert affects(four, v("4.6.0.10")) and not affects(four, v("4.6.1"))
    wildcard = eco({"last_affected": "1.2.x"})
    assert affects(wildcard, v("1.2.5")) and not affects(wildcard, v("1.3"))
    epoch = eco({"last_affected": "1!2.0-NA"})
    assert affects(epoch, v("1!1.5")) and affects(epoch, v("1!2.0.5")) and not affects(epoch, v("1!2.1"))
    # Nothing to read: a closing bound leaves the range open, an opening one opens it at 0.
    assert affects(eco({"last_affected": "unknown"}), v("99.0"))
    nothing = {"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": ""}, {"fixed": "2.0"}]}]}
    assert affects(nothing, v("1.0")) and not affects(nothing, v("2.0"))


def test_the_snapshot_reads_nvds_suffixed_bounds_as_their_release():
    snapshot = security.AdvisorySnapshot()

    def ids(name: str, version: str) -> set[str]:
        return {a["id"] for a in snapshot.query(name, version)}

    # last_affected 2.10.0-NA and 2.6.0-NA in the database: read as open ranges, both were
    # findings against every later release.
    assert "PYSEC-2024-266" in ids("apache-airflow", "2.10.0")
    assert "PYSEC-2024-266" not in ids("apache-airflow", "3.3.2")
    assert "PYSEC-2025-192" in ids("torch", "2.6.0+cu124") and "PYSEC-2025-192" not in ids("torch", "2.13.0+cpu")


FORK = "https://example.org/a-fork"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def _commit_advisory(repo: Path, advisory_id: str, text: str | None = None, name: str | None = None) -> None:
    if not repo.exists():
        repo.mkdir()
        _git(repo, "init", "-q")
    (repo / "vulns" / "jinja2").mkdir(parents=True, exist_ok=True)
    (repo / "vulns" / "jinja2" / f"{name or advisory_id}.yaml").write_text(text if text is not None else
        f"id: {advisory_id}\nsummary: a planted advisory\naffected:\n- package: {{name: jinja2, ecosystem: PyPI}}\n"
        "  ranges:\n  - type: ECOSYSTEM\n    events: [{introduced: '0'}, {fixed: '2.10.1'}]\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", advisory_id)


def test_a_snapshot_is_rebuilt_only_from_a_newer_copy_of_the_same_database(tmp_path):
    database, out = tmp_path / "database", tmp_path / "advisories.json.gz"
    _commit_advisory(database, "PYSEC-2099-1")
    first = security.build_snapshot(database, out, FORK)
    assert (first["advisories"], first["repository"]) == (1, FORK)
    # A file named past ASCII is read, not skipped (git quotes such names unless told not to).
    _commit_advisory(database, "PYSEC-2099-2", name="PYSEC-2099-\u00e9")
    assert security.build_snapshot(database, out, FORK)["advisories"] == 2
    assert [a["id"] for a in security.AdvisorySnapshot(out).query("jinja2", "2.10")] == ["PYSEC-2099-1", "PYSEC-2099-2"]
    before = out.read_bytes()
    # Another repository, whose history lacks the snapshot's commit: refused, nothing written.
    other = tmp_path / "other"
    _commit_advisory(other, "PYSEC-2099-3")
    with pytest.raises(ScanError, match="does not hold"):
        security.build_snapshot(other, out, FORK)
    # A newer copy with an advisory deleted (the database withdraws, it does not delete).
    (database / "vulns" / "jinja2" / "PYSEC-2099-1.yaml").unlink()
    _commit_advisory(database, "PYSEC-2099-4")
    with pytest.raises(ScanError, match="1 advisories the snapshot at .* holds are not there .PYSEC-2099-1"):
        security.build_snapshot(database, out, FORK)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-written file left


NOT_ADVISORIES = {
    "not YAML": "id: [unclosed\n", "a list": "- 1\n", "no package": "id: X\naffected: [{}]\n",
    "no id": "summary: s\n", "a number for an id": "id: 5\n",
    # YAML reads 2.10 as the number 2.1: a bound that would silently move.
    "an unquoted version": "id: X\naffected:\n- package: {name: p, ecosystem: PyPI}\n  ranges:\n"
                           "  - {type: ECOSYSTEM, events: [{introduced: '0'}, {fixed: 2.10}]}\n",
    "two kinds in one event": "id: X\naffected:\n- package: {name: p, ecosystem: PyPI}\n  ranges:\n"
                              "  - {type: ECOSYSTEM, events: [{introduced: '0', fixed: '2.1'}]}\n",
    "an unquoted listed version": "id: X\naffected:\n- package: {name: p, ecosystem: PyPI}\n  versions: [1.10]\n",
}


@pytest.mark.parametrize("kind", ["not a repository", "another repository", "no vulns folder", "unreadable snapshot",
                                  "a folder for the snapshot", "no folder for the snapshot", *NOT_ADVISORIES])
def test_the_snapshot_command_refuses_in_one_line_and_writes_nothing(kind, tmp_path):
    source, snapshot = tmp_path / "source", tmp_path / "advisories.json.gz"
    snapshot.write_bytes(security.SNAPSHOT.read_bytes())
    if kind == "not a repository":
        source.mkdir()
    elif kind == "no vulns folder":
        source.mkdir()
        _git(source, "init", "-q")
        (source / "README").write_text("x")
        _git(source, "add", "-A")
        _git(source, "commit", "-q", "-m", "x")
        snapshot.unlink()  # even as the first snapshot
    else:
        _commit_advisory(source, "PYSEC-2099-1")
    if kind in NOT_ADVISORIES:  # the first snapshot, so no history to hold: one file is no advisory
        _commit_advisory(source, "PYSEC-2099-2", NOT_ADVISORIES[kind])
        snapshot.unlink()
    elif kind == "unreadable snapshot":
        snapshot.write_bytes(b"garbage")
    elif kind == "a folder for the snapshot":
        snapshot.unlink()
        snapshot.mkdir()
    elif kind == "no folder for the snapshot":
        snapshot.unlink()
        snapshot = tmp_path / "gone" / "advisories.json.gz"
    before = sorted(p.name for p in tmp_path.rglob("*") if "source" not in p.parts), \
        snapshot.read_bytes() if snapshot.is_file() else None
    done = run_cli("snapshot", "--from", str(source), "--repository", FORK, "--output", str(snapshot))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("snapshot: "), done.stderr
    assert (sorted(p.name for p in tmp_path.rglob("*") if "source" not in p.parts),
            snapshot.read_bytes() if snapshot.is_file() else None) == before
    if kind in NOT_ADVISORIES:
        assert "vulns/jinja2/PYSEC-2099-2.yaml is not an OSV advisory" in done.stderr


def test_the_snapshot_finds_by_normalised_name_and_names_its_source():
    snapshot = security.AdvisorySnapshot()
    assert "CVE-2019-10906" in {alias for a in snapshot.query("Jinja2", "2.10") for alias in a.get("aliases", [])}
    assert "CVE-2019-10906" not in {alias for a in snapshot.query("jinja2", "3.1.6") for alias in a.get("aliases", [])}
    assert len(snapshot.source["commit"]) == 40 and snapshot.source["license"].startswith("CC-BY-4.0")
    assert f"({snapshot.source['date']}, " in snapshot.describe()
