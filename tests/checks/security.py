"""Security scan of the project: pip-audit on the dependencies `make setup` installed from
the pins, bandit on the project's own Python. Every finding is fixed or accepted in
tests/checks/security_accepted.yaml with a reason and an expiry date; an expired acceptance
counts as a new finding, and a new finding fails.

    python -m tests.checks.security [--advisories snapshot|osv] [--json F] [--markdown F]
        exit 0: no new findings; 1: new findings (listed); 2: the scan could not run (one line)
    python -m tests.checks.security snapshot --from <advisory-database git directory>
        rebuilds the committed advisory snapshot from a clone of the PyPA advisory database

Where pip-audit's advisories come from (--advisories):
- snapshot (the default, and what `make test` runs): the PyPA advisory database as committed
  in tests/checks/advisories.json.gz (its commit and date are printed with every result),
  answered to pip-audit's own OSV client through --osv-url by a server on 127.0.0.1 for the
  length of the run: pip-audit reads advisories from no file, and OSV's query API is the
  one it lets us point elsewhere. None of pip-audit's online services answers from this
  project's machines: OSV and ecosyste.ms don't resolve, and PyPI's per-version JSON, which
  `-s pypi` reads, is 404 there, which pip-audit reports as a skip and exit 0.
- osv: OSV's own API (https://api.osv.dev/v1/query), for runners that reach it (GitHub's
  do). If it can't be reached, one line says so and the scan fails.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import gzip
import json
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ACCEPTED = Path(__file__).with_name("security_accepted.yaml")
SNAPSHOT = Path(__file__).with_name("advisories.json.gz")
OSV_URL = "https://api.osv.dev/v1/query"

# What the platform runs, as `make setup` installs it from the pins: the project's own
# environment (the program, the policy pack, the training, serving and checks images'
# packages, the tests), and the two that stand for the tracking and features images
# (workloads/images/*.Dockerfile install the same pins). .venv-checkov and .venv-mlserver
# hold test and benchmark tools that only ever read our own files: not audited.
AUDITED_VENVS = (".venv", ".venv-tracking", ".venv-features")
# The project's own Python; tests, virtualenvs and node_modules are not scanned.
CODE_ROOTS = ("infra", "components", "policies", "workloads", "bench")


class ScanError(Exception):
    """The scan could not run, or the accepted-findings file is malformed: one line."""


# --- accepted findings ----------------------------------------------------------------------

@dataclass(frozen=True)
class Acceptance:
    tool: str  # "pip-audit" or "bandit"
    rule: str  # an advisory id (or one of its aliases), or a bandit test id
    where: tuple[str, ...]  # the package, or the path patterns (relative to the repo)
    reason: str
    expires: dt.date

    def matches(self, finding: Finding) -> bool:
        if finding.tool != self.tool:
            return False
        if self.tool == "pip-audit":
            return canonicalize_name(self.where[0]) == canonicalize_name(finding.package) and self.rule in finding.ids
        return self.rule == finding.rule and any(fnmatch.fnmatchcase(finding.path, p) for p in self.where)

    def label(self) -> str:
        return f"{self.rule} in {', '.join(self.where)}"


class _Loader(yaml.SafeLoader):
    """Dates stay text, so a bad one is reported as such rather than as a YAML error."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

_FIELDS = {"pip-audit": {"package", "id", "reason", "expires"}, "bandit": {"test", "paths", "reason", "expires"}}


