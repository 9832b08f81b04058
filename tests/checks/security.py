"""Security scan of the project: pip-audit on the dependencies `make setup` installed from
the pins, bandit on the project's own Python, and (in the deploy) the in-region registry's
scan of every image the environment runs. Every finding is fixed or accepted in
tests/checks/security_accepted.yaml with a reason and an expiry date; an expired acceptance
counts as a new finding, and a new finding fails.

    python -m tests.checks.security [--advisories snapshot|osv] [--json F] [--markdown F]
        exit 0: no new findings; 1: new findings (listed); 2: the scan could not run (one line)
    python -m tests.checks.security images --findings FILE... [--json F] [--markdown F]
        judges ECR's scan of images: each FILE is what `aws ecr describe-image-scan-findings
        --repository-name R --image-id imageDigest=D` printed (every page: the AWS CLI
        fetches them all unless told not to); same exit codes
    python -m tests.checks.security image-targets --stack ENV --platform-images JSON
        lists what the deploy scans: `name repository digest platforms`, one image a line
    (the deploy's scan step itself, which fetches ECR's answers and judges them, is
    tests/checks/registry_scan.py)
    python -m tests.checks.security snapshot --from <advisory-database git directory> --repository URL
            [--output F]
        rebuilds the committed advisory snapshot (or F) from a clone of the PyPA advisory
        database, or of a fork that mirrors it (URL: where it was cloned from, recorded); only
        a newer copy of the database the snapshot was taken from is taken; exit 2 otherwise

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
import difflib
import fnmatch
import gzip
import json
import re
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
# (workloads/images/*.Dockerfile install the same pins), and Airflow's, the pipeline engine.
# .venv-checkov and .venv-mlserver hold test and benchmark tools that only ever read our own
# files: not audited.
AUDITED_VENVS = (".venv", ".venv-tracking", ".venv-features", ".venv-pipelines")
# The project's own Python; tests, virtualenvs and node_modules are not scanned.
CODE_ROOTS = ("infra", "components", "policies", "workloads", "bench")


class ScanError(Exception):
    """The scan could not run, or the accepted-findings file is malformed: one line."""


# --- accepted findings ----------------------------------------------------------------------

@dataclass(frozen=True)
class Acceptance:
    tool: str  # "pip-audit", "bandit" or "image"
    rule: str  # an advisory id (or one of its aliases), a bandit test id, or an image's vulnerability id
    where: tuple[str, ...]  # the package, the path patterns (relative to the repo), or the image
    reason: str
    expires: dt.date

    def matches(self, finding: Finding) -> bool:
        if finding.tool != self.tool:
            return False
        if self.tool == "pip-audit":
            return canonicalize_name(self.where[0]) == canonicalize_name(finding.package) and self.rule in finding.ids
        if self.tool == "image":
            return self.where[0] == finding.image and self.rule in finding.ids
        return self.rule == finding.rule and any(fnmatch.fnmatchcase(finding.path, p) for p in self.where)

    def label(self) -> str:
        return f"{self.rule} in {'image ' if self.tool == 'image' else ''}{', '.join(self.where)}"


class _Loader(yaml.SafeLoader):
    """Dates stay text, so a bad one is reported as such rather than as a YAML error."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

_FIELDS = {"pip-audit": {"package", "id", "reason", "expires"}, "bandit": {"test", "paths", "reason", "expires"}}
_IMAGE_FIELDS = {"id", "reason", "expires"}
_SECTIONS = "pip-audit, bandit and images"


def _entry_basics(at: str, entry: Any, fields: set[str]) -> tuple[str, dt.date]:
    """The reason and expiry of one entry, after its keys are checked."""
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
    return " ".join(reason.split()), expires


def _image_names() -> list[str]:
    from infra.versions import IMAGES

    return sorted(IMAGES)


