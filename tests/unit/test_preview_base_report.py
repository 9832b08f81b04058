"""`mlplat preview --against BASE` given a hostile or careless base report: each is one line
naming what is wrong (and where, as a JSON path), exit 2, in bounded time and memory; the
diff then reads only what the check vouched for. Beside the tricks, the look-alike that
must pass: a real report the preview wrote. The PR comment (the diff's Markdown and the
report's) shows every name, level, URN and message as text: no HTML, no broken table.
The property-based tests feed the reader and the diff whatever Hypothesis makes of a
report: a diff or one BaseReportError line, never another exception."""

from __future__ import annotations

import copy
import json
import os
import re
import resource
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from infra import cli
from infra.preview.analyzer import PolicyDescription, Verdict, Violation
from infra.preview.diff import (
    BASE_REPORT_LIMIT,
    BaseReportError,
    as_read,
    changed_paths,
    check_base_report,
    diff_json,
    diff_markdown,
    diff_reports,
    diff_text,
    read_base_report,
)
from infra.preview.markdown import md_code, md_text
from infra.preview.report import PreviewResult, to_markdown, write_json
from tests.unit.test_report_diff import BUCKET, DEPLOY, report

HOSTILE = "a|b\nc <img src=x onerror=alert(1)> <!-- d --> <script>e</script> `f` [g](http://h) ![i](j) @org/team"
# The HTML a comment may hold: the renderings' own tags, none from a value.
OUR_TAGS = re.compile(r"</?(code|sub|details|summary)>")


def one_line(err: BaseException) -> str:
    message = str(err)
    assert "\n" not in message and len(message) < 1000, message[:1200]
    return message


def refused(path: Path | str, stack: str = "dev") -> str:
    """read_base_report's one line for `path`, within seconds."""
    started = time.perf_counter()
    with pytest.raises(BaseReportError) as caught:
        read_base_report(Path(path), stack)
    assert time.perf_counter() - started < 5
    return one_line(caught.value)


