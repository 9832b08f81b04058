"""The shell commands of README.md and docs/*.md, and how the docs check runs them.

What counts as a command: every logical line (backslash continuations joined) of a code
block that holds shell: an indented block, or a fenced one with no language or with `sh`,
`bash`, `shell` or `console` (in a `console` block only the `$ ` lines). Blocks labelled
anything else (`text`, `yaml`, `json`, `mermaid`) are output, files or pictures, not
commands. Blank lines and lines that are only a comment are not commands.

The docs say two things about a command in its comment, where a reader sees them:
- `# not run by the tests: <why>`: the docs check does not run it, and says why (it needs
  AWS, the Pulumi CLI, a cluster, GPUs...). On a line of its own it covers every command
  below it in the block.
- `# exits N: <what>`: the command is meant to end with status N (a demonstration of a
  failure); any other status fails the check.
Every other command runs, and fails the check when it ends with any status but 0.

The Markdown is parsed by markdown-it-py (CommonMark), so what counts as a code block is
what a renderer shows as one.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}
NOT_RUN = re.compile(r"\bnot run by the tests:\s*(?P<why>.*)$", re.IGNORECASE)
EXITS = re.compile(r"\bexits (?P<status>\d+):")
# The docs put scratch files under /tmp; each block gets a private scratch folder instead,
# so two runs of the suite (or two people on one machine) never share one.
SCRATCH = "/tmp/"
# The Makefile reads these as defaults (`ENV ?= dev`, `OUT ?= out`); a reader's command
# starts from a shell without them, and so does the check's. The MAKE* ones are set when
# the suite itself runs under `make test`.
DROPPED_ENV = ("ENV", "STACK", "OUT", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ADDOPTS",
               "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Command:
    doc: str            # path relative to the repository
    line: int           # 1-based line of the command's first line in the doc
    text: str           # as written, continuation lines included
    comment: str        # its trailing comment, without the `#`, or ""
    not_run: str | None  # the why of `not run by the tests:`, "" if the mark has none
    exits: int          # the status it is meant to end with
    block: int          # 1-based line where its code block starts

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def id(self) -> str:
        words = " ".join(self.text.split()[:4])
        return f"{self.where}:" + re.sub(r"[^A-Za-z0-9._/=-]+", "-", words).strip("-")


def comment_start(line: str) -> int | None:
    """Where the shell's comment starts in `line`: a `#` that begins a word, outside
    quotes and not escaped; None when there is none."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif c == "\\":
            i += 1
        elif quote == '"':
            if c == '"':
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t\n;&|()"):
            return i
        i += 1
    return None


def _logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join backslash continuations: (line number of the first line, text with its newlines)."""
    out: list[tuple[int, str]] = []
    start, parts = 0, []
    for number, text in lines:
        if not parts:
            start = number
        parts.append(text)
        if not text.endswith("\\"):
            out.append((start, "\n".join(parts)))
            parts = []
    if parts:
        out.append((start, "\n".join(parts)))
    return out


def block_commands(doc: str, block_line: int, lines: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    covering: str | None = None
    for number, text in _logical_lines(lines):
        if not text.strip():
            continue
        at = comment_start(text)
        comment = text[at + 1:].strip() if at is not None else ""
        command = text[:at].rstrip() if at is not None else text.rstrip()
        mark = NOT_RUN.search(comment)
        if not command.strip():
            if mark:
                covering = mark["why"].strip()
            continue
        exits = EXITS.search(comment)
        commands.append(Command(
            doc=doc, line=number, text=command, comment=comment,
            not_run=mark["why"].strip() if mark else covering,
            exits=int(exits["status"]) if exits else 0, block=block_line))
    return commands


def shell_lines(token) -> list[tuple[int, str]] | None:
    """The numbered lines of a code block token that holds shell, or None for a block in
    another language. Numbers are 0-based offsets from the token's first line."""
    if token.type == "code_block":
        first = token.map[0]
        language = ""
    elif token.type == "fence":
        first = token.map[0] + 1
        language = token.info.split()[0].lower() if token.info.strip() else ""
    else:
        return None
    if language not in SHELL_LANGUAGES:
        return None
    numbered = [(first + i + 1, text) for i, text in enumerate(token.content.splitlines())]
    if language == "console":
        kept, going_on = [], False
        for number, text in numbered:
            if text.startswith("$ ") or going_on:
                kept.append((number, text[2:] if text.startswith("$ ") else text))
                going_on = text.endswith("\\")
        numbered = kept
    return numbered