def _load_image_acceptances(path: Path, section: Any) -> list[Acceptance]:
    """`images:` maps an image of the registry plan (infra/versions.py IMAGES: the platform's
    own images and the mirrors) to its accepted vulnerabilities."""
    if not isinstance(section, dict):
        raise ScanError(f"{path}: images must map an image name (infra/versions.py IMAGES) to a list of entries")
    names = _image_names()
    found = []
    for image, entries in section.items():
        if image not in names:
            close = difflib.get_close_matches(str(image), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else " (the names are those of infra/versions.py IMAGES)"
            raise ScanError(f"{path}: images: {image!r} is not an image of the registry plan{hint}")
        if not isinstance(entries, list) or not entries:
            raise ScanError(f"{path}: images: {image}: must be a list of entries with id, reason and expires")
        for index, entry in enumerate(entries):
            at = f"{path}: images: {image}[{index}]"
            reason, expires = _entry_basics(at, entry, _IMAGE_FIELDS)
            rule = entry["id"]
            if not isinstance(rule, str) or not rule.strip() or len(rule.split()) != 1:
                raise ScanError(f"{at}: id must be one vulnerability id (such as CVE-2024-6387), not {rule!r}")
            found.append(Acceptance("image", rule.strip(), (image,), reason, expires))
    return found


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
        raise ScanError(f"{path}: must be a mapping with the keys {_SECTIONS}")
    unknown = sorted(set(map(str, data)) - {*_FIELDS, "images"})
    if unknown:
        raise ScanError(f"{path}: unknown key {unknown[0]!r}; the keys are {_SECTIONS}")
    found = []
    for tool, fields in _FIELDS.items():
        entries = data.get(tool) or []
        if not isinstance(entries, list):
            raise ScanError(f"{path}: {tool} must be a list of entries")
        for index, entry in enumerate(entries):
            at = f"{path}: {tool}[{index}]"
            reason, expires = _entry_basics(at, entry, fields)
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
            found.append(Acceptance(tool, rule, where, reason, expires))
    if data.get("images") is not None:
        found += _load_image_acceptances(path, data["images"])
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
    image: str = ""  # images: the image's name in infra/versions.py IMAGES
    url: str = ""  # images: where the vulnerability is described


@dataclass(frozen=True)
class ImageScan:
    """One image manifest's scan, as ECR reported it."""

    image: str  # the name in infra/versions.py IMAGES
    repository: str
    digest: str
    status: str
    kind: str  # "basic" or "enhanced" (Amazon Inspector)
    completed: str = ""  # when the scan completed
    source_updated: str = ""  # the date of the vulnerability data it used
    counts: tuple[tuple[str, int], ...] = ()  # findings by severity, as ECR counted them


@dataclass
class Verdict:
    new: list[tuple[Finding, Acceptance | None]] = field(default_factory=list)  # acceptance: expired
    accepted: list[tuple[Finding, Acceptance]] = field(default_factory=list)
    stale: list[Acceptance] = field(default_factory=list)  # bandit acceptances nothing matches
    unmatched_advisories: list[Acceptance] = field(default_factory=list)  # pip-audit: a note only
    sources: dict[str, str] = field(default_factory=dict)
    # Images: findings below the severity floor (listed, never failing), what was scanned,
    # and acceptances of a scanned image that matched nothing (a note only).
    listed: list[Finding] = field(default_factory=list)
    scans: list[ImageScan] = field(default_factory=list)
    unmatched_images: list[Acceptance] = field(default_factory=list)
    title: str = "Security scan"

    @property
    def failed(self) -> bool:
        return bool(self.new or self.stale)


def judge(findings: Sequence[Finding], accepted: Sequence[Acceptance], today: dt.date,
          tools: Sequence[str] = ("pip-audit", "bandit"), scanned_images: Sequence[str] = ()) -> Verdict:
    """Each finding is accepted (an entry matches and has not expired) or new; an image
    finding below the severity floor is only listed. A bandit entry nothing matches is stale
    and fails too; a pip-audit entry is only noted, since OSV online knows advisories the
    committed snapshot does not, and so is an image entry of an image scanned this run (the
    next base may have fixed it; an entry of an image not scanned is not judged)."""
    verdict = Verdict()
    used: set[int] = set()
    for finding in findings:
        matching = [a for a in accepted if a.matches(finding)]
        used.update(id(a) for a in matching)
        if finding.tool == "image" and finding.severity in LISTED_ONLY:
            verdict.listed.append(finding)
            continue
        current = [a for a in matching if a.expires >= today]
        if current:
            verdict.accepted.append((finding, current[0]))
        else:
            verdict.new.append((finding, max(matching, key=lambda a: a.expires) if matching else None))
    for entry in accepted:
        if id(entry) in used or entry.tool not in tools:
            continue
        if entry.tool == "image":
            if entry.where[0] in scanned_images:
                verdict.unmatched_images.append(entry)
            continue
        (verdict.stale if entry.tool == "bandit" else verdict.unmatched_advisories).append(entry)
    return verdict


# --- the advisory snapshot, served as OSV's query API ----------------------------------------

def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _event(kind: str, text: str) -> tuple[Version, str] | None:
    """One range event as (version, kind), with local labels dropped (`2.6.0+cu124` is the
    release 2.6.0, as the version it is compared with is). The database also holds bounds that
    are not PEP 440: NVD's `2.10.0-NA` and `2.6.0-cu124`, a distribution's `7.2.0-12.1`, a
    package's own `4.6.0.stable11`. Dropping one would leave its range open, so that every
    later release, one fixed years ago included, counted as affected; reading it as its
    leading release would spare 4.6.0.1 to 4.6.0.10, which come before `4.6.0.stable11`. So
    such a `fixed` or `last_affected` bound ends the range at the next release (4.6.1, 7.2.1,
    2.10.1): what lies between is taken as affected, never spared. An `introduced` bound
    with nothing to read opens the range from the start; a closing one with nothing to read
    is dropped, and the range stays open."""
    exact = _version(text)
    if exact is not None:
        return Version(exact.public), kind
    release = re.match(r"(?:\d+!)?\d+(?:\.\d+)*", text)
    if kind == "introduced":
        return (Version(release.group()) if release else Version("0")), kind
    if release is None:
        return None
    start = Version(release.group())
    return Version(f"{start.epoch}!{'.'.join(map(str, (*start.release[:-1], start.release[-1] + 1)))}"), "fixed"


def affects(affected: dict, version: Version) -> bool:
    """OSV's rule for one `affected` entry: the version is listed, or inside an ECOSYSTEM
    range (introduced <= v < fixed, or <= last_affected). A local label is no other release
    (`2.13.0+cpu` is 2.13.0, as PEP 440's `==` and ranges read it); bounds that are not PEP 440
    are read as `_event` says."""
    version = Version(version.public)
    listed = (_version(str(v)) for v in affected.get("versions") or [])
    if version in {Version(v.public) for v in listed if v is not None}:
        return True
    for rng in affected.get("ranges") or []:
        if rng.get("type") != "ECOSYSTEM":
            continue
        events = [event for item in rng.get("events") or [] for kind, text in item.items()
                  if (event := _event(kind, str(text))) is not None]
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
            raise ScanError(f"{path}: the advisory snapshot cannot be read ({error}); rebuild it: python -m "
                            "tests.checks.security snapshot --from <advisory-database clone> --repository URL") from None
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


PYPA_ADVISORIES = "https://github.com/pypa/advisory-database"


# OSV's range events; each is one of these with a version, quoted: YAML reads `fixed: 2.10`
# as the number 2.1.
EVENT_KINDS = {"introduced", "fixed", "last_affected", "limit"}


def _snapshot_record(record: Any) -> dict:
    """What the snapshot keeps of one advisory: its id, aliases, summary (or the start of its
    details), dates and affected ranges and versions; references are left out. ValueError
    names what makes a record no OSV advisory the matcher could read."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(what)

    need(isinstance(record, dict) and isinstance(record.get("id"), str), "it has no id")
    affected = record.get("affected") or []
    need(isinstance(affected, list), "affected is not a list")
    for entry in affected:
        need(isinstance(entry, dict) and isinstance(entry.get("package"), dict)
             and all(isinstance(entry["package"].get(k), str) for k in ("name", "ecosystem")),
             "an affected entry names no package and ecosystem")
        ranges, versions = entry.get("ranges") or [], entry.get("versions") or []
        need(isinstance(ranges, list) and all(isinstance(r, dict) and isinstance(r.get("type"), str)
                                              and isinstance(r.get("events"), list) for r in ranges),
             "a range has no type or events")
        need(all(isinstance(e, dict) and len(e) == 1 and set(e) <= EVENT_KINDS
                 and isinstance(next(iter(e.values())), str) for r in ranges for e in r["events"]),
             f"a range event is not one of {', '.join(sorted(EVENT_KINDS))} with a quoted version")
        need(isinstance(versions, list) and all(isinstance(v, str) for v in versions), "a listed version is not quoted")
    kept = {k: _rfc3339(record[k]) for k in ("id", "aliases", "summary", "published", "modified", "withdrawn")
            if record.get(k) is not None}
    if "summary" not in kept and record.get("details"):
        kept["details"] = " ".join(str(record["details"]).split())[:400]
    kept["affected"] = [{"package": {"name": a["package"]["name"], "ecosystem": a["package"]["ecosystem"]},
                         "ranges": [{"type": r["type"], "events": r["events"]} for r in a.get("ranges") or []],
                         "versions": list(a.get("versions") or [])}
                        for a in affected]
    return json.loads(json.dumps(kept, default=str))


def build_snapshot(git_dir: Path, out: Path, repository: str) -> dict:
    """The snapshot at `out` from a clone (or bare mirror) of github.com/pypa/advisory-database,
    or of a fork that mirrors it; `repository` names where the clone came from. Only a newer
    copy of the database the snapshot at `out` was taken from is taken: its history must hold
    that snapshot's commit, and every advisory that snapshot holds (the database withdraws
    advisories, it does not delete them). Anything else (another repository, an older copy, a
    copy with advisories deleted, a file that is no advisory, a snapshot at `out` that cannot
    be read) is refused in one line and nothing is written."""
    def run(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], input=data, capture_output=True)

    def git(*args: str, data: bytes | None = None) -> bytes:
        done = run(*args, data=data)
        if done.returncode:
            last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise ScanError(f"{git_dir}: git {args[0]} failed ({last}): give a clone of {PYPA_ADVISORIES}")
        return done.stdout

    previous, held = None, set()
    if out.exists():
        try:
            snapshot = json.loads(gzip.decompress(out.read_bytes()))
            previous, held = snapshot["source"]["commit"], {a["id"] for a in snapshot["advisories"]}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ScanError(f"{out}: the snapshot there cannot be read ({type(error).__name__}); "
                            "remove it to build a first one; nothing written") from None
    if not (git_dir / "HEAD").exists():
        git_dir = git_dir / ".git"
    commit, date = git("log", "-1", "--format=%H %cs").decode().split()
    if previous and run("merge-base", "--is-ancestor", previous, commit).returncode:
        raise ScanError(f"{git_dir}: its history does not hold {previous[:12]}, the commit of the snapshot at "
                        f"{out}: not a newer copy of that database; nothing written")
    entries = []  # (blob, path) of each YAML file under vulns/; -z: paths as they are, unquoted
    for record in git("ls-tree", "-r", "-z", "HEAD", "vulns").split(b"\0"):
        if record:
            meta, path = record.split(b"\t", 1)
            if meta.split()[1] == b"blob" and path.endswith(b".yaml"):
                entries.append((meta.split()[2].decode(), path.decode(errors="replace")))
    raw = git("cat-file", "--batch", data="".join(blob + "\n" for blob, _ in entries).encode())
    advisories, position = [], 0
    for _, path in entries:
        end = raw.index(b"\n", position)
        size = int(raw[position:end].split()[2])
        try:
            record = yaml.load(raw[end + 1:end + 1 + size], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            advisories.append(_snapshot_record(record))
        except (yaml.YAMLError, ValueError) as error:
            reason = (str(error).splitlines() or [""])[0]
            raise ScanError(f"{git_dir}: {path} is not an OSV advisory ({reason}); nothing written") from None
        position = end + 1 + size + 1
    if not advisories:
        raise ScanError(f"{git_dir}: no advisories under vulns/: not a copy of {PYPA_ADVISORIES}; nothing written")
    if previous and (missing := sorted(held - {a["id"] for a in advisories})):
        raise ScanError(f"{git_dir}: {len(missing)} advisories the snapshot at {out} holds are not there "
                        f"({', '.join(missing[:3])}...): the database withdraws advisories, it does not delete "
                        "them; nothing written")
    advisories.sort(key=lambda a: a["id"])
    source = {"repository": repository, "commit": commit, "date": date,
              "license": "CC-BY-4.0 (the Python Packaging Advisory Database's contributors)",
              "advisories": len(advisories)}
    text = json.dumps({"source": source, "advisories": advisories}, sort_keys=True, separators=(",", ":"))
    written = None
    try:  # whole or not at all: a new file beside it, then renamed over it
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", delete=False) as handle:
            written = Path(handle.name)
            handle.write(gzip.compress(text.encode(), mtime=0))
        written.replace(out)
    except OSError as error:
        if written is not None:
            written.unlink(missing_ok=True)
        raise ScanError(f"{out}: cannot be written ({error.strerror or error}); nothing written") from None
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


def audit_dependencies(url: str, targets: Sequence[Path]) -> tuple[list[Finding], dict[str, int]]:
    """pip-audit over each environment's installed packages (or pinned requirements files),
    asking the OSV API at `url`, and how many packages it audited in each. One run per
    environment: pip-audit keeps one version per name, and the environments pin some packages
    differently. A finding present in several environments is one finding that names them all."""
    merged: dict[tuple[str, str, str], tuple[Finding, list[str]]] = {}
    audited: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for target in targets:
            dependencies = _pip_audit(url, target, Path(scratch))
            audited[_relative(str(target))] = sum(not d.get("skip_reason") for d in dependencies)
            for dependency in dependencies:
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
            for finding, places in merged.values()], audited


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


# --- ECR's scan of the images ------------------------------------------------------------------

# The severity floor. ECR rates each finding CRITICAL, HIGH, MEDIUM, LOW, INFORMATIONAL or
# UNDEFINED (basic scanning: the distribution's own rating, else NVD's from the CVSS score;
# UNDEFINED when neither rated it), and Amazon Inspector (enhanced scanning) rates it
# CRITICAL, HIGH, MEDIUM, LOW, INFORMATIONAL or UNTRIAGED. Findings rated MEDIUM, LOW or
# INFORMATIONAL are listed (job summary, JSON) and never fail. Every other finding fails
# unless accepted: HIGH and CRITICAL, and also UNDEFINED, UNTRIAGED and any rating this code
# does not know, since a finding nobody has rated is not known to be below HIGH.
LISTED_ONLY = frozenset({"MEDIUM", "LOW", "INFORMATIONAL"})
SEVERITY_ORDER = ("CRITICAL", "HIGH", "UNDEFINED", "UNTRIAGED", "UNSCANNED", "MEDIUM", "LOW", "INFORMATIONAL")
# What ECR's scan status means here (imageScanStatus.status):
# - COMPLETE: the scan finished; its findings are judged.
# - ACTIVE: enhanced scanning with continuous scans (AWS's example answer); judged like
#   COMPLETE once a scan has completed (imageScanFindings.imageScanCompletedAt).
# - UNSUPPORTED_IMAGE: ECR cannot scan the image (an OS basic scanning does not support, or
#   no package database, as in busybox or scratch). Nothing says it is clean, so it is a
#   finding, UNSUPPORTED_IMAGE rated UNSCANNED, that fails unless accepted for that image.
# - anything else (IN_PROGRESS, PENDING, FAILED, FINDINGS_UNAVAILABLE, LIMIT_EXCEEDED,
#   SCAN_ELIGIBILITY_EXPIRED, IMAGE_ARCHIVED, or no status): there are no findings to judge,
#   and the check cannot run (one line, exit 2).
UNSUPPORTED = "UNSUPPORTED_IMAGE"
_REPOSITORY = re.compile(r"^mlplat/(?P<environment>[a-z0-9][a-z0-9-]*)/(?:mirror/)?(?P<name>[^/]+)$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


def _when(value: Any) -> str:
    """A timestamp as the AWS CLI prints it (ISO 8601), or as the API sends it (seconds)."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).isoformat(timespec="seconds")
    return value if isinstance(value, str) else ""


