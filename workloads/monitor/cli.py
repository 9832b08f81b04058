"""`python -m workloads.monitor drift --reference <parquet> --current <parquet> [--json PATH]`

Exit 0: no column drifted. Exit 1: at least one did; each is named on stdout and in the
JSON with its test and score. Exit 2: bad input, one line on stderr (a file that is missing,
empty or not Parquet; a current sample whose columns are not the reference's)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class MonitorInputError(Exception):
    """Bad input: one line, exit 2."""


def read_sample(path: str, what: str) -> Any:
    import pyarrow.parquet as pq

    file = Path(path)
    if file.is_dir():
        raise MonitorInputError(f"--{what} {path}: is a directory; give a Parquet file")
    try:
        table = pq.read_table(file)
    except FileNotFoundError:
        raise MonitorInputError(f"--{what} {path}: no such file") from None
    except PermissionError:
        raise MonitorInputError(f"--{what} {path}: cannot be read (permission denied)") from None
    except Exception as err:  # pyarrow's ArrowInvalid and friends: not a Parquet file
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MonitorInputError(f"--{what} {path}: not a readable Parquet file ({first})") from None
    if table.num_rows == 0 or table.num_columns == 0:
        raise MonitorInputError(f"--{what} {path}: is empty ({table.num_rows} rows, {table.num_columns} columns); "
                                "drift needs a sample of rows")
    return table.to_pandas()


def check_columns(reference: Any, current: Any) -> None:
    missing = [c for c in reference.columns if c not in current.columns]
    extra = [c for c in current.columns if c not in reference.columns]
    if missing or extra:
        parts = ([f"lacks {', '.join(map(str, missing[:5]))}"] if missing else []) + \
                ([f"has {', '.join(map(str, extra[:5]))} that the reference does not"] if extra else [])
        raise MonitorInputError(f"--current: its columns do not match the reference's: it {' and '.join(parts)}; "
                                "compare samples of the same features")
    for column in reference.columns:
        if (reference[column].dtype.kind in "biuf") != (current[column].dtype.kind in "biuf"):
            raise MonitorInputError(f"--current: column {column} is {current[column].dtype} but "
                                    f"{reference[column].dtype} in the reference")


def drift(args: argparse.Namespace) -> int:
    from workloads.monitor.drift import compare

    reference = read_sample(args.reference, "reference")
    current = read_sample(args.current, "current")
    check_columns(reference, current)
    results = compare(reference, current)
    drifted = [r for r in results if r.drifted]
    report = {"drift": bool(drifted), "rows": {"reference": len(reference), "current": len(current)},
              "drifted": [r.as_dict() for r in drifted], "columns": [r.as_dict() for r in results]}
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        except OSError as err:
            raise MonitorInputError(f"--json {args.json}: cannot be written ({err.strerror or err})") from None
    for r in drifted:
        print(f"drift: {r.column}: {r.test} {r.score:.4g} (threshold {r.threshold:g})")
    print(f"{len(drifted)} of {len(results)} columns drifted "
          f"({len(reference)} reference rows, {len(current)} current rows)")
    return 1 if drifted else 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m workloads.monitor")
    verbs = top.add_subparsers(dest="verb", required=True)
    d = verbs.add_parser("drift", help="compare a current sample with the reference, column by column")
    d.add_argument("--reference", required=True, help="Parquet: the training reference sample")
    d.add_argument("--current", required=True, help="Parquet: the logged inputs to judge")
    d.add_argument("--json", help="also write the result here")
    d.set_defaults(run=drift)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except MonitorInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
