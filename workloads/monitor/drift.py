"""Drift between a reference sample (what the model was trained on) and a current one (what
it is asked now), column by column, with Evidently's tests.

Evidently picks each column's test by its type and the sample size, as its data-drift
preset does: for numbers, Kolmogorov-Smirnov under 1,000 rows and the normed Wasserstein
distance above; for categories, chi-square (or Z for two values) or Jensen-Shannon. Three
changes hold the run's false alarms at 5% over all its columns, at every sample size
(workloads/monitor/alarm.py): the chi-square is the two-sample one, registered as an
Evidently test; every column has a p-value, from its test below 1,000 rows and from the
test it would have had there above (beside its distance); and the p-values of a run are
held together by Holm's method. Above 1,000 rows a column drifts where its distance is past
the threshold and its p-value is rejected by Holm.

What Evidently cannot judge is never handed to it, and never passed over in silence: the
verdict (`judge`) names each column it did not judge and why. Two kinds of reason:

- the column's type (`kind_of`): nested values (lists, structs, maps), points in time,
  intervals, extension types. These are facts of the schema, the same in both samples, so
  they are skipped by name and the other columns are still judged: refusing would make the
  user rewrite both files to learn anything. (The Parquet reader refuses a sample in which
  no column can be judged.)
- the column's values (`screen`): none at all (every row null, NaN or infinite), or numbers
  float64 cannot split into Evidently's histogram bins (a constant 1e17, a span past 1.8e308).
  Where that holds in both samples, nothing changed that a test could see: skipped by name.
  Where it holds in one sample only, the column changed beyond what the test can measure
  (a feature that stopped arriving, a sensor stuck at 1e308): it is still not judged, but
  it counts as drift, so the check fails instead of saying all is well.

Integers beyond 2**53 (uint64 ids, int64 extremes) are judged exactly: both samples are
shifted by their common minimum in integer arithmetic before they become float64. Every
test Evidently picks for numbers (KS, Wasserstein normed by the reference's spread,
chi-square, Z, Jensen-Shannon) gives the same score for shifted data.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from workloads.inputs import InputError, excerpt, file_kind, named, shown
from workloads.monitor import alarm
from workloads.monitor.alarm import ALPHA

# Limits of one sample, checked from the Parquet footer before any column is read. The
# benchmark (bench/drift.py: 1,000,000 rows x 20 float64 columns, both samples) peaks under
# 2 GB; these keep a sample within that order.
MAX_ROWS = 1_000_000  # per sample (--max-rows)
# Per file, counted as Parquet stores them (--max-columns): judging takes ~0.13 s a column at
# 50,000 rows, more with more rows.
MAX_COLUMNS = 100
MAX_SAMPLE_BYTES = 256 << 20  # the judged columns once read: 1M x 20 float64 is 160 MB
MAX_FILE_BYTES = 4 << 30  # a larger file is not a sample of at most MAX_SAMPLE_BYTES
MAX_FOOTER_BYTES = 16 << 20  # the footer (schema, row groups) is parsed whole: a 100-column file's is kilobytes
EXACT = 2**53  # float64 holds every integer up to here


class DriftInputError(InputError):
    """A sample that cannot be read or compared: one line, exit 2."""


@dataclass(frozen=True)
class ColumnDrift:
    column: str
    test: str  # Evidently's name for it, e.g. "Wasserstein distance (normed)"
    score: float
    threshold: float
    drifted: bool
    # The p-value Holm holds with the run's others: `test`'s own where that is a p-value test,
    # else that of the test Evidently would use at 1,000 rows (alarm.p_value_test), worked
    # out only where the distance is past its threshold (None elsewhere: such a column cannot
    # drift whatever its p-value, and Holm takes it as 1; see held_together).
    p_value_test: str | None
    p_value: float | None
    level: float = ALPHA  # what Holm held p_value to (held_together sets it)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NotJudged:
    column: str
    reason: str
    counts_as_drift: bool = False  # what made it unjudgeable holds in one sample only

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    columns: list[ColumnDrift]  # the judged ones, in the reference's order
    not_judged: list[NotJudged] = field(default_factory=list)

    @property
    def drifted(self) -> list[ColumnDrift]:
        return [c for c in self.columns if c.drifted]

    @property
    def drift(self) -> bool:
        return bool(self.drifted) or any(n.counts_as_drift for n in self.not_judged)

    def as_dict(self) -> dict[str, Any]:
        return {"drift": self.drift, "drifted": [c.as_dict() for c in self.drifted],
                "columns": [c.as_dict() for c in self.columns],
                "not_judged": [n.as_dict() for n in self.not_judged]}


# --- Evidently ----------------------------------------------------------------------------

def column_kinds(frame: Any) -> tuple[list[str], list[str]]:
    """(numerical, categorical) column names: numbers are numerical; booleans and text are
    categorical (two values: a test of proportions, not of a distribution's shape)."""
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
    alarm.register()
    metrics = [ValueDrift(column=c, method=alarm.method_for(reference[c], current[c], c in categorical))
               for c in columns]
    with _without_plots():
        snapshot = Report(metrics, include_tests=True).run(
            reference_data=Dataset.from_pandas(reference, data_definition=definition),
            current_data=Dataset.from_pandas(current[columns], data_definition=definition))
    answer = snapshot.dict()
    # Evidently's own verdict per column: its test fails where the column drifted.
    failed = {t["name"].removeprefix("Value Drift for column ") for t in answer["tests"] if t["status"] == "FAIL"}
    results = []
    for column, metric in zip(columns, answer["metrics"]):
        config = metric["config"]
        if config["column"] != column:  # an explicit check: `python -O` drops asserts
            raise RuntimeError(f"Evidently answered for column {config['column']!r} where {column!r} was asked")
        test, score = alarm.test_name(config["method"]), float(metric["value"])
        # A distance cannot be held by Holm: the p-value of the column's small-sample test
        # beside it, where the distance passed (a sort of both samples: 0.7 s a column at
        # 1,000,000 rows, so not for the columns that cannot drift anyway).
        p_test, p_value = None, None
        if alarm.is_p_value(test):
            p_test, p_value = test, score
        elif column in failed:
            p_test, p_value = alarm.p_value(reference[column], current[column], column in categorical)
        results.append(ColumnDrift(column=column, test=test, score=score, threshold=float(config["threshold"]),
                                   drifted=column in failed, p_value_test=p_test, p_value=p_value))
    return results


def _no_plots(*_: Any) -> list:
    return []


_PLOTS = threading.Lock()  # one swap at a time: a second judge must not save _no_plots as Evidently's


@contextmanager
def _without_plots() -> Iterator[None]:
    """Evidently draws each column's plots (plotly figures) as it computes its score, for its
    HTML report: 20 columns took 0.82 CPU-s at 300 rows and 4.2 at 50,000 with them, 0.17
    and 2.7 without. Nothing here shows them: the verdict is read from the numbers
    (`snapshot.dict()`). The stand-in returns an empty list, not None: on None Evidently
    draws a default widget instead. Put back after, for anything else in the process that
    wants Evidently's report; an Evidently without the method is left to draw."""
    from evidently.metrics.column_statistics import ValueDriftCalculation

    with _PLOTS:
        drawn = ValueDriftCalculation.__dict__.get("_render")
        if drawn is None:
            yield
            return
        ValueDriftCalculation._render = _no_plots
        try:
            yield
        finally:
            ValueDriftCalculation._render = drawn


def judge(reference: Any, current: Any, not_judged: list[NotJudged] | None = None) -> Verdict:
    """The verdict on every column of `reference` (which `current` must also have): the
    columns Evidently can judge, judged; the others named (`not_judged` adds those the
    caller already set aside, e.g. by type)."""
    reference, current, unjudged = screen(reference, current)
    unjudged = [*(not_judged or []), *unjudged]
    columns = list(reference.columns)
    if not columns:
        return Verdict([], unjudged)
    with warnings.catch_warnings():
        # numpy's and scipy's notes on a division by zero (a category one sample lacks) or
        # an overflow near float64's limits: nothing a user can act on; a score that came
        # out NaN is named below.
        warnings.simplefilter("ignore", RuntimeWarning)
        results, failed = _compare_each(reference, current)
    unjudged += failed
    judged = []
    for r in results:
        if math.isfinite(r.score) and math.isfinite(r.threshold) and (r.p_value is None or math.isfinite(r.p_value)):
            judged.append(r)
        elif r.p_value is not None and not math.isfinite(r.p_value):  # NaN is no verdict, and no JSON either
            unjudged.append(NotJudged(r.column, f"Evidently's {r.p_value_test} gave no p-value ({r.p_value})"))
        else:
            unjudged.append(NotJudged(r.column, f"Evidently's {r.test} gave no score ({r.score})"))
    return Verdict(held_together(judged), unjudged)


def held_together(results: list[ColumnDrift]) -> list[ColumnDrift]:
    """The p-values of one run held together (workloads/monitor/alarm.py): each column's
    `level` is the one Holm's method held its p-value to, and it drifted only if rejected
    there. Where Evidently judged it by a p-value test, that level is its threshold too;
    where by a distance, it drifted only if the distance also passed its threshold
    (Evidently's verdict): big enough to matter, and more than the samples' noise."""
    # A column with no p-value (a distance under its threshold) goes last, as a p-value of 1
    # would: the run's false alarms stay at most ALPHA. Under no change, a true-null column
    # is rejected only at a level of at most ALPHA/m0 (m0 the unchanged columns), as in
    # Holm's own proof, since moving columns last never raises another column's level.
    decided = alarm.holm([(r.column, 1.0 if r.p_value is None else r.p_value) for r in results])
    held = []
    for r in results:
        level, rejected = decided[r.column]
        if alarm.is_p_value(r.test):
            held.append(replace(r, threshold=level, level=level, drifted=rejected))
        else:
            held.append(replace(r, level=level, drifted=rejected and r.drifted))
    return held


def _compare_each(reference: Any, current: Any) -> tuple[list[ColumnDrift], list[NotJudged]]:
    """Evidently's results; where it fails (a kind of column nothing here foresaw), each
    column alone, so one column it cannot take does not cost the others their verdict."""
    try:
        return compare(reference, current), []
    except Exception:  # noqa: BLE001 - retried column by column
        return _compare_one_by_one(reference, current)


def _compare_one_by_one(reference: Any, current: Any) -> tuple[list[ColumnDrift], list[NotJudged]]:
    results, failed = [], []
    for column in reference.columns:
        try:
            results += compare(reference[[column]], current[[column]])
        except Exception as err:  # noqa: BLE001 - named in the verdict instead
            said = str(err).splitlines()[0] if str(err) else ""
            failed.append(NotJudged(column, f"Evidently cannot judge it ({type(err).__name__}: {excerpt(said, 120)})"))
    return results, failed


# --- the values of a column ---------------------------------------------------------------

def _is_integer(series: Any) -> bool:
    import pandas as pd

    return pd.api.types.is_integer_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _is_number(series: Any) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _present(series: Any) -> tuple[Any, Any]:
    """(an integer column's values that are there, exactly, as int64 or uint64; where)."""
    import numpy as np

    at = series.notna().to_numpy()
    unsigned = str(series.dtype).lower().startswith("uint")
    return series[at].to_numpy(dtype=np.uint64 if unsigned else np.int64), at


def _as_float(series: Any, at: Any, values: Any) -> Any:
    import numpy as np
    import pandas as pd

    out = np.full(len(series), np.nan)
    out[at] = values
    return pd.Series(out, index=series.index, name=series.name)


def _binnable(values: Any) -> bool:
    """Whether Evidently's histogram of these finite values can be drawn: numpy refuses
    bins narrower than the values' type can tell apart, and a range wider than it holds."""
    import numpy as np
    from evidently.legacy.options.data_drift import DataDriftOptions

    try:
        with np.errstate(all="ignore"):
            np.histogram_bin_edges(values, bins=DataDriftOptions.DEFAULT_NBINSX)
        return True
    except ValueError:
        return False


def exact_integers(reference: Any, current: Any) -> tuple[Any, Any]:
    """Two integer columns as the tests should see them. Where float64 holds every value
    exactly and can bin them, as they are (nulls make them float64, as pandas does). Else
    both shifted by their common minimum in uint64 arithmetic, which wraps modulo 2**64 and
    so gives the true distance for int64 and uint64 alike, then made float64: exact for
    spans up to 2**53, and in order beyond."""
    import numpy as np

    (ref, ref_at), (cur, cur_at) = _present(reference), _present(current)
    ends = [int(v) for values in (ref, cur) if len(values) for v in (values.min(), values.max())]
    if not ends:
        return reference.astype("float64"), current.astype("float64")
    low, high = min(ends), max(ends)
    ref_f, cur_f = ref.astype(np.float64), cur.astype(np.float64)
    if max(-low, high) <= EXACT and _binnable(ref_f) and _binnable(cur_f):
        if ref_at.all() and cur_at.all():
            return reference.astype(ref.dtype), current.astype(cur.dtype)
        return _as_float(reference, ref_at, ref_f), _as_float(current, cur_at, cur_f)

    def shifted(values: Any) -> Any:
        if high - low >= 2**64:  # int64 beside uint64, spanning more than uint64 holds: float64 keeps the order
            return values.astype(np.float64) - float(low)
        unsigned = values if values.dtype == np.uint64 else values.view(np.uint64)
        return (unsigned - np.uint64(low % 2**64)).astype(np.float64)

    return _as_float(reference, ref_at, shifted(ref)), _as_float(current, cur_at, shifted(cur))


def _numbers(reference: Any, current: Any) -> tuple[Any, Any]:
    """A numeric column pair as Evidently gets it: integers exact (above); floats as
    float64, since float16's histogram fails where float64's does not (a constant 2048)."""
    if _is_integer(reference) and _is_integer(current):
        return exact_integers(reference, current)
    return tuple(s.astype("float64") if s.dtype != "float64" and _is_number(s) else s  # type: ignore[return-value]
                 for s in (reference, current))


def _finite(series: Any) -> Any:
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return values[np.isfinite(values)]


def _one_sided(column: str, what: str, ref_ok: bool, cur_ok: bool, ref_n: int, cur_n: int) -> NotJudged:
    if not ref_ok and not cur_ok:
        return NotJudged(column, f"{what} in both samples")
    sample, other, count = ("current", "reference", ref_n) if ref_ok else ("reference", "current", cur_n)
    return NotJudged(column, f"{what} in the {sample} sample, not in the {other} ({count:,} values there)",
                     counts_as_drift=True)


def screen(reference: Any, current: Any) -> tuple[Any, Any, list[NotJudged]]:
    """The two frames cut to the columns Evidently can judge, numbers as it must get them,
    and the columns set aside with why. Nothing is copied where nothing changes: a sample
    of a million rows must not be held twice."""
    keep, unjudged, changed = [], [], {}
    for column in reference.columns:
        ref, cur = reference[column], current[column]
        # A sample whose column holds no value at all says nothing of its kind (the null type).
        number = all(_is_number(s) for s in (ref, cur) if s.notna().any())
        if number:
            made = _numbers(ref, cur)
            if made[0] is not ref or made[1] is not cur:
                changed[column] = made
            ref, cur = made
            ref_v, cur_v = _finite(ref), _finite(cur)
            ref_n, cur_n = len(ref_v), len(cur_v)
        else:
            ref_n, cur_n = int(ref.notna().sum()), int(cur.notna().sum())
        if not ref_n or not cur_n:
            what = "no values (every row null" + (", NaN or infinite)" if number else ")")
            unjudged.append(_one_sided(column, what, bool(ref_n), bool(cur_n), ref_n, cur_n))
        elif number and not (_binnable(ref_v) and _binnable(cur_v)):
            span = f"{min(ref_v.min(), cur_v.min()):.6g} to {max(ref_v.max(), cur_v.max()):.6g}"
            what = (f"numbers float64 cannot split into histogram bins ({span}: too large, or too close together "
                    "for their size)")
            unjudged.append(_one_sided(column, what, _binnable(ref_v), _binnable(cur_v), ref_n, cur_n))
        else:
            keep.append(column)
    return (_cut(reference, keep, {c: made[0] for c, made in changed.items()}),
            _cut(current, keep, {c: made[1] for c, made in changed.items()}), unjudged)


def _cut(frame: Any, keep: list[str], changed: dict[str, Any]) -> Any:
    """`frame` with only the columns in `keep`, in that order, and those in `changed`
    replaced; the frame itself where that is what it already is."""
    if list(frame.columns) != keep:
        frame = frame[keep]
    changed = {c: s for c, s in changed.items() if c in keep}
    if changed:
        frame = frame.copy(deep=False)
        for column, series in changed.items():
            frame[column] = series
    return frame


# --- the type of a column -------------------------------------------------------------------

NUMBER, CATEGORY, NULL, UNJUDGED = "number", "category", "null", "not judged"


def kind_of(arrow_type: Any) -> tuple[str, str]:
    """(kind, why not judged) of a column's Arrow type. Numbers and categories are judged;
    the null type holds no value at all (the other sample decides its kind)."""
    import pyarrow as pa

    t = pa.types
    if t.is_null(arrow_type):
        return NULL, ""
    if isinstance(arrow_type, pa.ExtensionType):
        return UNJUDGED, f"its type is the extension {excerpt(arrow_type.extension_name)}, which drift does not know"
    if t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_decimal(arrow_type) \
            or t.is_duration(arrow_type) or t.is_time(arrow_type):
        return NUMBER, ""  # a decimal, a duration (a count of its unit) or a time of day is a number
    if t.is_boolean(arrow_type) or t.is_string(arrow_type) or t.is_large_string(arrow_type) \
            or t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type) \
            or _is_view(arrow_type):
        return CATEGORY, ""
    if t.is_dictionary(arrow_type):
        kind, _ = kind_of(arrow_type.value_type)
        if kind in (NUMBER, CATEGORY, NULL):
            return CATEGORY, ""  # pandas reads it as categories, whatever they are
        return UNJUDGED, f"it is a dictionary of {_short(arrow_type.value_type)}, neither numbers nor categories"
    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return UNJUDGED, (f"it is a point in time ({_short(arrow_type)}): a later sample always holds later times; "
                          "derive a feature from it (an age, an hour of day) to have it judged")
    if t.is_nested(arrow_type) or t.is_union(arrow_type):
        return UNJUDGED, (f"it is nested ({_short(arrow_type)}): drift compares single numbers and categories; "
                          "flatten it into columns to have it judged")
    return UNJUDGED, f"its type ({_short(arrow_type)}) is neither a number nor a category"