def written(tmp_path: Path, data: Any, name: str = "base.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# --- the file ---------------------------------------------------------------------------------

HOSTILE_FILES = [
    ("deep", "[" * 100_000 + "]" * 100_000, "nested more than 64 deep"),
    ("deep-in-report", json.dumps(report()).replace('"mlplat-dev-data"', "[" * 100_000 + "]" * 100_000),
     "nested more than 64 deep"),
    ("bigint", json.dumps(report()).replace('"seconds": 1.0', '"seconds": ' + "9" * 5000),
     "an integer of 5,000 digits"),
    ("nan", json.dumps(report()).replace('"seconds": 1.0', '"seconds": NaN'), "NaN is not JSON"),
    ("huge-float", json.dumps(report()).replace('"seconds": 1.0', '"seconds": 1e999'), "is out of range"),
    ("syntax", '{"stack": "dev", ', "is not JSON (line 1, column 18"),
]


@pytest.mark.parametrize("name, text, says", HOSTILE_FILES, ids=[f[0] for f in HOSTILE_FILES])
def test_a_hostile_base_report_is_one_line(tmp_path, name, text, says):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message = refused(written(tmp_path, text))
    assert says in message and message.startswith("base report "), message
    assert "mlplat preview --stack dev --json PATH" in message  # how to get a good one
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024


def test_what_is_not_a_regular_file_is_refused_unread(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # would block a plain open forever
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    assert "/dev/zero: is a character device, not a base report" in refused("/dev/zero")
    assert "/dev/urandom: is a character device, not a base report" in refused("/dev/urandom")
    assert "is a character device, not a base report" in refused(tmp_path / "zero.json")
    assert "is a FIFO (named pipe), not a base report" in refused(tmp_path / "fifo")
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: the size alone refuses it
        f.truncate(BASE_REPORT_LIMIT + 1)
    assert f"a base report may be at most {BASE_REPORT_LIMIT:,}" in refused(big)


def test_the_size_limit_holds_the_largest_real_report_and_bounds_the_worst():
    # prod-cluster's report was 6.9 MB when the limit was set; CI reads it as a base. A file
    # at the limit of the costliest JSON to read (millions of `{}`) must still be refused in
    # seconds and well under a gigabyte: 16 MiB came near it.
    assert 1.5 * 6_900_000 <= BASE_REPORT_LIMIT < 16 << 20


# --- the shape: every field the diff reads, with its type ------------------------------------

def mutated(change) -> dict:
    data = report()
    change(data)
    return data


def violation(**fields) -> dict:
    return {"policy": "k8s-images-pinned", "level": "mandatory", "urn": DEPLOY, "message": "unpinned", **fields}


DAMAGED = [
    # The red team's: each passed the old check and crashed the diff.
    ("engineErrors", lambda d: d.update(engineErrors=5), "engineErrors: is an integer, not a list"),
    ("no-level", lambda d: d.update(violations=[{k: v for k, v in violation().items() if k != "level"}]),
     "violations[0].level: missing"),
    ("list-urn", lambda d: d.update(violations=[violation(), violation(urn=["a"])]),
     "violations[1].urn: is a list, not a string"),
    ("evidence", lambda d: d["resources"][0].update(evidence={"failed": 5}),
     "resources[0].evidence.failed: is an integer, not a list"),
    ("metadata", lambda d: d["resources"][3]["inputs"].update(metadata="kueue"),
     "resources[3].inputs.metadata: is a string, not an object"),
    ("parent", lambda d: d["resources"][3].update(parent=[DEPLOY]), "resources[3].parent: is a list, not a string"),
    # More of what the diff reads.
    ("object-name", lambda d: d["resources"][3]["inputs"]["metadata"].update(name=["x"]),
     "resources[3].inputs.metadata.name: is a list, not a string"),
    ("object-kind", lambda d: d["resources"][3]["inputs"].update(kind={"k": 1}),
     "resources[3].inputs.kind: is an object, not a string"),
    ("urn", lambda d: d["resources"][1].pop("urn"), "resources[1].urn: missing"),
    ("type", lambda d: d["resources"][1].update(type=None), "resources[1].type: is null, not a string"),
    ("inputs", lambda d: d["resources"][1].update(inputs=[]), "resources[1].inputs: is a list, not an object"),
    ("resource", lambda d: d["resources"].append("x"), "resources[4]: is a string, not an object"),
    ("protect", lambda d: d["resources"][0].update(protect="yes"), "resources[0].protect: is a string, not true or"),
    ("passed-names", lambda d: d["resources"][0]["evidence"].update(passed=[1]),
     "resources[0].evidence.passed[0]: is an integer, not a string"),
    ("message", lambda d: d.update(violations=[violation(message=None)]), "violations[0].message: is null"),
    ("policy-count", lambda d: d["policies"][0].update(failed="0"), "policies[0].failed: is a string, not an integer"),
    ("count-bool", lambda d: d["policies"][0].update(checked=True), "policies[0].checked: is true, not an integer"),
    ("count-negative", lambda d: d["policies"][1].update(passed=-1), "policies[1].passed: is -1, below 0"),
    ("policy-level", lambda d: d["policies"][1].pop("level"), "policies[1].level: missing"),
    ("errors", lambda d: d.update(engineErrors=["ok", {"e": 1}]), "engineErrors[1]: is an object, not a string"),
    ("summary", lambda d: d.update(summary={"passed": "true"}), "summary.passed: is a string, not true or false"),
    ("region", lambda d: d.update(region=["me-central-1"]), "region: is a list, not a string"),
    ("stack", lambda d: d.update(stack=5), "stack: is an integer, not a string"),
]


@pytest.mark.parametrize("name, change, says", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_base_report_names_the_json_path(tmp_path, name, change, says):
    message = refused(written(tmp_path, mutated(change)))
    assert f"is a damaged report: {says}" in message, message


def test_the_old_reports_and_other_versions_keep_their_words():
    with pytest.raises(BaseReportError, match="is report version True, and this mlplat reads version 1"):
        check_base_report(report(reportVersion=True), "dev")
    with pytest.raises(BaseReportError, match="is report version 'xxx") as caught:
        check_base_report(report(reportVersion="x" * 10_000), "dev")
    assert len(one_line(caught.value)) < 400  # quoted short
    with pytest.raises(BaseReportError, match="is the preview of stack 'prod', not 'dev'"):
        check_base_report(report(stack="prod"), "dev")


def test_a_million_bad_items_is_one_error_found_at_once():
    started = time.perf_counter()
    for data in (report(resources=[{"type": 1, "name": 2, "inputs": 3, "evidence": 4}] * 200_000),
                 report(engineErrors=[1] * 1_000_000)):
        with pytest.raises(BaseReportError, match=r"\[0\]"):
            check_base_report(data, "dev")
    assert time.perf_counter() - started < 2


# --- the diff of a base within the limits -----------------------------------------------------

def test_a_base_list_of_a_million_leaves_is_one_change_not_a_million():
    base = report()
    base["resources"][0]["inputs"]["bucket"] = [0] * 1_000_000
    head = report()
    head["resources"][0]["inputs"]["bucket"] = [1]
    started = time.perf_counter()
    diff = diff_reports(check_base_report(base, "dev"), head)
    [change] = diff.resources
    assert [p.path for p in change.paths] == ["(whole value)"]
    diff_text(diff), diff_markdown(diff), json.dumps(diff_json(diff))
    assert time.perf_counter() - started < 5
    # Within the limit, each leaf is its own change.
    assert len(changed_paths({"a": list(range(50))}, {"a": []}, limit=50)) == 50
    assert changed_paths({"a": list(range(51))}, {"a": []}, limit=50)[0].path == "(whole value)"


def test_many_rules_and_violations_in_the_base_render_in_bounded_time_and_size():
    base = report()
    base["policies"] += [{"policy": f"p{i}", "level": "mandatory", "checked": 1, "passed": 0, "failed": 1}
                         for i in range(5_000)]
    base["violations"] = [violation(policy=f"p{i % 5_000}", message=f"m{i}") for i in range(20_000)]
    started = time.perf_counter()
    diff = diff_reports(check_base_report(base, "dev"), report())
    assert len(diff.flips) == 5_000
    markdown = diff_markdown(diff)
    assert len(markdown) < 7_500 and "more not shown here" in markdown
    assert sum(p["flipped"] for p in diff_json(diff)["policies"]) == 5_000
    diff_text(diff)
    assert time.perf_counter() - started < 5


# --- the CLI ----------------------------------------------------------------------------------

@pytest.fixture
def no_preview(monkeypatch):
    import infra.preview.engine as engine

    def never(*_args, **_kwargs):
        raise AssertionError("the preview ran before the base was checked")

    monkeypatch.setattr(engine, "run_preview", never)


@pytest.mark.parametrize("base, says", [
    ("/dev/zero", "/dev/zero: is a character device, not a base report"),
    ("fifo", "is a FIFO (named pipe), not a base report"),
    ("deep", "nested more than 64 deep"),
    ("damaged", "is a damaged report: engineErrors: is an integer, not a list"),
])
def test_the_cli_says_one_line_and_exits_2_before_anything_runs(tmp_path, capsys, no_preview, base, says):
    os.mkfifo(tmp_path / "fifo")
    written(tmp_path, "[" * 100_000 + "]" * 100_000, "deep")
    written(tmp_path, report(engineErrors=5), "damaged")
    out = tmp_path / "out"
    started = time.perf_counter()
    code = cli.main(["preview", "--stack", "dev", "--against", base if base.startswith("/") else str(tmp_path / base),
                     "--json", str(out / "r.json"), "--diff-markdown", str(out / "d.md")])
    captured = capsys.readouterr()
    assert time.perf_counter() - started < 10
    lines = captured.err.strip().splitlines()
    assert code == cli.EXIT_BAD_INPUT and len(lines) == 1, captured.err[-2000:]
    assert lines[0].startswith("mlplat: error: base report") and says in lines[0], lines[0]
    assert captured.out == "" and not out.exists()


# --- a real report: the look-alike -----------------------------------------------------------

@cache
def real_report() -> dict:
    """dev-cluster's report as `mlplat preview --json` writes it and a reader reads it back:
    charts, their Kubernetes objects, CRDs, evidence."""
    from tests.conftest import preview

    return as_read(preview("dev-cluster").report)


def test_a_real_report_passes_and_diffs_to_nothing(tmp_path):
    from tests.conftest import preview

    result = preview("dev-cluster")
    write_json(result, tmp_path / "dev-cluster.json")
    base = read_base_report(tmp_path, "dev-cluster")  # a folder `--out` wrote
    diff = diff_reports(base, as_read(result.report))
    assert not diff.changed and diff.summary() == "dev-cluster: no changes; verdict passed"


# --- Markdown: names and values as text --------------------------------------------------------

def assert_safe(markdown: str) -> None:
    """No HTML but the renderings' own tags, and every table row's cells as the header's."""
    text = OUR_TAGS.sub("", markdown).replace("`<stack>.diff.json`", "")  # our own code span
    assert "<" not in text and ">" not in text, [line for line in text.splitlines() if "<" in line or ">" in line]
    columns = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            columns = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        columns = columns or cells
        assert cells == columns, line


def test_md_text_and_md_code_show_a_value_as_written_and_nothing_more():
    assert md_text(HOSTILE) == (r"a\|b c &lt;img src=x onerror=alert(1)&gt; &lt;!-- d --&gt; "
                                r"&lt;script&gt;e&lt;/script&gt; \`f\` \[g\](http://h) !\[i\](j) @org/team")
    assert md_code("kueue-system") == "`kueue-system`"
    assert md_code("a`b") == r"<code>a\`b</code>" and md_code("a|b") == r"<code>a\|b</code>"
    assert md_code("<b>") == "<code>&lt;b&gt;</code>"
    assert len(md_text("x" * 100_000)) == 1_000


def hostile_diff():
    """A base and a head whose names, levels, URNs and messages all try to break out."""
    name = f"rule {HOSTILE}"
    base = report(region=f"me-central-1 {HOSTILE}", engineErrors=[f"old {HOSTILE}"])
    base["policies"].append({"policy": name, "level": HOSTILE, "checked": 1, "passed": 1, "failed": 0})
    base["policies"].append({"policy": f"counted {HOSTILE}", "level": HOSTILE, "checked": 1, "passed": 1, "failed": 0})
    base["violations"] = [violation(policy=f"other {HOSTILE}", level=HOSTILE, message=HOSTILE, urn=HOSTILE)]
    head = report(region=f"eu-central-1 {HOSTILE}", engineErrors=[f"new {HOSTILE}"], summary={"passed": False})
    head["policies"].append({"policy": name, "level": HOSTILE, "checked": 1, "passed": 0, "failed": 1})
    head["policies"].append({"policy": f"counted {HOSTILE}", "level": HOSTILE, "checked": 2, "passed": 2, "failed": 0})
    head["violations"] = [violation(policy=name, level=HOSTILE, message=HOSTILE, urn=f"urn {HOSTILE}")]
    added = {**copy.deepcopy(head["resources"][0]), "urn": f"{BUCKET}{HOSTILE}", "name": HOSTILE,
             "type": f"aws:s3/bucket:Bucket{HOSTILE}", "evidence": {"passed": [], "failed": [name]}}
    head["resources"].append(added)
    head["resources"][3]["inputs"]["metadata"]["name"] = HOSTILE
    head["resources"][3]["inputs"]["spec"] = HOSTILE
    head["resources"][0]["inputs"]["tags"] = {HOSTILE: HOSTILE}
    return diff_reports(check_base_report(base, "dev"), head)


def test_the_diff_markdown_shows_hostile_names_as_text():
    diff = hostile_diff()
    assert diff.flips and diff.violations_new and diff.violations_resolved and diff.objects
    markdown = diff_markdown(diff)
    assert_safe(markdown)
    assert "&lt;img src=x onerror=alert(1)&gt;" in markdown and "&lt;!-- d --&gt;" in markdown
    assert "a\\|b" in markdown and "\\[g\\](http://h)" in markdown
    # The evidence table: its rows end where they should.
    assert any(line.startswith("| <code>counted") for line in markdown.splitlines())


def test_the_report_markdown_shows_hostile_names_as_text():
    rule = PolicyDescription(name=f"rule {HOSTILE}", description=HOSTILE, level=HOSTILE,
                             framework={"name": HOSTILE, "reference": "1.2|3"}, config_schema={}, stack_policy=True)
    verdict = Verdict(policies=[rule], violations=[Violation(rule.name, HOSTILE, f"urn::{HOSTILE}", HOSTILE)])
    result = PreviewResult(stack="dev", region=HOSTILE, registrations=[], verdict=verdict,
                           engine_errors=[HOSTILE], seconds=1.0)
    markdown = to_markdown(result)
    assert_safe(markdown)
    assert "| policy | level | resource | message |" in markdown and "&lt;script&gt;" in markdown


# --- property-based: the reader and the diff ------------------------------------------------

TEXT = st.text(max_size=12) | st.sampled_from(["|", "\n", "<!--", "<img src=x onerror=alert(1)>", "`", "](x)", "\\",
                                               "\u2028", "\x1b[31m"])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12)


def outcome(data: Any, head: dict) -> None:
    """The check's verdict on `data` as a base of `head`'s stack: one line, or a diff that
    renders, HTML-free."""
    try:
        base = check_base_report(data, head["stack"])
    except BaseReportError as err:
        one_line(err)
        return
    diff = diff_reports(base, head)
    diff_text(diff)
    assert_safe(diff_markdown(diff))
    json.dumps(diff_json(diff))


def either(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly what the field holds (five times in six), sometimes anything."""
    return st.one_of(*[valid] * 5, JSONISH)


NAMES = either(st.sampled_from(["k8s-images-pinned", "aws-resources-in-allowed-regions", BUCKET, DEPLOY]) | TEXT)
TYPES = either(st.sampled_from(["aws:s3/bucket:Bucket", "kubernetes:apps/v1:Deployment", "kubernetes:helm.sh/v4:Chart"])
               | TEXT)
OBJECT = st.fixed_dictionaries({}, optional={
    "apiVersion": either(TEXT), "kind": either(TEXT), "spec": JSONISH,
    "metadata": either(st.fixed_dictionaries({}, optional={"name": either(TEXT), "namespace": either(TEXT)}))})
RESOURCE = st.fixed_dictionaries({"urn": NAMES, "type": TYPES, "name": NAMES, "inputs": either(OBJECT)}, optional={
    "parent": either(st.none() | NAMES), "protect": either(st.booleans()),
    "evidence": either(st.fixed_dictionaries({}, optional={"passed": either(st.lists(NAMES, max_size=3)),
                                                           "failed": either(st.lists(NAMES, max_size=3))}))})
COUNT = either(st.integers(min_value=0, max_value=3))
VIOLATION = st.fixed_dictionaries({"policy": NAMES, "level": NAMES, "message": NAMES},
                                  optional={"urn": either(st.none() | NAMES)})
POLICY_ROW = st.fixed_dictionaries({"policy": NAMES, "level": NAMES, "checked": COUNT, "passed": COUNT,
                                    "failed": COUNT})
REPORT = st.fixed_dictionaries({
    "reportVersion": st.just(1), "stack": st.just("dev"), "region": either(TEXT),
    "resources": st.lists(either(RESOURCE), max_size=4),
    "violations": either(st.lists(either(VIOLATION), max_size=3)),
    "policies": either(st.lists(either(POLICY_ROW), max_size=3)),
    "engineErrors": either(st.lists(TEXT, max_size=2)),
    "summary": either(st.fixed_dictionaries({"passed": st.booleans()})),
})


@pytest.mark.fuzz
@given(REPORT | JSONISH)
@example({"reportVersion": 1, "stack": "dev", "resources": [], "region": "r", "violations": [], "policies": [],
          "engineErrors": [], "summary": {"passed": True}})
@example(report(engineErrors=5))
def test_any_json_value_is_a_base_or_one_line(data):
    outcome(data, report())


@cache
def seed_paths(seed: str) -> tuple[tuple[Any, ...], ...]:
    """Every place in a seed report: its containers and leaves, by keys and indices."""
    found, stack = [], [((), seeds()[seed])]
    while stack:
        path, value = stack.pop()
        found.append(path)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend((path + (key,), child) for key, child in items)
    return tuple(sorted(found, key=repr))


@cache
def seeds() -> dict[str, dict]:
    """The hand-made report, and dev-cluster's real one cut to its small resources (each
    example copies only the path it changes, but the diff reads the whole report)."""
    real = real_report()
    small = [r for r in real["resources"] if len(json.dumps(r)) < 3_000]
    return {"made": report(), "real": {**real, "resources": small[:60]}}


def changed_at(data: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    """`data` with the value at `path` replaced, removed or given a stray entry; the
    containers on the path are copied, the rest shared."""
    if not path:
        return value if how != "stray" else data
    key, rest = path[0], path[1:]
    copied = dict(data) if isinstance(data, dict) else list(data)
    if rest:
        copied[key] = changed_at(data[key], rest, how, value)
    elif how == "remove":
        del copied[key]
    elif how == "stray" and isinstance(data[key], dict):
        copied[key] = {**data[key], "stray": value}
    elif how == "stray" and isinstance(data[key], list):
        copied[key] = [*data[key], value]
    else:
        copied[key] = value
    return copied


OBJECT_ONLY_IN_BASE = {"urn": "urn:pulumi:dev::mlplat::kubernetes:core/v1:ConfigMap::gone", "name": "gone",
                       "type": "kubernetes:core/v1:ConfigMap", "inputs": {"apiVersion": "v1", "kind": "ConfigMap"}}


@pytest.fixture(scope="module")
def previewed() -> None:
    """The real seed made before Hypothesis runs (a preview sets the recursion limit)."""
    seeds()


@pytest.mark.fuzz
@given(st.sampled_from(["made", "real"]), st.data(), st.sampled_from(["replace", "remove", "stray"]), JSONISH)
# The red team's, where the diff reads the base's own record: a violation the head resolved,
# a Kubernetes object the head removed.
@example("made", ("violations",), "stray", {"policy": "p", "urn": None, "message": "m"})
@example("made", ("violations",), "stray", {"policy": "p", "level": "mandatory", "urn": ["u"], "message": "m"})
@example("made", ("engineErrors",), "replace", 5)
@example("made", ("resources",), "stray", {**OBJECT_ONLY_IN_BASE, "evidence": {"failed": 5}})
@example("made", ("resources",), "stray", {**OBJECT_ONLY_IN_BASE, "parent": ["x"]})
@example("made", ("resources",), "stray", {**OBJECT_ONLY_IN_BASE, "inputs": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                             "metadata": "kueue"}})
def test_any_change_to_a_real_report_is_a_base_or_one_line(previewed, seed, where, how, value):
    data = seeds()[seed]
    if not isinstance(where, tuple):
        where = where.draw(st.sampled_from(seed_paths(seed)))
    outcome(changed_at(data, where, how, value), data)


@pytest.mark.fuzz
@given(st.binary(max_size=1024) | JSONISH.map(lambda v: json.dumps(v).encode()))
@example(b"\xef\xbb\xbf{}")  # a byte-order mark
@example(b'{"a": 1e400}')
@example(b"[" * 5000)
def test_any_file_is_a_base_or_one_line(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("fuzz") / "base.json"
    path.write_bytes(content)
    try:
        read_base_report(path, "dev")
    except BaseReportError as err:
        one_line(err)


def test_the_storage_section_escapes_names_keys_and_regions():
    from infra.preview.storage_report import StorageRow, storage_markdown

    rows = [StorageRow(kind="S3 bucket", name="a|b`<img src=x onerror=alert(1)>", key="arn:aws:kms:x|y",
                       region="me-central-1\n| injected | row |", urn="urn:a"),
            StorageRow(kind="ECR repository", name="repo`|x", key="", region="me-central-1", urn="urn:b")]
    lines = storage_markdown(rows)
    table = [line for line in lines if line.startswith("| ")][1:]
    assert len(table) == 2 and all(line.count(" | ") == 3 for line in table), table
    assert "<img" not in "\n".join(lines) and "&lt;img" in "\n".join(lines)