def _short(digest: str) -> str:
    return digest[:19]  # sha256: and 12 hex digits


def _text(value: Any, limit: int = 300) -> str:
    return " ".join(str(value or "").split())[:limit]


def _image_of(path: Path, repository: str) -> str:
    """The image's name in infra/versions.py IMAGES, from the repository it was scanned in."""
    from infra.versions import IMAGES

    match = _REPOSITORY.match(repository)
    image = IMAGES.get(match["name"]) if match else None
    if image is None or image.repository(match["environment"]) != repository:
        raise ScanError(f"{path}: repository {repository!r} is not one of the registry plan's "
                        "(mlplat/<environment>/<image> or mlplat/<environment>/mirror/<image>, infra/versions.py)")
    return image.name


def _list(path: Path, data: dict, key: str) -> list[dict]:
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ScanError(f"{path}: imageScanFindings.{key} is not a list of findings; the file is not what "
                        "aws ecr describe-image-scan-findings prints")
    return items


def read_image_scan(path: Path) -> tuple[ImageScan, list[Finding]]:
    """One `aws ecr describe-image-scan-findings` answer: the scan and its findings. Basic
    scanning's findings[] (name: the CVE, severity, uri, attributes package_name and
    package_version) and enhanced scanning's enhancedFindings[] (packageVulnerabilityDetails:
    vulnerabilityId, relatedVulnerabilities, vulnerablePackages; severity; status, where
    CLOSED findings are gone). A file that is not such an answer, one page of several, or a
    scan that has not finished raises ScanError (one line)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ScanError(f"{path}: cannot be read ({error.strerror or error})") from None
    try:
        data = json.loads(raw)
    except ValueError as error:  # JSONDecodeError, and UnicodeDecodeError for bytes that are no text
        raise ScanError(f"{path}: not JSON ({_text(error, 120)}); it must be what aws ecr "
                        "describe-image-scan-findings --output json prints") from None
    status_block = data.get("imageScanStatus") if isinstance(data, dict) else None
    image_id = data.get("imageId") if isinstance(data, dict) else None
    repository = data.get("repositoryName") if isinstance(data, dict) else None
    if not (isinstance(status_block, dict) and isinstance(image_id, dict) and isinstance(repository, str)):
        raise ScanError(f"{path}: not a describe-image-scan-findings answer (it needs repositoryName, imageId and "
                        "imageScanStatus)")
    digest = image_id.get("imageDigest")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise ScanError(f"{path}: imageId.imageDigest {digest!r} is not a sha256 digest; ask for the image by "
                        "digest (--image-id imageDigest=sha256:...)")
    image = _image_of(path, repository)
    where = f"{image}@{_short(digest)}"
    status = str(status_block.get("status") or "no status")
    description = _text(status_block.get("description"), 200)
    found = data.get("imageScanFindings")
    if found is not None and not isinstance(found, dict):
        raise ScanError(f"{path}: imageScanFindings is not an object; the file is not what aws ecr "
                        "describe-image-scan-findings prints")
    found = found or {}
    completed = _when(found.get("imageScanCompletedAt"))
    kind = "enhanced" if "enhancedFindings" in found or status == "ACTIVE" else "basic"
    if status == UNSUPPORTED:
        scan = ImageScan(image, repository, digest, status, kind)
        return scan, [Finding("image", UNSUPPORTED, where, f"ECR cannot scan this image: {description or status}",
                              ids=(UNSUPPORTED,), severity="UNSCANNED", image=image)]
    if status not in ("COMPLETE", "ACTIVE") or (status == "ACTIVE" and not completed):
        said = f" ({description})" if description else ""
        raise ScanError(f"{path}: the scan of {repository}@{_short(digest)} is {status}{said}, not COMPLETE: no "
                        f"findings to judge; wait for it (aws ecr wait image-scan-complete) and fetch them again")
    if "imageScanFindings" not in data:  # a finished scan always says what it found, if only nothing
        raise ScanError(f"{path}: the scan of {repository}@{_short(digest)} is {status} but the answer has no "
                        "imageScanFindings; fetch it again with aws ecr describe-image-scan-findings")
    if data.get("nextToken") or data.get("NextToken"):
        raise ScanError(f"{path}: one page of the findings of {repository}@{_short(digest)} (it has a next token); "
                        "fetch every page (the AWS CLI does unless --max-items or --no-paginate is given)")
    findings: list[Finding] = []
    basic, enhanced = _list(path, found, "findings"), _list(path, found, "enhancedFindings")
    for index, item in enumerate(basic):
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ScanError(f"{path}: imageScanFindings.findings[{index}] has no name (the vulnerability id), so it "
                            "cannot be judged")
        attributes = {a.get("key"): a.get("value") for a in item.get("attributes") or [] if isinstance(a, dict)}
        package = " ".join(str(attributes[k]) for k in ("package_name", "package_version") if attributes.get(k))
        severity = str(item.get("severity") or "UNDEFINED").upper()
        findings.append(Finding("image", name.strip(), where, _text(item.get("description")), ids=(name.strip(),),
                                package=package, severity=severity, image=image, url=str(item.get("uri") or "")))
    for index, item in enumerate(enhanced):
        details = item.get("packageVulnerabilityDetails")
        vulnerability = details.get("vulnerabilityId") if isinstance(details, dict) else None
        if not isinstance(vulnerability, str) or not vulnerability.strip():
            raise ScanError(f"{path}: imageScanFindings.enhancedFindings[{index}] has no "
                            "packageVulnerabilityDetails.vulnerabilityId, so it cannot be judged")
        if str(item.get("status") or "").upper() == "CLOSED":  # Inspector no longer finds it
            continue
        related = [str(r) for r in details.get("relatedVulnerabilities") or [] if str(r).strip()]
        packages = [p for p in details.get("vulnerablePackages") or [] if isinstance(p, dict)]
        package = ", ".join(" ".join(str(p[k]) for k in ("name", "version") if p.get(k))
                            + (f"-{p['release']}" if p.get("release") else "") for p in packages)
        fixes = tuple(sorted({str(p["fixedInVersion"]) for p in packages
                              if p.get("fixedInVersion") and p["fixedInVersion"] != "NotAvailable"}))
        severity = str(item.get("severity") or "UNTRIAGED").upper()
        findings.append(Finding("image", vulnerability.strip(), where,
                                _text(item.get("description") or item.get("title")),
                                ids=(vulnerability.strip(), *related), fix=fixes, package=package,
                                severity=severity, image=image, url=str(details.get("sourceUrl") or "")))
    counts = found.get("findingSeverityCounts") or {}
    if not isinstance(counts, dict) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                               for n in counts.values()):
        raise ScanError(f"{path}: imageScanFindings.findingSeverityCounts is not a count per severity")
    if sum(counts.values()) > len(basic) + len(enhanced):
        raise ScanError(f"{path}: ECR counts {sum(counts.values())} findings for {repository}@{_short(digest)} but the "
                        f"file holds {len(basic) + len(enhanced)}; fetch every page (the AWS CLI does unless "
                        "--max-items or --no-paginate is given)")
    source_updated = _when(found.get("vulnerabilitySourceUpdatedAt"))
    scan = ImageScan(image, repository, digest, status, kind, completed, source_updated,
                     tuple(sorted(((str(k).upper(), n) for k, n in counts.items() if n), key=_severity_rank)))
    return scan, findings


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _severity_rank(item: tuple[str, Any] | str) -> int:
    severity = item if isinstance(item, str) else item[0]
    return SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else 0


def scan_images(paths: Sequence[Path], accepted_path: Path = ACCEPTED, today: dt.date | None = None) -> Verdict:
    """Judges ECR's scans of images (one describe-image-scan-findings answer per file)."""
    accepted = load_accepted(accepted_path)
    if not paths:
        raise ScanError("no scan findings given: pass each image's aws ecr describe-image-scan-findings answer with "
                        "--findings")
    scans: list[ImageScan] = []
    findings: list[Finding] = []
    for path in paths:
        scan, found = read_image_scan(Path(path))
        scans.append(scan)
        findings += found
    verdict = judge(findings, accepted, today or dt.date.today(), tools=("image",),
                    scanned_images=sorted({s.image for s in scans}))
    verdict.scans = scans
    verdict.title = "Image scan"
    kinds = " and ".join(sorted({s.kind for s in scans}))
    data = sorted(s.source_updated[:10] for s in scans if s.source_updated)
    dated = f", vulnerability data of {data[0]}" + (f" to {data[-1]}" if data[-1] != data[0] else "") if data else ""
    verdict.sources["ECR image scan"] = (
        f"{_count(len({s.image for s in scans}), 'image')}, {_count(len(scans), 'manifest')}, {kinds} scanning in "
        "the in-region "
        f"registry{dated}; severities below HIGH ({', '.join(sorted(LISTED_ONLY, key=_severity_rank))}) are listed, "
        "all others fail unless accepted")
    return verdict