def _is_view(arrow_type: Any) -> bool:
    import pyarrow as pa

    return any(getattr(pa.types, name, lambda _: False)(arrow_type) for name in ("is_string_view", "is_binary_view"))


def _short(arrow_type: Any) -> str:
    """A type for a one-line message: nested types spell their fields' names, which may hold
    anything."""
    return named(arrow_type)


# --- Parquet samples ----------------------------------------------------------------------

@dataclass
class Sample:
    """A Parquet file opened and its footer read; no column read yet."""
    path: str
    what: str  # "reference" or "current": the flag that named it
    handle: Any
    parquet: Any  # pyarrow.parquet.ParquetFile

    index: list[str] = field(default_factory=list)  # the columns pandas stored its index in

    @property
    def names(self) -> list[str]:
        """Its columns, less the index pandas stored beside them."""
        return [n for n in self.parquet.schema_arrow.names if n not in self.index]

    def type_of(self, name: str) -> Any:
        return self.parquet.schema_arrow.field(name).type

    def close(self) -> None:
        self.handle.close()


def _refuse(what: str, path: str, said: str) -> DriftInputError:
    return DriftInputError(f"--{what} {shown(path)}: {said}")


def _pandas_index(parquet: Any, what: str, path: str) -> list[str]:
    """The columns the writer's pandas metadata names as its index (read bounded: it is
    the file's JSON, and may be anything)."""
    from workloads.inputs import load_json

    raw = (parquet.schema_arrow.metadata or {}).get(b"pandas")
    if raw is None:
        return []
    try:
        index = load_json(raw, "pandas metadata").get("index_columns", [])
    except (InputError, AttributeError):
        raise _refuse(what, path, "not a readable Parquet file (its pandas metadata is not a JSON object)") from None
    return [c for c in index if isinstance(c, str)] if isinstance(index, list) else []