def load_accepted(path: Path = ACCEPTED) -> list[Acceptance]:
    """The accepted findings; a malformed file raises ScanError with one line naming the entry."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader
    except OSError as error:
        raise ScanError(f"{path}: cannot be read ({error.strerror or error})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ScanError(f"{path}: not valid YAML{at}: {getattr(error, 'problem', None) or error}".replace("\n", " "))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScanError(f"{path}: must be a mapping with the keys pip-audit and bandit")
    unknown = sorted(set(map(str, data)) - set(_FIELDS))
    if unknown:
        raise ScanError(f"{path}: unknown key {unknown[0]!r}; the keys are pip-audit and bandit")
    found = []
    for tool, fields in _FIELDS.items():
        entries = data.get(tool) or []
        if not isinstance(entries, list):
            raise ScanError(f"{path}: {tool} must be a list of entries")
        for index, entry in enumerate(entries):
            at = f"{path}: {tool}[{index}]"
            if not isinstance(entry, dict):
                raise ScanError(f"{at}: must be a mapping with {', '.join(sorted(fields))}")
            missing, extra = sorted(fields - set(entry)), sorted(set(map(str, entry)) - fields)
            if extra:
                raise ScanError(f"{at}: unknown key {extra[0]!r}; an entry has {', '.join(sorted(fields))}")
            if missing:
                raise ScanError(f"{at}: {missing[0]} is missing")
            reason = entry["reason"]
            if not isinstance(reason, str) or len(reason.split()) < 5:
                raise ScanError(f"{at}: reason must say why it is accepted (a sentence, not {reason!r})")
            try:
                expires = dt.date.fromisoformat(str(entry["expires"]))
            except ValueError:
                raise ScanError(f"{at}: expires {entry['expires']!r} is not a date (YYYY-MM-DD)") from None
            if tool == "pip-audit":
                rule, where = entry["id"], entry["package"]
                if not isinstance(rule, str) or not rule.strip() or not isinstance(where, str) or not where.strip():
                    raise ScanError(f"{at}: package and id must be strings (an advisory id such as PYSEC-2024-1)")
                where = (where,)
            else:
                rule, where = entry["test"], entry["paths"]
                if not isinstance(rule, str) or not (len(rule) == 4 and rule[0] == "B" and rule[1:].isdigit()):
                    raise ScanError(f"{at}: test {rule!r} is not a bandit test id such as B603")
                if (not isinstance(where, list) or not where
                        or not all(isinstance(p, str) and p.strip() for p in where)):
                    raise ScanError(f"{at}: paths must be a list of paths relative to the repository")
                where = tuple(where)
            found.append(Acceptance(tool, rule, where, " ".join(reason.split()), expires))
    return found


# --- findings ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    tool: str
    rule: str  # the advisory's id, or bandit's test id
    where: str  # name==version, or path:line
    what: str
    ids: tuple[str, ...] = ()  # the advisory's id and aliases
    fix: tuple[str, ...] = ()  # versions that fix it
    package: str = ""
    path: str = ""  # relative to the repository where it is inside it
    severity: str = ""


@dataclass
class Verdict:
    new: list[tuple[Finding, Acceptance | None]] = field(default_factory=list)  # acceptance: expired
    accepted: list[tuple[Finding, Acceptance]] = field(default_factory=list)
    stale: list[Acceptance] = field(default_factory=list)  # bandit acceptances nothing matches
    unmatched_advisories: list[Acceptance] = field(default_factory=list)  # pip-audit: a note only
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.new or self.stale)


def judge(findings: Sequence[Finding], accepted: Sequence[Acceptance], today: dt.date,
          tools: Sequence[str] = ("pip-audit", "bandit")) -> Verdict:
    """Each finding is accepted (an entry matches and has not expired) or new. A bandit entry
    nothing matches is stale and fails too; a pip-audit entry is only noted, since OSV online
    knows advisories the committed snapshot does not."""
    verdict = Verdict()
    used: set[int] = set()
    for finding in findings:
        matching = [a for a in accepted if a.matches(finding)]
        used.update(id(a) for a in matching)
        current = [a for a in matching if a.expires >= today]
        if current:
            verdict.accepted.append((finding, current[0]))
        else:
            verdict.new.append((finding, max(matching, key=lambda a: a.expires) if matching else None))
    for entry in accepted:
        if id(entry) in used or entry.tool not in tools:
            continue
        (verdict.stale if entry.tool == "bandit" else verdict.unmatched_advisories).append(entry)
    return verdict


# --- the advisory snapshot, served as OSV's query API ----------------------------------------

def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def affects(affected: dict, version: Version) -> bool:
    """OSV's rule for one `affected` entry: the version is listed, or inside an ECOSYSTEM
    range (introduced <= v < fixed, or <= last_affected)."""
    if any(_version(v) == version for v in affected.get("versions") or []):
        return True
    for rng in affected.get("ranges") or []:
        if rng.get("type") != "ECOSYSTEM":
            continue
        events = []
        for event in rng.get("events") or []:
            [(kind, text)] = event.items()
            at = Version("0") if text == "0" else _version(str(text))
            if at is not None:
                events.append((at, kind))
        inside = False
        for at, kind in sorted(events, key=lambda e: (e[0], e[1] != "introduced")):
            if kind == "introduced" and version >= at:
                inside = True
            elif kind == "fixed" and version >= at:
                inside = False
            elif kind == "last_affected" and version > at:
                inside = False
        if inside:
            return True
    return False


class AdvisorySnapshot:
    def __init__(self, path: Path = SNAPSHOT):
        try:
            data = json.loads(gzip.decompress(path.read_bytes()))
        except (OSError, ValueError) as error:
            raise ScanError(f"{path}: the advisory snapshot cannot be read ({error}); rebuild it: "
                            "python -m tests.checks.security snapshot --from <advisory-database clone>") from None
        self.source = data["source"]
        self.by_name: dict[str, list[dict]] = {}
        for advisory in data["advisories"]:
            for name in {canonicalize_name(a["package"]["name"]) for a in advisory["affected"]
                         if a["package"]["ecosystem"] == "PyPI"}:
                self.by_name.setdefault(name, []).append(advisory)

    def describe(self) -> str:
        s = self.source
        return f"the PyPA advisory database at {s['commit'][:12]} ({s['date']}, {s['advisories']} advisories)"

    def query(self, name: str, version: str) -> list[dict]:
        parsed = _version(version)
        if parsed is None:
            return []
        name = canonicalize_name(name)
        return [advisory for advisory in self.by_name.get(name, ())
                if any(canonicalize_name(a["package"]["name"]) == name and affects(a, parsed)
                       for a in advisory["affected"])]

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """OSV's /v1/query on 127.0.0.1 for pip-audit's OSV client; yields its URL."""
        snapshot = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                package = body.get("package") or {}
                vulns = snapshot.query(package.get("name", ""), str(body.get("version", ""))) \
                    if package.get("ecosystem") == "PyPI" else []
                reply = json.dumps({"vulns": vulns} if vulns else {}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1/query"
        finally:
            server.shutdown()
            server.server_close()


def _rfc3339(value: Any) -> Any:
    """A timestamp as OSV's API writes it (pip-audit parses exactly that); other values as they are."""
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.timezone.utc) if value.tzinfo else value
        return f"{value.year:04d}-{value:%m-%dT%H:%M:%SZ}"
    return value


