"""The docs check: every shell command in README.md and docs/*.md runs here, or says in the
doc why it cannot (`# not run by the tests: <why>`), so a command that stops working fails
the suite, and a new command that nobody ran fails it too (it runs, and fails where it
cannot). tests/unit/doc_commands.py says what counts as a command and how it runs.

The commands of one code block run in order in one scratch copy of the working tree (the
`ls` after a `make preview` reads what it wrote). Blocks run side by side, one per core,
all started at the first case that needs one: the check is about 100 s of CPU, nearly all
of it the previews, and one at a time it would take that long on an idle machine.
"""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.unit import doc_commands
from tests.unit.doc_commands import BlockRun, Command, all_commands, commands_in

COMMANDS = all_commands()
RUNNABLE = [c for c in COMMANDS if c.not_run is None]
# A command's program, for the look for commands in blocks labelled as something else.
PROGRAMS = r"(?:\$ )?(?:make|mlplat|python|python3|pytest|pulumi|kubectl|aws|gh|skopeo|torchrun|helm|\.venv/bin/\S+)\s"


def _case(command: Command):
    marks = [pytest.mark.slow] if command.not_run is None else []
    return pytest.param(command, id=command.id, marks=marks)


class Blocks:
    """Each block's run, started for every selected case at the first case that runs."""

    def __init__(self, tmp_path_factory, items):
        self.factory = tmp_path_factory
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0))))
        self.runs: dict[tuple[str, int], tuple[BlockRun, Future]] = {}
        wanted = [item.callspec.params["command"] for item in items
                  if getattr(item, "module", None) is sys.modules[__name__]
                  and getattr(item, "originalname", None) == "test_doc_command"
                  and item.callspec.params["command"].not_run is None]
        if os.environ.get("PYTEST_XDIST_WORKER"):
            # Under xdist each worker lists every case, not only its own: start on demand.
            wanted = []
        # The blocks with the most to run start first.
        keys = sorted({(c.doc, c.block) for c in wanted},
                      key=lambda k: -sum(1 for c in RUNNABLE if (c.doc, c.block) == k))
        for key in keys:
            self.start(key)

    def start(self, key: tuple[str, int]) -> None:
        if key not in self.runs:
            commands = [c for c in RUNNABLE if (c.doc, c.block) == key]
            name = re.sub(r"[^A-Za-z0-9]+", "-", f"{key[0]}-{key[1]}")
            run = BlockRun(commands, self.factory.mktemp(name), doc_commands.venv_of_suite())
            self.runs[key] = (run, self.pool.submit(run))

    def outcome(self, command: Command):
        self.start((command.doc, command.block))
        run, future = self.runs[(command.doc, command.block)]
        future.result()
        return run, run.outcomes.get(command)

    def close(self) -> None:
        for run, _ in self.runs.values():
            run.stop()
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def blocks(tmp_path_factory, request):
    started = Blocks(tmp_path_factory, request.session.items)
    yield started
    started.close()


@pytest.mark.parametrize("command", [_case(c) for c in COMMANDS])
def test_doc_command(command: Command, request):
    if command.not_run is not None:
        # The mark is the doc's promise to the reader that the command was left out on
        # purpose: it must say why.
        assert len(command.not_run.split()) >= 2, (
            f"{command.where}: `# not run by the tests:` must say why in words (what the command needs "
            f"that the tests do not have): {command.text!r}")
        # The case's id names the command; the reason alone lets the summary group them.
        pytest.skip(f"not run by the tests: {command.not_run}")
    run, outcome = request.getfixturevalue("blocks").outcome(command)
    if outcome is None:
        pytest.fail(f"{command.where}: not run: {run.failed.where} before it in the same block failed "
                    f"({run.failed.text!r})", pytrace=False)
    problem = outcome.problem()
    if problem:
        tail = "\n".join(outcome.output.splitlines()[-60:])
        pytest.fail(f"{command.where}: `{command.text}` {problem} ({outcome.seconds:.0f} s; ran as "
                    f"`{outcome.ran}` in a scratch copy of the checkout). If it cannot run here, say so "
                    f"in the doc: `# not run by the tests: <why>`. Its last lines:\n{tail}",
                    pytrace=False)


def test_docs_have_commands_to_check():
    # The extraction finds what a reader sees: were it to find nothing (a parser change, a
    # moved doc), every case above would vanish and the check would pass empty.
    assert any(c.doc == "README.md" for c in RUNNABLE)
    assert {c.doc for c in COMMANDS} > {"README.md"}