def open_regular(path: str, what: str, limit: int) -> Any:
    """`path` opened for reading if it is a regular file of at most `limit` bytes, with the
    rules of workloads/inputs.read_bytes but nothing read: a FIFO, a device, a socket or a
    directory refused by what it is, a symbolic link followed (a loop refused)."""
    try:
        # O_NONBLOCK: a FIFO cannot block the open; O_NOCTTY: a terminal is never made ours.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _refuse(what, path, "no such file") from None
    except IsADirectoryError:
        raise _refuse(what, path, "is a directory; give a Parquet file") from None
    except PermissionError:
        raise _refuse(what, path, "cannot be read (permission denied)") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _refuse(what, path, "is a symbolic link that loops; point it at the Parquet file") from None
        raise _refuse(what, path, f"cannot be read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _refuse(what, path, "is a directory; give a Parquet file")
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(what, path, f"is {file_kind(info.st_mode)}, not a Parquet file; name the file itself")
        if info.st_size > limit:
            raise _refuse(what, path, f"is {info.st_size:,} bytes; a drift sample may be at most {limit:,} "
                                      "(sample fewer rows)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_parquet_frame(handle: Any, what: str, path: str) -> None:
    """PAR1 at both ends and a footer that fits, read from the file's two ends only."""
    size = os.fstat(handle.fileno()).st_size
    if size < 12:
        raise _refuse(what, path, f"not a readable Parquet file (it is {size} bytes)")
    head, tail = os.pread(handle.fileno(), 4, 0), os.pread(handle.fileno(), 8, size - 8)
    if tail[4:] == b"PARE":
        raise _refuse(what, path, "not a readable Parquet file (its footer is encrypted); give a plain one")
    if head != b"PAR1" or tail[4:] != b"PAR1":
        raise _refuse(what, path, "not a readable Parquet file (it does not begin and end with PAR1)")
    footer = int.from_bytes(tail[:4], "little")
    if footer > size - 12:
        raise _refuse(what, path, f"not a readable Parquet file (its footer claims {footer:,} bytes of {size:,})")
    if footer > MAX_FOOTER_BYTES:
        raise _refuse(what, path, f"its footer is {footer:,} bytes; drift reads at most {MAX_FOOTER_BYTES:,} "
                                  "(too many columns or row groups: write fewer)")


def open_sample(path: str, what: str, max_rows: int = MAX_ROWS, max_columns: int = MAX_COLUMNS) -> Sample:
    """A Parquet file's footer, its size checked against the limits before any column is
    read."""
    import pyarrow.parquet as pq

    handle = open_regular(path, what, MAX_FILE_BYTES)
    try:
        _check_parquet_frame(handle, what, path)
        try:
            parquet = pq.ParquetFile(handle)
            parquet.schema_arrow  # noqa: B018 - the Arrow schema is built here, so a bad one fails here
        except Exception as err:  # noqa: BLE001 - pyarrow's ArrowInvalid and friends: not a Parquet file
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise _refuse(what, path, f"not a readable Parquet file ({excerpt(first, 120)})") from None
        meta = parquet.metadata
        if meta.num_rows == 0 or meta.num_columns == 0:
            raise _refuse(what, path, f"is empty ({meta.num_rows} rows, {meta.num_columns} columns); drift needs "
                                      "a sample of rows")
        if meta.num_rows > max_rows:
            raise _refuse(what, path, f"holds {meta.num_rows:,} rows; drift reads at most {max_rows:,} a sample "
                                      "(--max-rows): give a sample of the rows, or raise --max-rows")
        if meta.num_columns > max_columns:
            raise _refuse(what, path, f"has {meta.num_columns:,} columns; drift judges at most {max_columns:,} "
                                      "(--max-columns): give the features to compare, or raise --max-columns")
        sample = Sample(path, what, handle, parquet, _pandas_index(parquet, what, path))
        _check_names(sample)
        return sample
    except BaseException:
        handle.close()
        raise


def _check_names(sample: Sample) -> None:
    seen: set[str] = set()
    for name in sample.names:
        if name in seen:
            raise _refuse(sample.what, sample.path, f"column {named(name)} appears twice; name each column once")
        seen.add(name)


@dataclass
class Plan:
    """What is read: the columns to judge; and what is not, with why."""
    columns: list[str]
    not_judged: list[NotJudged]


def plan(reference: Any, current: Any) -> Plan:
    """Which columns are judged, from the two Arrow schemas (name -> type, in the
    reference's order) alone; DriftInputError where the samples cannot be compared."""
    missing = [c for c in reference if c not in current]
    extra = [c for c in current if c not in reference]
    if missing or extra:
        parts = ([f"lacks {', '.join(map(named, missing[:5]))}"] if missing else []) + \
                ([f"has {', '.join(map(named, extra[:5]))} that the reference does not"] if extra else [])
        raise DriftInputError(f"--current: its columns do not match the reference's: it {' and '.join(parts)}; "
                              "compare samples of the same features")
    columns, not_judged = [], []
    for name, ref_type in reference.items():
        cur_type = current[name]
        (ref_kind, ref_why), (cur_kind, cur_why) = kind_of(ref_type), kind_of(cur_type)
        if NULL in (ref_kind, cur_kind) and ref_kind == cur_kind:
            not_judged.append(NotJudged(name, "no values (every row null) in both samples"))
        elif NULL in (ref_kind, cur_kind) and UNJUDGED in (ref_kind, cur_kind):
            not_judged.append(NotJudged(name, ref_why or cur_why))
        elif NULL in (ref_kind, cur_kind):
            columns.append(name)  # the values decide: one sample has none (screen)
        elif ref_kind == cur_kind == UNJUDGED:
            not_judged.append(NotJudged(name, ref_why))
        elif ref_kind != cur_kind:
            raise DriftInputError(f"--current: column {named(name)} is {_short(cur_type)} but {_short(ref_type)} in "
                                  "the reference")
        else:
            columns.append(name)
    if not columns:
        why = "; ".join(f"{named(n.column)}: {n.reason}" for n in not_judged[:3])
        more = f" (and {len(not_judged) - 3:,} more)" if len(not_judged) > 3 else ""
        raise DriftInputError(f"no column can be judged: {why}{more}")
    return Plan(columns, not_judged)


def _leaves(arrow_type: Any) -> int:
    """How many Parquet columns an Arrow field is stored as."""
    import pyarrow as pa

    if isinstance(arrow_type, pa.ExtensionType):
        return _leaves(arrow_type.storage_type)
    if pa.types.is_struct(arrow_type):
        return sum(_leaves(arrow_type.field(i).type) for i in range(arrow_type.num_fields)) or 1
    if pa.types.is_map(arrow_type):
        return _leaves(arrow_type.key_type) + _leaves(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type) \
            or getattr(pa.types, "is_list_view", lambda _: False)(arrow_type) \
            or getattr(pa.types, "is_large_list_view", lambda _: False)(arrow_type):
        return _leaves(arrow_type.value_type)
    return 1


def stored_bytes(sample: Sample, columns: list[str]) -> int:
    """What the columns take once read, from the footer: their uncompressed sizes, and at
    least rows x width for the fixed-width ones (a constant column encodes to nothing)."""
    schema, meta = sample.parquet.schema_arrow, sample.parquet.metadata
    first, leaf = {}, 0
    for f in schema:
        first[f.name] = leaf
        leaf += _leaves(f.type)
    # Where the Arrow schema does not map onto the stored columns as expected, count them all.
    indexes = [first[c] for c in columns] if leaf == meta.num_columns else range(meta.num_columns)
    stored = sum(meta.row_group(g).column(i).total_uncompressed_size
                 for g in range(meta.num_row_groups) for i in indexes)
    width = sum(schema.field(c).type.bit_width // 8 for c in columns if _fixed_width(schema.field(c).type))
    return max(stored, width * meta.num_rows)


def _fixed_width(arrow_type: Any) -> bool:
    try:
        return arrow_type.bit_width >= 8
    except ValueError:
        return False


def _variable_width(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_binary(arrow_type) \
        or pa.types.is_large_binary(arrow_type) or _is_view(arrow_type)


def _decoded_bytes(column: Any) -> int:
    """What a dictionary-read text column takes once every row holds its own copy."""
    import pyarrow.compute as pc

    total = 0
    for chunk in column.chunks:
        lengths = pc.binary_length(chunk.dictionary)
        total += (pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0) + 8 * len(chunk)
    return total


def read_sample(sample: Sample, columns: list[str], budget: int = MAX_SAMPLE_BYTES) -> Any:
    """The columns, as a pandas DataFrame, within `budget` bytes: checked from the footer
    before reading, and for text, before each row gets its own copy (a dictionary-encoded
    column can hold one megabyte-long string in a million rows in a few kilobytes)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    too_big = (f"its {len(columns):,} judged columns take more than {budget:,} bytes once read; give a sample of "
               "fewer rows (or fewer columns)")
    if stored_bytes(sample, columns) > budget:
        raise _refuse(sample.what, sample.path, too_big)
    types = {c: sample.type_of(c) for c in columns}
    text = [c for c in columns if _variable_width(types[c])]
    try:
        table = pq.ParquetFile(sample.handle, metadata=sample.parquet.metadata, read_dictionary=text).read(
            columns=columns, use_pandas_metadata=False)
        if table.nbytes - sum(table[c].nbytes for c in text) + sum(_decoded_bytes(table[c]) for c in text) > budget:
            raise _refuse(sample.what, sample.path, too_big)
        table = pa.table({c: _as_read(table[c], types[c], pc) for c in columns})
        return table.to_pandas(types_mapper=_nullable_integers, split_blocks=True, self_destruct=True)
    except DriftInputError:
        raise
    except (pa.ArrowException, OSError, ValueError) as err:  # a footer that lied, a page that does not decode
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise _refuse(sample.what, sample.path, f"not a readable Parquet file ({excerpt(first, 120)})") from None


def _as_read(column: Any, arrow_type: Any, pc: Any) -> Any:
    """A column as it is judged: text decoded to what it was; decimals as float64;
    durations and times of day as their count of units."""
    import pyarrow as pa

    if _variable_width(arrow_type):
        return column.cast(pa.large_string() if "string" in str(arrow_type) else pa.large_binary())
    if pa.types.is_decimal(arrow_type):
        return pc.cast(column, pa.float64(), safe=False)
    if pa.types.is_duration(arrow_type) or pa.types.is_time(arrow_type):
        # time32 casts to int32 only
        return pc.cast(pc.cast(column, pa.int32() if arrow_type.bit_width == 32 else pa.int64()), pa.int64())
    return column


def _nullable_integers(arrow_type: Any) -> Any:
    """Integers as pandas' nullable integers, so a column with nulls keeps its exact
    values until `exact_integers` decides how to hand them on."""
    import pandas as pd
    import pyarrow as pa

    if not pa.types.is_integer(arrow_type):
        return None
    return {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
            pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype()}[arrow_type]


def schema_of(sample: Sample) -> dict[str, Any]:
    return {n: sample.type_of(n) for n in sample.names}


def read_samples(reference_path: str, current_path: str, max_rows: int = MAX_ROWS,
                 max_columns: int = MAX_COLUMNS) -> tuple[Any, Any, list[NotJudged]]:
    """Both samples' judged columns as DataFrames, and the columns not judged by type:
    every limit and the schemas checked before a column is read."""
    reference = open_sample(reference_path, "reference", max_rows, max_columns)
    try:
        current = open_sample(current_path, "current", max_rows, max_columns)
        try:
            planned = plan(schema_of(reference), schema_of(current))
            return read_sample(reference, planned.columns), read_sample(current, planned.columns), planned.not_judged
        finally:
            current.close()
    finally:
        reference.close()