def image_targets(environment: str, platform_images: Any) -> list[tuple[str, str, str]]:
    """(name, repository, digest) of every image of the environment's registry plan (its
    site's: an AWS environment never runs, mirrors or scans a customer-only image such as
    the bare-metal drivers): each mirror at its pin, each platform image as CI recorded its
    build (`tag@digest`, the build step's platform-images). What the deploy judges."""
    from infra.config import site_of
    from infra.versions import BUILT, DIGEST, IMAGES, plan_images

    if not isinstance(platform_images, dict):
        raise ScanError("--platform-images must be the build's record, a JSON object of image name to tag@digest")
    built = {i.name for i in IMAGES.values() if i.built_here}
    unknown = sorted(set(map(str, platform_images)) - built)
    if unknown:
        raise ScanError(f"--platform-images names {unknown[0]!r}, which is not a platform image of infra/versions.py "
                        f"({', '.join(sorted(built))})")
    targets, unpinned, unbuilt = [], [], []
    for image in plan_images(site_of(environment)).values():
        if image.built_here:
            recorded = str(platform_images.get(image.name, ""))
            if not BUILT.match(recorded):
                unbuilt.append(image.name)
                continue
            digest = recorded.split("@", 1)[1]
        elif DIGEST.match(image.digest):
            digest = image.digest
        else:
            unpinned.append(image.name)
            continue
        targets.append((image.name, image.repository(environment), digest))
    if unpinned:
        raise ScanError(f"image(s) {', '.join(unpinned)} have no digest in infra/versions.py, so nothing pinned was "
                        "mirrored to scan; pin each (mlplat mirror refuses them too)")
    if unbuilt:
        raise ScanError(f"platform image(s) {', '.join(unbuilt)} have no tag@digest in --platform-images; the build "
                        "step records one for each")
    return targets