def code_blocks(text: str):
    return [t for t in MarkdownIt("commonmark").parse(text) if t.type in ("code_block", "fence")]


def commands_in(doc: str, text: str) -> list[Command]:
    found: list[Command] = []
    for token in code_blocks(text):
        lines = shell_lines(token)
        if lines is not None:
            found += block_commands(doc, token.map[0] + 1, lines)
    return found


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_commands(root: Path = REPO) -> list[Command]:
    found: list[Command] = []
    for path in doc_files(root):
        found += commands_in(str(path.relative_to(root)), path.read_text(encoding="utf-8"))
    return found


def labelled_blocks(root: Path = REPO):
    """(doc, line, language, content) of every fenced block not read as shell."""
    for path in doc_files(root):
        for token in code_blocks(path.read_text(encoding="utf-8")):
            if shell_lines(token) is None:
                yield str(path.relative_to(root)), token.map[0] + 1, token.info.strip(), token.content


# --- running ------------------------------------------------------------------------

def working_copy(into: Path, venv: Path) -> Path:
    """A scratch copy of the working tree, the files git would commit (tracked, or new and
    not ignored) as they are on disk, so what a command writes (out/, base/, caches) stays
    out of the checkout. `.venv` is a link to the virtualenv the suite runs in, which is
    what `make setup` made; `shared` a link to the chart cache beside the checkout (or in
    it), where infra/chart_cache.py looks for it in a copy."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = REPO / name, into / name
        if source.is_symlink() or source.is_file():  # a tracked file deleted since is left out
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    (into / ".venv").symlink_to(venv, target_is_directory=True)
    shared = next((p for p in (REPO.parent / "shared", REPO / "shared") if p.is_dir()), None)
    if shared is not None:
        (into / "shared").symlink_to(shared, target_is_directory=True)
    return into


def command_env(venv: Path) -> dict[str, str]:
    """The environment of a reader who ran `make setup` and activated `.venv`: the docs
    call `mlplat`, `python` and `pytest` by name."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def as_run(command: Command, scratch: Path) -> str:
    """The command as the check runs it. `make <target>` runs with `-o .venv/.core-installed`:
    the same recipe, without `setup-core`'s reinstall of the project into the virtualenv
    the suite runs from (it is installed, or the suite could not run). The recipe then
    calls `.venv/bin/mlplat ...` exactly as `make` would for a reader."""
    text = command.text.replace(SCRATCH, f"{scratch}/")
    if re.match(r"make\s", text):
        text = "make -o .venv/.core-installed " + text[len("make "):]
    return text


@dataclass
class Outcome:
    command: Command
    ran: str
    status: int | None          # None: killed at the time limit
    output: str
    seconds: float

    def problem(self) -> str | None:
        if self.status is None:
            return f"did not finish within {TIMEOUT_S} s"
        if self.status != self.command.exits:
            return f"exit status {self.status}, expected {self.command.exits}"
        if "Traceback (most recent call last)" in self.output:
            return "printed a traceback"
        return None


@dataclass
class BlockRun:
    """Runs the runnable commands of one code block in order, in one working copy, as a
    reader would type them in one shell; stops at the first that fails."""
    commands: list[Command]
    root: Path
    venv: Path
    outcomes: dict[Command, Outcome] = field(default_factory=dict)
    failed: Command | None = None
    live: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False

    def __call__(self) -> None:
        copy = working_copy(self.root / "checkout", self.venv)
        scratch = self.root / "tmp"
        scratch.mkdir()
        env = command_env(self.venv)
        for command in self.commands:
            if self.stopped:
                return
            ran = as_run(command, scratch)
            started = time.monotonic()
            process = subprocess.Popen(
                ["bash", "-o", "pipefail", "-c", ran], cwd=copy, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            with self.lock:
                self.live.add(process)
            try:
                output, _ = process.communicate(timeout=TIMEOUT_S)
                status: int | None = process.returncode
            except subprocess.TimeoutExpired:
                self.kill(process)
                output, _ = process.communicate()
                status = None
            with self.lock:
                self.live.discard(process)
            outcome = Outcome(command, ran, status, output.decode(errors="replace"),
                              time.monotonic() - started)
            self.outcomes[command] = outcome
            if outcome.problem():
                self.failed = command
                return

    @staticmethod
    def kill(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        self.stopped = True
        with self.lock:
            for process in list(self.live):
                self.kill(process)


def venv_of_suite() -> Path:
    return Path(sys.prefix)
