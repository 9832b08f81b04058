"""Command-line values the workloads' verbs take, bounded: argparse `type=` functions.

A number is read only when it is short (no number a verb takes needs more than 40
characters, so a 5,000-digit one is refused before Python converts it), must be finite
(nan and inf are refused), and must lie in the range the flag documents. Text that ends up
in an MLflow tag, a run or experiment name, or a Kubernetes label is refused when it holds
a newline, an escape or any other character that does not print, or is longer than its
limit. argparse turns each refusal into the verb's one line and exit 2.

Pure standard library: the node-check image carries nothing else.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_CHARS = 40  # characters of a number as typed: 2**64 has 20 digits


def quoted(text: str, limit: int = MAX_CHARS) -> str:
    """A short, one-line quotation of what was typed."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r} (cut; {len(text):,} characters)"


def _number(value: float) -> str:
    """3600000.0 -> '3,600,000'; 0.5 -> '0.5'."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _range(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return "any"
    if high is None:
        return f"{_number(low)} or more"
    if low is None:
        return f"at most {_number(high)}"
    return f"from {_number(low)} to {_number(high)}"


def whole(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """A whole number from `low` to `high` (inclusive; None leaves that end to a later,
    more specific check, such as a serving setting's limit in Triton)."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= MAX_CHARS else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not a whole number; use one {_range(low, high)}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range; use a whole number {_range(low, high)}")
        return value

    parse.__name__ = "whole number"
    return parse


def real(low: float, high: float, *, above_low: bool = False) -> Callable[[str], float]:
    """A finite number from `low` to `high` (inclusive; with `above_low`, `low` itself is
    refused: a time or a budget that must be more than 0)."""
    where = f"above {_number(low)} and at most {_number(high)}" if above_low else _range(low, high)

    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= MAX_CHARS else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{quoted(text)} is not a finite number; use one {where}")
        if value < low or value > high or (above_low and value == low):
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range; use a number {where}")
        return value

    parse.__name__ = "number"
    return parse


def printable_problem(value: str, limit: int) -> str:
    """Why `value` cannot be a tag, a label or a name (a newline, an escape, another
    character that does not print, or more than `limit` characters), or ""."""
    if len(value) > limit:
        return f"{quoted(value)} is longer than {limit:,} characters"
    odd = next((c for c in value if not c.isprintable()), None)
    if odd is not None:
        return f"{quoted(value)} holds {odd!r}, which does not print; use printable characters only"
    return ""


def printable(limit: int, *, empty: bool = False) -> Callable[[str], str]:
    """Text that goes into a tag, a label or a name: printable, at most `limit` characters,
    and not empty unless `empty`."""

    def parse(text: str) -> str:
        problem = printable_problem(text, limit) or ("" if text or empty else "is empty")
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text

    parse.__name__ = "text"
    return parse