def platforms_of(environment: str) -> list[str]:
    """The platforms the environment's node pools run, as `mlplat mirror` copies them."""
    from infra.catalog import lookup
    from infra.config import ConfigError, load_stack

    try:
        config = load_stack(environment)
    except ConfigError as error:
        raise ScanError(str(error)) from None
    return sorted({lookup(pool.instance_type).platform for pool in config.node_pools})


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
        if advisories == "snapshot":
            snapshot = AdvisorySnapshot()
            with snapshot.serve() as url:
                found, counts = audit_dependencies(url, targets)
            against = snapshot.describe()
        elif advisories == "osv":
            _reachable(osv_url)
            found, counts = audit_dependencies(osv_url, targets)
            against = f"OSV ({osv_url}), {dt.date.today().isoformat()}"
        else:
            raise ScanError(f"--advisories {advisories!r}: use snapshot or osv")
        findings += found
        audited = ", ".join(f"{target} ({count} packages)" for target, count in counts.items())
        sources["pip-audit"] = f"{audited} against {against}"
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
    report = {
        "new": [_finding_row(f, a) for f, a in verdict.new],
        "stale": [{"tool": a.tool, "rule": a.rule, "where": list(a.where)} for a in verdict.stale],
        "accepted": [{**_finding_row(f), "expires": a.expires.isoformat(), "reason": a.reason}
                     for f, a in verdict.accepted],
        "sources": verdict.sources,
    }
    if verdict.scans:
        report["listed"] = [_finding_row(f) for f in verdict.listed]
        report["scans"] = [{**asdict(s), "counts": dict(s.counts)} for s in verdict.scans]
        report["unmatched"] = [{"tool": a.tool, "rule": a.rule, "where": list(a.where)}
                               for a in verdict.unmatched_images]
    return report


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _vulnerability(finding: Finding) -> str:
    return f"[{_cell(finding.rule)}]({finding.url})" if finding.url.startswith("https://") else _cell(finding.rule)


