"""Stack files and output paths as a careless user or an attacker hands them to `mlplat
preview`: each is one line naming what is wrong, exit 2, nothing written, in bounded time
and memory. Beside each trick, the look-alike that must still pass. The property-based
tests feed the stack-file reader and the config parser whatever Hypothesis makes of them:
a parsed config or one ConfigError line, never another exception."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from infra import cli
from infra.config import ConfigError, load_layer, parse_layer_config, read_stack_document, read_stack_file

REPO = Path(__file__).resolve().parents[2]
DEV = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()


def stack_dir(tmp_path: Path, name: str, text: str | None = None) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir(exist_ok=True)
    if text is not None:
        (folder / f"Pulumi.{name}.yaml").write_text(text)
    return folder


def refused(tmp_path: Path, name: str) -> str:
    """load_layer's one line for stacks/Pulumi.<name>.yaml, in bounded time."""
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_layer(name, tmp_path / "stacks")
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message[:500]
    assert time.perf_counter() - started < 10
    return message


def laughs(field: str) -> str:
    """A billion-laughs document whose last alias lands in a real field (9^9 values)."""
    lines = ["x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + DEV.replace("config:\n", f"config:\n  {field}: *a8\n", 1)


@pytest.mark.parametrize("name, text, says", [
    ("nested", "config:\n  mlplat:owner: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested more than 64 deep"),
    ("bigint", DEV.replace("config:\n", "config:\n  mlplat:extra: " + "9" * 5000 + "\n", 1),
     "an integer of 5,000 digits"),
    ("intkey", DEV + "  1: x\n", "key '1' is not a string; quote it"),
    ("nullkey", DEV + "  ~: x\n", "key '~' is not a string; quote it"),
    ("laughs", laughs("mlplat:owner"), "aliases expand to more than 1,000,000 values"),
    # The Pulumi CLI refuses duplicate keys; a second residency must not widen the allow-list.
    ("dup", DEV + "  mlplat:residency:\n    allowedRegions: [me-central-1, us-east-1]\n",
     "key 'mlplat:residency' appears twice (first on line"),
    ("huge", DEV.replace("config:\n", "config:\n  mlplat:owner: " + "x" * 5_000_000 + "\n", 1),
     "a stack file may be at most 1,048,576"),
    ("newline", DEV.replace("mlplat:owner: ml-platform", 'mlplat:owner: "ml\\nplatform"'),
     "mlplat:owner: 'ml\\nplatform' holds '\\n', which AWS tag values do not allow"),
    ("escape", DEV.replace("mlplat:owner: ml-platform", 'mlplat:owner: "ml\\e[31m"'), "holds '\\x1b'"),
    ("long", DEV.replace("mlplat:owner: ml-platform", "mlplat:owner: " + "o" * 257),
     "mlplat:owner: is 257 characters; an AWS tag value may have at most 256"),
    ("longcost", DEV.replace("mlplat:costCenter: ml-dev", "mlplat:costCenter: " + "c" * 900),
     "mlplat:costCenter: is 900 characters; an AWS tag value may have at most 256"),
])
def test_a_hostile_stack_file_is_one_line(tmp_path, name, text, says):
    stack_dir(tmp_path, name, text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message = refused(tmp_path, name)
    assert says in message, message
    # Bounded memory: the 5 MB file is refused from its size, the laughs from their count.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024


def test_what_is_not_a_regular_file_is_refused_by_what_it_is(tmp_path):
    folder = stack_dir(tmp_path, "x")
    (folder / "Pulumi.self.yaml").symlink_to(folder / "Pulumi.self.yaml")
    (folder / "Pulumi.zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(folder / "Pulumi.fifo.yaml")
    (folder / "Pulumi.dir.yaml").mkdir()
    (folder / "Pulumi.dangling.yaml").symlink_to(folder / "nowhere.yaml")
    assert "is a symbolic link that loops" in refused(tmp_path, "self")
    assert "is a character device, not a stack file" in refused(tmp_path, "zero")
    assert "is a FIFO (named pipe), not a stack file" in refused(tmp_path, "fifo")  # never blocks
    assert "is a directory, not a stack file" in refused(tmp_path, "dir")
    assert "no such file" in refused(tmp_path, "dangling")


def test_another_files_content_is_never_quoted_back(tmp_path):
    # A stack file linked to /etc/shadow (here a file like it): its first line is a secret.
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$s3cr3tSALT$hashhashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    (stack_dir(tmp_path, "x") / "Pulumi.linked.yaml").symlink_to(shadow)
    said = refused(tmp_path, "linked").split("Pulumi.linked.yaml: ", 1)[1]
    assert "s3cr3t" not in said and "root" not in said and "19000" not in said
    assert said.startswith("does not look like a stack file")


def test_look_alikes_pass(tmp_path):
    """A link to a real stack file, merge keys that override what they merge, a Unicode
    owner with a space, and a misspelt top-level key (still named, it is a key)."""
    folder = stack_dir(tmp_path, "real", DEV)
    (folder / "Pulumi.linked.yaml").symlink_to(folder / "Pulumi.real.yaml")
    assert load_layer("linked", folder).owner == "ml-platform"
    merged = DEV.replace("config:\n", "x-base: &base {a: 1, b: 2}\nconfig:\n", 1)
    document = yaml.safe_load(merged)
    assert document["x-base"] == {"a": 1, "b": 2}
    (folder / "Pulumi.merge.yaml").write_text("config:\n  x: &b {k: 1, j: 2}\n  y:\n    <<: *b\n    k: 3\n")
    assert read_stack_file(folder / "Pulumi.merge.yaml")["y"] == {"k": 3, "j": 2}
    (folder / "Pulumi.unicode.yaml").write_text(DEV.replace("mlplat:owner: ml-platform", "mlplat:owner: équipe ML"))
    assert load_layer("unicode", folder).owner == "équipe ML"
    (folder / "Pulumi.typo.yaml").write_text(DEV.replace("config:", "confg:", 1))
    with pytest.raises(ConfigError, match="confg: unknown top-level key; did you mean `config`"):
        read_stack_document(folder / "Pulumi.typo.yaml")


# --- output paths, checked before any work ------------------------------------------------

def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("args, says", [
    (["--json", "folder"], "folder: is a directory; name the file to write the JSON report to"),
    (["--json", "/dev/full"], "/dev/full: is a character device; name a regular file to write the JSON report to"),
    (["--markdown", "afile/report.md"], "is not a directory, so the Markdown report cannot be written under it"),
    (["--manifests", "afile"], "afile: is not a directory; name a folder for the Kubernetes manifests"),
    (["--against", "base.json", "--diff-markdown", "folder"], "folder: is a directory; name the file to write the "
                                                              "diff Markdown to"),
    (["--policy-config", "policies/config/dev.jsn"], "no such policy pack config"),
    (["--policy-config", "folder"], "folder: is a directory, not a policy pack config"),
    (["--policy-config", "deep.json"], "nested more than 64 deep"),
])
def test_an_output_or_config_path_that_cannot_be_used_is_one_line_before_any_work(tmp_path, args, says):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("a file\n")
    (tmp_path / "base.json").write_text("{}")
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "policies" / "config").mkdir(parents=True)
    done = run_cli("preview", "--stack", "dev", *[str(REPO / a) if a.startswith("policies/") else a for a in args],
                   cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    # One line: no progress line either, so nothing ran (the output checks come first; the
    # policy config is read before the pack starts).
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "base.json", "deep.json", "folder", "policies"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_the_diagram_output_is_checked_before_the_preview(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    assert cli.main(["diagram", "--stack", "dev", "--output", str(tmp_path / "folder")]) == 2
    assert capsys.readouterr().err.strip() == f"mlplat: error: {tmp_path / 'folder'}: is a directory; name the file " \
                                              "to write the diagram to"


# --- property-based: the reader and the parser ---------------------------------------------

@pytest.mark.fuzz
@given(st.binary(max_size=2048))
@example(b"config:\n  a: &x [*x]\n")  # an alias of itself
@example(b"config: !!binary AAAA\n")
@example("config:\n  mlplat:owner: \ud7ff\n".encode())
@example(b'config:\n  "mlplat:x\\n\\x1b": 1\n')  # a key that would break the line
def test_any_bytes_are_a_document_or_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "Pulumi.f.yaml"
    path.write_bytes(data)
    try:
        document = read_stack_document(path)
    except ConfigError as err:
        assert "\n" not in str(err) and len(str(err)) <= 650
    else:
        assert isinstance(document, dict)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
REAL = read_stack_file(REPO / "stacks" / "Pulumi.prod.yaml")


@pytest.mark.fuzz
@given(st.sampled_from(sorted(REAL)), JSONISH, st.sampled_from(["replace", "inside"]))
@example("mlplat:nodePools", [{"name": "x", "instanceType": None}], "replace")
@example("mlplat:owner", float("nan"), "replace")
@example("mlplat:tenants", [{"name": 10 ** 30}], "replace")
@example("mlplat:cluster", {"\n": None}, "replace")  # found: a key with a newline broke the line
@example("pulumi:disable-default-providers", {"k\x1f" * 200: None}, "replace")  # found: quoted whole
def test_any_value_in_a_real_stack_is_a_config_or_one_line(key, value, how):
    """Each key of prod's stack file given any value (or the value given a stray key): the
    parser answers a config or one ConfigError line naming the key."""
    raw = dict(REAL)
    if how == "inside" and isinstance(raw[key], dict):
        raw[key] = {**raw[key], "fuzzed": value}
    else:
        raw[key] = value
    try:
        parse_layer_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and len(message) <= 650, message[:700]


def test_the_plan_file_and_readme_are_read_bounded(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo")
    for argv, says in ((["pin", "--dry-run", "--versions", "/dev/zero"], "/dev/zero: is a character device, not a "
                                                                          "plan file"),
                       (["pin", "--dry-run", "--versions", str(tmp_path / "fifo")], "is a FIFO (named pipe), not a "
                                                                                    "plan file"),
                       (["docs", "--readme", str(tmp_path / "fifo")], "is a FIFO (named pipe), not a README")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_names_reach_the_terminal_with_their_escape_sequences_shown_not_run():
    from infra.cli import _terminal

    assert _terminal("policy \x1b[2K\x1b[1A\rall passed\x07\nnext\tline") == \
        "policy \\x1b[2K\\x1b[1A\\x0dall passed\\x07\nnext\tline"


def test_the_training_settings_are_bounded_as_the_trainer_bounds_its_flags():
    from infra import config
    from workloads.train import options as train

    assert (config.TRAINER_MAX_STEPS, config.TRAINER_MAX_BATCH, config.TRAINER_MAX_GLOBAL_BATCH) == (
        train.MAX_STEPS, train.MAX_BATCH, train.MAX_GLOBAL_BATCH)
    raw = dict(REAL)
    raw["mlplat:training"] = {**(raw.get("mlplat:training") or {}), "maxSteps": train.MAX_STEPS + 1}
    with pytest.raises(ConfigError, match="mlplat:training.maxSteps"):
        parse_layer_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
