"""Drift between a reference sample (what the model was trained on) and a current one (what
it is asked now), column by column, with Evidently's tests.

Evidently picks each column's test by its type and the sample size, as its data-drift
preset does: for numbers, Kolmogorov-Smirnov under 1,000 rows and the normed Wasserstein
distance above; for categories, chi-square or Jensen-Shannon. It also decides whether each
score crosses its threshold; nothing here re-implements a statistic."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ColumnDrift:
    column: str
    test: str  # Evidently's name for it, e.g. "Wasserstein distance (normed)"
    score: float
    threshold: float
    drifted: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def column_kinds(frame: Any) -> tuple[list[str], list[str]]:
    """(numerical, categorical) column names: numbers and booleans are numerical."""
    import pandas as pd

    numerical = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
                 and not pd.api.types.is_bool_dtype(frame[c])]
    return numerical, [c for c in frame.columns if c not in numerical]


def compare(reference: Any, current: Any) -> list[ColumnDrift]:
    """One result per column of `reference` (which `current` must also have)."""
    from evidently import DataDefinition, Dataset, Report
    from evidently.metrics import ValueDrift

    numerical, categorical = column_kinds(reference)
    definition = DataDefinition(numerical_columns=numerical, categorical_columns=categorical)
    columns = list(reference.columns)
    snapshot = Report([ValueDrift(column=c) for c in columns], include_tests=True).run(
        reference_data=Dataset.from_pandas(reference, data_definition=definition),
        current_data=Dataset.from_pandas(current[columns], data_definition=definition))
    results = []
    for column, metric in zip(columns, snapshot.dict()["metrics"]):
        config = metric["config"]
        if config["column"] != column:  # an explicit check: `python -O` drops asserts
            raise RuntimeError(f"Evidently answered for column {config['column']!r} where {column!r} was asked")
        results.append(ColumnDrift(column=column, test=config["method"], score=float(metric["value"]),
                                   threshold=float(config["threshold"]), drifted=False))
    # Evidently's own verdict per column: its test fails where the column drifted.
    failed = {t["name"].removeprefix("Value Drift for column ") for t in snapshot.dict()["tests"]
              if t["status"] == "FAIL"}
    return [ColumnDrift(**{**r.as_dict(), "drifted": r.column in failed}) for r in results]