# Rows per table in the Markdown: a job summary holds at most 1 MiB. The JSON has every row.
MARKDOWN_ROWS = 400


def _image_table(findings: Sequence[tuple[Finding, Acceptance | None]], expiry: str = "what") -> list[str]:
    lines = [f"| image | vulnerability | severity | package | {expiry} |", "|---|---|---|---|---|"]
    ordered = sorted(findings, key=lambda fa: (_severity_rank(fa[0].severity), fa[0].where, fa[0].rule))
    for finding, acceptance in ordered[:MARKDOWN_ROWS]:
        if expiry == "expires":
            last = acceptance.expires.isoformat() if acceptance else ""
        else:
            last = finding.what[:160] + (f" (fixed in {', '.join(finding.fix)})" if finding.fix else "")
            if acceptance is not None:
                last += f" (its acceptance expired on {acceptance.expires.isoformat()})"
        lines.append(f"| `{_cell(finding.where)}` | {_vulnerability(finding)} | {finding.severity} | "
                     f"{_cell(finding.package)} | {_cell(last)} |")
    if len(ordered) > MARKDOWN_ROWS:
        lines.append(f"| ... | {len(ordered) - MARKDOWN_ROWS} more, in the JSON report | | | |")
    return lines


def _image_sections(verdict: Verdict) -> list[str]:
    lines = []
    new = [(f, a) for f, a in verdict.new if f.tool == "image"]
    if new:
        lines += _image_table(new) + [""]
        lines.append("Fix each (a newer base or package), or accept it under `images:` in "
                     "`tests/checks/security_accepted.yaml` with a reason and an expiry date.")
        lines.append("")
    lines += [f"<details><summary>{len(verdict.scans)} image manifests scanned</summary>", "",
              "| image | repository | scan | completed | vulnerability data | findings |", "|---|---|---|---|---|---|"]
    for scan in sorted(verdict.scans, key=lambda s: (s.image, s.digest)):
        counts = ", ".join(f"{n} {severity}" for severity, n in scan.counts) or "none"
        lines.append(f"| {scan.image} | `{scan.repository}@{_short(scan.digest)}` | {scan.kind} {scan.status} | "
                     f"{scan.completed or '-'} | {scan.source_updated or '-'} | {counts} |")
    lines += ["", "</details>", ""]
    if verdict.listed:
        lines += [f"<details><summary>{len(verdict.listed)} findings below HIGH (listed, not failing)</summary>", ""]
        lines += _image_table([(f, None) for f in verdict.listed]) + ["", "</details>", ""]
    if verdict.unmatched_images:
        lines.append("Accepted, but not found in the images scanned this run (remove them from "
                     "`tests/checks/security_accepted.yaml` once no environment runs the old image): "
                     + "; ".join(a.label() for a in verdict.unmatched_images))
        lines.append("")
    return lines