def test_no_command_hides_in_a_labelled_block():
    # A block labelled `text`, `yaml` or `json` is not run, so a command must not be written
    # in one: it would escape the check.
    hidden = [f"{doc}:{line + i} ({language}): {text.strip()}"
              for doc, line, language, content in doc_commands.labelled_blocks()
              for i, text in enumerate(content.splitlines(), start=1)
              if re.match(PROGRAMS, text.strip() + " ")]
    assert not hidden, "commands in blocks the docs check does not run; use a block without a language:\n" + \
        "\n".join(hidden)


SAMPLE = """\
# Title

Some text.

    make preview              # set up .venv; not run by the tests: needs a fresh machine
    mlplat preview --stack prod \\
        --json out/prod.json   # the plan
    echo 'a # not a comment' "and # this" \\# neither

```sh
# not run by the tests: needs AWS credentials
aws s3 ls
aws s3 cp a b   # one more
```

```console
$ pytest tests/acceptance --replay r   # exits 1: the node has no driver
===== 1 failed =====
$ ls \\
  out
out/prod.json
```

```text
mlplat: error: an output line
```

```yaml
key: value
```

- a list item

      indented inside the list item: a code block too
"""


def test_extraction_reads_what_a_reader_sees():
    found = {c.line: c for c in commands_in("doc.md", SAMPLE)}
    assert sorted(found) == [5, 6, 8, 12, 13, 17, 19, 34]
    assert found[5].text == "make preview" and found[5].not_run == "needs a fresh machine"
    assert found[6].text == "mlplat preview --stack prod \\\n    --json out/prod.json"
    assert found[6].comment == "the plan" and found[6].not_run is None and found[6].exits == 0
    assert found[8].text == "echo 'a # not a comment' \"and # this\" \\# neither" and found[8].comment == ""
    # A mark on a line of its own covers the rest of its block, and only that block.
    assert found[12].not_run == found[13].not_run == "needs AWS credentials"
    assert found[12].block == found[13].block == 10
    assert found[17].text == "pytest tests/acceptance --replay r" and found[17].exits == 1
    assert found[19].text == "ls \\\n  out" and found[19].not_run is None
    assert found[34].text == "indented inside the list item: a code block too"


def test_labelled_blocks_are_not_commands_but_are_looked_into(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("```text\nmlplat preview --stack prod\n```\n")
    labelled = list(doc_commands.labelled_blocks(tmp_path))
    assert doc_commands.all_commands(tmp_path) == []
    assert [(doc, line, language) for doc, line, language, _ in labelled] == [("README.md", 1, "text")]
    assert re.match(PROGRAMS, labelled[0][3].strip() + " ")


def test_a_block_runs_in_a_scratch_copy_and_stops_at_its_first_failure(tmp_path):
    sample = ("    mkdir -p out && touch out/written /tmp/doc-check-scratch\n"
              "    test -f out/written && test -f /tmp/doc-check-scratch && test -x .venv/bin/python\n"
              "    false   # a command that stopped working\n"
              "    echo never\n\nA paragraph ends the block.\n\n"
              "    sh -c 'exit 3'   # exits 3: as the doc says\n"
              "    sh -c 'exit 0'   # exits 3: but it does not\n")
    first, second = ([c for c in commands_in("doc.md", sample) if c.block == block] for block in (1, 8))
    run = BlockRun(first, tmp_path / "first", doc_commands.venv_of_suite())
    run()
    written, checked, failing, never = first
    assert run.outcomes[written].problem() is None and run.outcomes[checked].problem() is None
    assert run.outcomes[failing].problem() == "exit status 1, expected 0"
    assert run.failed == failing and never not in run.outcomes
    # What the commands wrote is in the copy and its scratch folder, not in the checkout or /tmp.
    assert (tmp_path / "first" / "checkout" / "out" / "written").is_file()
    assert (tmp_path / "first" / "tmp" / "doc-check-scratch").is_file()
    assert not (doc_commands.REPO / "out" / "written").exists()
    assert not os.path.exists("/tmp/doc-check-scratch")
    run = BlockRun(second, tmp_path / "second", doc_commands.venv_of_suite())
    run()
    assert [run.outcomes[c].problem() for c in second] == [None, "exit status 0, expected 3"]


def test_make_runs_its_recipe_without_reinstalling_the_project(tmp_path):
    [command] = commands_in("doc.md", "    make preview STACK=prod-cluster   # the charts\n")
    assert doc_commands.as_run(command, tmp_path) == "make -o .venv/.core-installed preview STACK=prod-cluster"