def build_snapshot(git_dir: Path, out: Path = SNAPSHOT) -> dict:
    """The committed snapshot from a clone (or bare mirror) of github.com/pypa/advisory-database:
    each advisory's id, aliases, summary (or the start of its details), dates and affected
    ranges and versions; references are left out."""
    def git(*args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], input=data, capture_output=True,
                              check=True).stdout

    if not (git_dir / "HEAD").exists():
        git_dir = git_dir / ".git"
    commit, date = git("log", "-1", "--format=%H %cs").decode().split()
    blobs = [line.split()[2] for line in git("ls-tree", "-r", "HEAD", "vulns").decode().splitlines()
             if line.endswith(".yaml")]
    raw = git("cat-file", "--batch", data="".join(b + "\n" for b in blobs).encode())
    advisories, position = [], 0
    while position < len(raw):
        end = raw.index(b"\n", position)
        size = int(raw[position:end].split()[2])
        record = yaml.load(raw[end + 1:end + 1 + size], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        position = end + 1 + size + 1
        kept = {k: _rfc3339(record[k]) for k in ("id", "aliases", "summary", "published", "modified", "withdrawn")
                if record.get(k) is not None}
        if "summary" not in kept and record.get("details"):
            kept["details"] = " ".join(str(record["details"]).split())[:400]
        kept["affected"] = [{"package": {"name": a["package"]["name"], "ecosystem": a["package"]["ecosystem"]},
                             "ranges": [{"type": r["type"], "events": r["events"]} for r in a.get("ranges") or []],
                             "versions": [str(v) for v in a.get("versions") or []]}
                            for a in record.get("affected") or []]
        advisories.append(json.loads(json.dumps(kept, default=str)))
    advisories.sort(key=lambda a: a["id"])
    source = {"repository": "https://github.com/pypa/advisory-database", "commit": commit, "date": date,
              "license": "CC-BY-4.0 (the Python Packaging Advisory Database's contributors)",
              "advisories": len(advisories)}
    text = json.dumps({"source": source, "advisories": advisories}, sort_keys=True, separators=(",", ":"))
    out.write_bytes(gzip.compress(text.encode(), mtime=0))
    return source


# --- the two tools ----------------------------------------------------------------------------

def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise ScanError(f"{path} is missing: run `make setup` (pip-audit and bandit are test dependencies)")
    return str(path)


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise ScanError(f"{venv} is missing: run `make setup` (its packages are audited)")
    return found[-1]


def _reachable(url: str) -> None:
    query = json.dumps({"package": {"name": "pip", "ecosystem": "PyPI"}, "version": "0"}).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=query, method="POST"), timeout=15).close()  # noqa: S310
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ScanError(f"pip-audit's advisory service {url} could not be reached ({reason}); "
                        "scan against the committed snapshot instead: --advisories snapshot") from None