def as_markdown(verdict: Verdict) -> str:
    count = len(verdict.new)
    title = f"### {verdict.title}: {count or 'no'} new finding{'' if count == 1 else 's'}"
    if verdict.stale:
        title += f", {len(verdict.stale)} stale acceptance{'' if len(verdict.stale) == 1 else 's'}"
    lines = [title, ""]
    lines += [f"- {tool}: {source}" for tool, source in verdict.sources.items()] + [""]
    code_new = [(f, a) for f, a in verdict.new if f.tool != "image"]
    if code_new:
        lines += ["| tool | finding | where | what |", "|---|---|---|---|"]
        for finding, expired in code_new:
            rule = " / ".join(finding.ids[:3]) if finding.ids else finding.rule
            what = finding.what + (f" (fixed in {', '.join(finding.fix)})" if finding.fix else "")
            if expired is not None:
                what += f" (its acceptance expired on {expired.expires.isoformat()})"
            lines.append(f"| {finding.tool} | {_cell(rule)} | `{_cell(finding.where)}` | {_cell(what)} |")
        lines.append("")
        lines.append("Fix each, or accept it in `tests/checks/security_accepted.yaml` with a reason and an expiry "
                     "date.")
        lines.append("")
    if verdict.scans:
        lines += _image_sections(verdict)
    if verdict.stale:
        lines.append("Accepted, but no longer found (remove from `tests/checks/security_accepted.yaml`): "
                     + "; ".join(f"{a.tool} {a.label()}" for a in verdict.stale))
        lines.append("")
    if verdict.accepted:
        soonest = min(a.expires for _, a in verdict.accepted)
        summary = (f"<details><summary>{len(verdict.accepted)} accepted findings (the first acceptance expires "
                   f"{soonest.isoformat()})</summary>")
        code = [(f, a) for f, a in verdict.accepted if f.tool != "image"]
        images = [(f, a) for f, a in verdict.accepted if f.tool == "image"]
        lines += [summary, ""]
        if code:
            lines += ["| tool | finding | where | expires |", "|---|---|---|---|"]
            lines += [f"| {f.tool} | {_cell(f.rule)} | `{_cell(f.where)}` | {a.expires.isoformat()} |" for f, a in code]
            lines.append("")
        if images:
            lines += _image_table(images, expiry="expires") + [""]
        lines += ["</details>", ""]
    return "\n".join(lines)


