"""The two options every benchmark takes, and where its record goes.

--smoke   the same code paths at the smallest size that still runs them (one repetition,
          the smallest model, a few rows, a fraction of a second of load). `make test` runs
          every benchmark so (tests/bench), so a benchmark that breaks fails the suite
          instead of rotting until someone next measures. Its figures mean nothing.
--output  the file the record is written to. Without it a real run writes its file in
          bench/results/ and a smoke run one in a new temporary folder: a smoke run never
          replaces the figures the README shows.

Sizes given on the command line win over the smoke sizes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def parse(parser: argparse.ArgumentParser, smoke: dict[str, Any], argv: list[str] | None = None) -> argparse.Namespace:
    """Adds --smoke and --output to `parser` and parses; with --smoke, the options in
    `smoke` (by their dest) default to these sizes instead of the real ones."""
    parser.add_argument("--smoke", action="store_true",
                        help="run every code path once at the smallest size (a check that it runs, not a figure)")
    parser.add_argument("--output", type=Path, help="the record's file (default: bench/results/, or a temporary "
                        "folder with --smoke)")
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args


def output(args: argparse.Namespace, default: Path) -> Path:
    """Where this run's record goes: --output, else `default` for a real run, else a file
    of `default`'s name in a new temporary folder."""
    if args.output is not None:
        return args.output
    if args.smoke:
        return Path(tempfile.mkdtemp(prefix="mlplat-bench-smoke-")) / default.name
    return default


def shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {shown(path)}")