def _pip_audit(url: str, target: Path, scratch: Path) -> list[dict]:
    """pip-audit's JSON dependencies for one environment (its site-packages) or one pinned
    requirements file."""
    report = scratch / "pip-audit.json"
    report.unlink(missing_ok=True)
    command = [_tool("pip-audit"), "--vulnerability-service", "osv", "--osv-url", url, "--format", "json",
               "--output", str(report), "--progress-spinner", "off", "--timeout", "30",
               "--cache-dir", str(scratch / "cache"), "--skip-editable"]
    if target.is_file():
        command += ["--requirement", str(target), "--no-deps", "--disable-pip"]
    else:
        command += ["--path", str(_site_packages(target))]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)  # noqa: S603
    if done.returncode not in (0, 1) or not report.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScanError(f"pip-audit failed on {_relative(str(target))} (exit {done.returncode}): {last}")
    return json.loads(report.read_text())["dependencies"]


def audit_dependencies(url: str, targets: Sequence[Path]) -> list[Finding]:
    """pip-audit over each environment's installed packages (or pinned requirements files),
    asking the OSV API at `url`. One run per environment: pip-audit keeps one version per
    name, and the environments pin some packages differently. A finding present in several
    environments is one finding that names them all."""
    merged: dict[tuple[str, str, str], tuple[Finding, list[str]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for target in targets:
            for dependency in _pip_audit(url, target, Path(scratch)):
                name, version = dependency["name"], dependency.get("version", "?")
                found = []
                skipped = dependency.get("skip_reason")
                if skipped and skipped != "distribution marked as editable":  # the project itself
                    # Never a silent pass: a package that could not be audited is a finding.
                    found.append(Finding("pip-audit", "not-audited", f"{name}=={version}", skipped,
                                         ids=("not-audited",), package=name))
                for vuln in dependency.get("vulns", []):
                    found.append(Finding("pip-audit", vuln["id"], f"{name}=={version}",
                                         " ".join((vuln.get("description") or "").split())[:300],
                                         ids=(vuln["id"], *vuln.get("aliases", [])),
                                         fix=tuple(vuln.get("fix_versions", [])), package=name))
                for finding in found:
                    key = (finding.rule, canonicalize_name(name), version)
                    merged.setdefault(key, (finding, []))[1].append(_relative(str(target)))
    return [replace(finding, where=f"{finding.where} ({', '.join(places)})")
            for finding, places in merged.values()]


def scan_code(roots: Sequence[Path]) -> tuple[list[Finding], int]:
    """bandit over the roots, every test and severity, `# nosec` ignored (acceptances live in
    one file). Returns the findings and the number of files scanned."""
    command = [_tool("bandit"), "--recursive", "--format", "json", "--quiet", "--ignore-nosec",
               *map(str, roots)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)  # noqa: S603
    try:
        data = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScanError(f"bandit failed (exit {done.returncode}): {last}") from None
    findings = []
    for error in data.get("errors", []):
        path = _relative(error["filename"])
        findings.append(Finding("bandit", "not-scanned", path, f"bandit could not scan it: {error['reason']}",
                                path=path))
    for result in data["results"]:
        path = _relative(result["filename"])
        findings.append(Finding("bandit", result["test_id"], f"{path}:{result['line_number']}",
                                f"{result['test_name']}: {result['issue_text']}", path=path,
                                severity=result["issue_severity"].lower()))
    scanned = sum(1 for name in data.get("metrics", {}) if name != "_totals")
    return findings, scanned


def _relative(path: str) -> str:
    absolute = (REPO / path).resolve()
    return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else str(absolute)


# --- the whole scan and its reports -----------------------------------------------------------

def scan(advisories: str = "snapshot", osv_url: str = OSV_URL, accepted_path: Path = ACCEPTED,
         venvs: Sequence[Path] | None = None, requirements: Path | None = None,
         code: Sequence[Path] | None = None, today: dt.date | None = None,
         tools: Sequence[str] = ("pip-audit", "bandit")) -> Verdict:
    accepted = load_accepted(accepted_path)
    findings: list[Finding] = []
    sources: dict[str, str] = {}
    if "pip-audit" in tools:
        if requirements is not None and not requirements.is_file():
            raise ScanError(f"{requirements}: no such requirements file")
        targets = [*(venvs or ()), *([requirements] if requirements else [])]
        if venvs is None and requirements is None:
            targets = [REPO / v for v in AUDITED_VENVS]
        audited = ", ".join(_relative(str(t)) for t in targets)
        if advisories == "snapshot":
            snapshot = AdvisorySnapshot()
            with snapshot.serve() as url:
                findings += audit_dependencies(url, targets)
            sources["pip-audit"] = f"{audited} against {snapshot.describe()}"
        elif advisories == "osv":
            _reachable(osv_url)
            findings += audit_dependencies(osv_url, targets)
            sources["pip-audit"] = f"{audited} against OSV ({osv_url}), {dt.date.today().isoformat()}"
        else:
            raise ScanError(f"--advisories {advisories!r}: use snapshot or osv")
    if "bandit" in tools:
        roots = list(code) if code is not None else [REPO / r for r in CODE_ROOTS]
        found, scanned = scan_code(roots)
        findings += found
        sources["bandit"] = f"{scanned} files in {', '.join(_relative(str(r)) for r in roots)}"
    verdict = judge(findings, accepted, today or dt.date.today(), tools)
    if code is not None:  # other files than the project's: its bandit entries are not stale
        verdict.stale = []
    verdict.sources = sources
    return verdict


def _finding_row(finding: Finding, expired: Acceptance | None = None) -> dict:
    row = {k: v for k, v in asdict(finding).items() if v not in ("", ())}
    if expired is not None:
        row["expired"] = expired.expires.isoformat()
    return row


def as_json(verdict: Verdict) -> dict:
    return {
        "new": [_finding_row(f, a) for f, a in verdict.new],
        "stale": [{"tool": a.tool, "rule": a.rule, "where": list(a.where)} for a in verdict.stale],
        "accepted": [{**_finding_row(f), "expires": a.expires.isoformat(), "reason": a.reason}
                     for f, a in verdict.accepted],
        "sources": verdict.sources,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def as_markdown(verdict: Verdict) -> str:
    count = len(verdict.new)
    title = f"### Security scan: {count or 'no'} new finding{'' if count == 1 else 's'}"
    if verdict.stale:
        title += f", {len(verdict.stale)} stale acceptance{'' if len(verdict.stale) == 1 else 's'}"
    lines = [title, ""]
    lines += [f"- {tool}: {source}" for tool, source in verdict.sources.items()] + [""]
    if verdict.new:
        lines += ["| tool | finding | where | what |", "|---|---|---|---|"]
        for finding, expired in verdict.new:
            rule = " / ".join(finding.ids[:3]) if finding.ids else finding.rule
            what = finding.what + (f" (fixed in {', '.join(finding.fix)})" if finding.fix else "")
            if expired is not None:
                what += f" (its acceptance expired on {expired.expires.isoformat()})"
            lines.append(f"| {finding.tool} | {_cell(rule)} | `{_cell(finding.where)}` | {_cell(what)} |")
        lines.append("")
        lines.append("Fix each, or accept it in `tests/checks/security_accepted.yaml` with a reason and an expiry "
                     "date.")
        lines.append("")
    if verdict.stale:
        lines.append("Accepted, but no longer found (remove from `tests/checks/security_accepted.yaml`): "
                     + "; ".join(f"{a.tool} {a.label()}" for a in verdict.stale))
        lines.append("")
    if verdict.accepted:
        soonest = min(a.expires for _, a in verdict.accepted)
        lines += [f"<details><summary>{len(verdict.accepted)} accepted findings (the first acceptance expires "
                  f"{soonest.isoformat()})</summary>", "", "| tool | finding | where | expires |", "|---|---|---|---|"]
        lines += [f"| {f.tool} | {_cell(f.rule)} | `{_cell(f.where)}` | {a.expires.isoformat()} |"
                  for f, a in verdict.accepted]
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def as_text(verdict: Verdict) -> str:
    lines = [f"{tool}: {source}" for tool, source in verdict.sources.items()]
    for finding, expired in verdict.new:
        note = f" (acceptance expired {expired.expires.isoformat()})" if expired else ""
        fix = f" (fixed in {', '.join(finding.fix)})" if finding.fix else ""
        lines.append(f"NEW {finding.tool} {finding.rule} {finding.where}: {finding.what}{fix}{note}")
    lines += [f"STALE {a.tool} acceptance {a.label()}: nothing matches it; remove it" for a in verdict.stale]
    lines += [f"note: pip-audit acceptance {a.label()} matched nothing in this run" for a in verdict.unmatched_advisories]
    lines.append(f"{len(verdict.new)} new, {len(verdict.stale)} stale, {len(verdict.accepted)} accepted findings")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["snapshot"]:
        parser = argparse.ArgumentParser(prog="python -m tests.checks.security snapshot")
        parser.add_argument("--from", dest="source", type=Path, required=True,
                            help="a clone (or bare mirror) of github.com/pypa/advisory-database")
        opts = parser.parse_args(argv[1:])
        source = build_snapshot(opts.source)
        print(f"{SNAPSHOT.relative_to(REPO)}: {source['advisories']} advisories at {source['commit'][:12]} "
              f"({source['date']})")
        return 0
    parser = argparse.ArgumentParser(prog="python -m tests.checks.security", description=__doc__.split("\n\n")[0])
    parser.add_argument("--advisories", choices=("snapshot", "osv"), default="snapshot")
    parser.add_argument("--osv-url", default=OSV_URL, help="OSV's query API, with --advisories osv")
    parser.add_argument("--accepted", type=Path, default=ACCEPTED)
    parser.add_argument("--requirements", type=Path, help="audit this pinned requirements file instead of the "
                        "installed environments")
    parser.add_argument("--code", type=Path, action="append", help="scan these paths instead of the project's")
    parser.add_argument("--json", type=Path, help="write the findings as JSON")
    parser.add_argument("--markdown", type=Path, help="write the findings as Markdown (the PR comment's part)")
    opts = parser.parse_args(argv)
    try:
        verdict = scan(opts.advisories, opts.osv_url, opts.accepted, requirements=opts.requirements,
                       venvs=[] if opts.requirements else None, code=opts.code)
    except ScanError as error:
        print(f"security scan: {error}", file=sys.stderr)
        if opts.markdown is not None:  # the comment says it could not run, never nothing
            opts.markdown.parent.mkdir(parents=True, exist_ok=True)
            opts.markdown.write_text(f"### Security scan: could not run\n\n{error}\n")
        return 2
    for path, text in ((opts.json, json.dumps(as_json(verdict), indent=1)), (opts.markdown, as_markdown(verdict))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
    print(as_text(verdict))
    return 1 if verdict.failed else 0


if __name__ == "__main__":
    sys.exit(main())