def as_text(verdict: Verdict) -> str:
    lines = [f"{tool}: {source}" for tool, source in verdict.sources.items()]
    for finding, expired in verdict.new:
        note = f" (acceptance expired {expired.expires.isoformat()})" if expired else ""
        fix = f" (fixed in {', '.join(finding.fix)})" if finding.fix else ""
        if finding.tool == "image":
            lines.append(f"NEW image {finding.rule} {finding.severity} {finding.where} {finding.package}: "
                         f"{finding.what[:120]}{fix}{note}")
        else:
            lines.append(f"NEW {finding.tool} {finding.rule} {finding.where}: {finding.what}{fix}{note}")
    lines += [f"STALE {a.tool} acceptance {a.label()}: nothing matches it; remove it" for a in verdict.stale]
    lines += [f"note: pip-audit acceptance {a.label()} matched nothing in this run" for a in verdict.unmatched_advisories]
    lines += [f"note: image acceptance {a.label()} matched nothing in this run" for a in verdict.unmatched_images]
    listed = f", {len(verdict.listed)} below HIGH (listed)" if verdict.scans else ""
    lines.append(f"{len(verdict.new)} new, {len(verdict.stale)} stale, {len(verdict.accepted)} accepted findings"
                 f"{listed}")
    return "\n".join(lines)


def write_reports(verdict: Verdict, json_path: Path | None, markdown_path: Path | None) -> int:
    for path, text in ((json_path, json.dumps(as_json(verdict), indent=1)), (markdown_path, as_markdown(verdict))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
    print(as_text(verdict))
    return 1 if verdict.failed else 0


def could_not_run(title: str, error: ScanError, markdown_path: Path | None) -> int:
    print(f"{title.lower()}: {error}", file=sys.stderr)
    if markdown_path is not None:  # the comment or summary says it could not run, never nothing
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(f"### {title}: could not run\n\n{error}\n")
    return 2


def _images_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.checks.security images",
                                     description="Judge ECR's scan of images: new findings fail.")
    parser.add_argument("--findings", type=Path, nargs="+", required=True, metavar="FILE",
                        help="what aws ecr describe-image-scan-findings printed, one file per image manifest")
    parser.add_argument("--accepted", type=Path, default=ACCEPTED)
    parser.add_argument("--json", type=Path, help="write the findings as JSON")
    parser.add_argument("--markdown", type=Path, help="write the findings as Markdown (the job summary's part)")
    opts = parser.parse_args(argv)
    try:
        verdict = scan_images(opts.findings, opts.accepted)
    except ScanError as error:
        return could_not_run("Image scan", error, opts.markdown)
    return write_reports(verdict, opts.json, opts.markdown)


def _image_targets_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.checks.security image-targets",
                                     description="Print `name repository digest platforms` for each image the "
                                     "environment's registry holds.")
    parser.add_argument("--stack", required=True, help="the environment (a cloud-layer stack, or its cluster layer)")
    parser.add_argument("--platform-images", required=True, metavar="JSON",
                        help="the build step's record: {image name: tag@digest}")
    opts = parser.parse_args(argv)
    environment = opts.stack.removesuffix("-cluster")
    try:
        try:
            built = json.loads(opts.platform_images)
        except ValueError:
            raise ScanError("--platform-images is not JSON; it is the build step's record, {image name: tag@digest}") \
                from None
        targets = image_targets(environment, built)
        platforms = ",".join(platforms_of(environment))
    except ScanError as error:
        print(f"image targets: {error}", file=sys.stderr)
        return 2
    for name, repository, digest in targets:
        print(name, repository, digest, platforms)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["images"]:
        return _images_main(argv[1:])
    if argv[:1] == ["image-targets"]:
        return _image_targets_main(argv[1:])
    if argv[:1] == ["snapshot"]:
        parser = argparse.ArgumentParser(prog="python -m tests.checks.security snapshot")
        parser.add_argument("--from", dest="source", type=Path, required=True,
                            help="a clone (or bare mirror) of github.com/pypa/advisory-database, or of a fork "
                            "whose history holds it")
        parser.add_argument("--repository", required=True,
                            help=f"where the clone came from, recorded in the snapshot: {PYPA_ADVISORIES}, "
                            "or the fork's address")
        parser.add_argument("--output", type=Path, default=SNAPSHOT,
                            help="the snapshot to replace (default: the committed one)")
        opts = parser.parse_args(argv[1:])
        try:
            source = build_snapshot(opts.source, opts.output, repository=opts.repository)
        except ScanError as error:
            print(f"snapshot: {error}", file=sys.stderr)
            return 2
        print(f"{opts.output}: {source['advisories']} advisories at {source['commit'][:12]} "
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
        return could_not_run("Security scan", error, opts.markdown)
    return write_reports(verdict, opts.json, opts.markdown)


if __name__ == "__main__":
    sys.exit(main())
