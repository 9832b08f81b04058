"""`python -m workloads.monitor drift` (and the drift job) on hostile input: a column the check
cannot judge is named in the verdict with why, never a traceback; a file that is not a
Parquet sample, or one past the limits, is one line and exit 2 within seconds, decided from
what the file is and from its footer before any data is read.

Most cases call the CLI's `main` in this process (Evidently is imported once); those that
could hang or take memory if a check were missing (a FIFO, /dev/zero, 30 million rows in a
small file, a text column that expands past the budget) run it in a subprocess with a
timeout and measure its peak memory."""

from __future__ import annotations

import contextlib
import decimal
import io
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, reject, settings
from hypothesis import strategies as st

from tests.workloads import processes
from workloads.monitor.cli import main
from workloads.monitor.drift import DriftInputError, NotJudged, Verdict, exact_integers, judge, kind_of, plan

REPO = Path(__file__).resolve().parents[2]
ROWS = 300
SECONDS = 10  # what a refusal may take


@dataclass
class Done:
    code: int
    out: str
    err: str
    seconds: float
    report: dict | None

    def refusal(self) -> str:
        """The one line of a refusal."""
        assert self.code == 2, self.out + self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in self.err, self.err
        assert self.seconds < SECONDS, f"took {self.seconds:.1f} s"
        return lines[0]

    def not_judged(self) -> dict[str, dict]:
        assert self.code in (0, 1), self.err
        return {n["column"]: n for n in self.report["not_judged"]}

    def judged(self) -> dict[str, dict]:
        return {c["column"]: c for c in self.report["columns"]}


def write(table: pa.Table, path: Path, **options) -> str:
    pq.write_table(table, path, **options)
    return str(path)


def cli(*args: str) -> Done:
    """The CLI in this process."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["drift", *args])
    return Done(code, out.getvalue(), err.getvalue(), time.perf_counter() - started, None)


def drift(tmp_path: Path, reference: pa.Table, current: pa.Table, *args: str) -> Done:
    """The drift check of two tables, its JSON report read back (strictly: NaN is not JSON)."""
    report = tmp_path / "drift.json"
    done = cli("--reference", write(reference, tmp_path / "reference.parquet"),
               "--current", write(current, tmp_path / "current.parquet"), "--json", str(report), *args)
    if done.code in (0, 1):
        done.report = json.loads(report.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
        assert done.report["drift"] is (done.code == 1)
        assert done.out.strip().splitlines()[-1].endswith("current rows)")
    else:
        assert not report.exists(), "a refusal writes nothing"
    return done


def subprocess_cli(*args: str) -> tuple[Done, float]:
    """The CLI in its own process through its entry point, as the drift job runs it: (what
    it did, its peak memory in MiB)."""
    ran = processes.run("workloads.monitor", "drift", *args)
    return Done(ran.code, ran.out, ran.err, ran.seconds, None), ran.rss / (1 << 20)


def normal(seed: int, rows: int = ROWS, shift: float = 0.0) -> pa.Array:
    return pa.array(np.random.default_rng(seed).normal(size=rows) + shift)


def pair(column: str, reference: pa.Array, current: pa.Array) -> tuple[pa.Table, pa.Table]:
    """Two samples: a plain column `a` that must still be judged, and `column`."""
    return pa.table({"a": normal(1), column: reference}), pa.table({"a": normal(2), column: current})


@pytest.fixture
def good(tmp_path) -> str:
    return write(pa.table({"a": normal(1)}), tmp_path / "good.parquet")


# --- columns the check cannot judge ---------------------------------------------------------

EMPTY = {
    "all NaN": pa.array([float("nan")] * ROWS),
    "all null": pa.nulls(ROWS, pa.float64()),
    "the null type": pa.nulls(ROWS),
    "all infinite": pa.array([float("inf"), float("-inf")] * (ROWS // 2)),
    "all null text": pa.nulls(ROWS, pa.string()),
}


@pytest.mark.parametrize("values", EMPTY.values(), ids=EMPTY.keys())
def test_a_column_with_no_values_in_either_sample_is_named_not_judged(tmp_path, values):
    done = drift(tmp_path, *pair("bad", values, values))
    assert done.code == 0, done.err
    assert done.not_judged()["bad"]["reason"].startswith("no values (every row null")
    assert done.not_judged()["bad"]["counts_as_drift"] is False
    assert list(done.judged()) == ["a"]
    assert "not judged: bad: no values (every row null" in done.out
    assert done.out.strip().endswith("0 of 1 columns drifted, 1 not judged (300 reference rows, 300 current rows)")


@pytest.mark.parametrize("values", EMPTY.values(), ids=EMPTY.keys())
def test_a_column_that_lost_its_values_counts_as_drift(tmp_path, values):
    """The feature stopped arriving: the strongest change there is, so exit 1, not 0."""
    had = pa.array(["x", "y"] * (ROWS // 2)) if values.type == pa.string() else normal(3)
    done = drift(tmp_path, *pair("bad", had, values))
    assert done.code == 1, done.out + done.err
    gone = done.not_judged()["bad"]
    assert gone["counts_as_drift"] is True and "in the current sample, not in the reference (300 values there)" \
        in gone["reason"]
    assert "not judged (counts as drift): bad: no values" in done.out
    assert done.report["drifted"] == [] and list(done.judged()) == ["a"]


def test_a_column_that_gained_values_counts_as_drift(tmp_path):
    done = drift(tmp_path, *pair("new", pa.nulls(ROWS, pa.float64()), normal(3)))
    assert done.code == 1 and done.not_judged()["new"]["counts_as_drift"] is True
    assert "in the reference sample, not in the current" in done.not_judged()["new"]["reason"]


NESTED = {
    "list": pa.array([[1, 2], None, []] * (ROWS // 3)),
    "large list": pa.array([[1.5], [2.5, None]] * (ROWS // 2), type=pa.large_list(pa.float64())),
    "fixed-size list": pa.array([[1, 2]] * ROWS, type=pa.list_(pa.int8(), 2)),
    "struct": pa.array([{"x": 1, "y": "a"}, None] * (ROWS // 2)),
    "map": pa.array([[("k", 1)], []] * (ROWS // 2), type=pa.map_(pa.string(), pa.int64())),
}


@pytest.mark.parametrize("values", NESTED.values(), ids=NESTED.keys())
def test_a_nested_column_is_named_not_judged(tmp_path, values):
    done = drift(tmp_path, *pair("nested", values, values))
    assert done.code == 0, done.err
    assert done.not_judged()["nested"]["reason"].startswith("it is nested (")
    assert list(done.judged()) == ["a"]


def test_points_in_time_are_named_not_judged(tmp_path):
    stamps = pa.array(np.arange(ROWS, dtype="int64") * 1000, type=pa.timestamp("ms", tz="UTC"))
    days = pa.array(np.arange(ROWS, dtype="int32"), type=pa.date32())
    reference = pa.table({"a": normal(1), "at": stamps, "day": days})
    current = pa.table({"a": normal(2), "at": stamps, "day": days})
    done = drift(tmp_path, reference, current)
    assert done.code == 0, done.err
    assert all(done.not_judged()[c]["reason"].startswith("it is a point in time") for c in ("at", "day"))


UINT64_MAX, INT64_MIN, INT64_MAX = 2**64 - 1, -(2**63), 2**63 - 1


@pytest.mark.parametrize("values", [
    pa.array([UINT64_MAX] * ROWS, type=pa.uint64()),
    pa.array([INT64_MIN] * ROWS, type=pa.int64()),
    pa.array([INT64_MIN, INT64_MAX] * (ROWS // 2), type=pa.int64()),
    pa.array([UINT64_MAX, None, 0] * (ROWS // 3), type=pa.uint64()),
    pa.array([2**52] * ROWS, type=pa.int64()),  # float64 holds it, but cannot bin a constant this large
], ids=["uint64 max", "int64 min", "int64 min and max", "uint64 max with nulls", "2**52"])
def test_integers_at_the_edge_of_their_range_are_judged(tmp_path, values):
    done = drift(tmp_path, *pair("edge", values, values))
    assert done.code == 0, done.out + done.err
    assert done.judged()["edge"]["drifted"] is False and done.report["not_judged"] == []


@pytest.mark.parametrize("top, kind", [(UINT64_MAX, pa.uint64()), (INT64_MAX, pa.int64())])
def test_integers_near_the_top_of_their_range_are_judged_exactly(tmp_path, top, kind):
    """Within 2,000 of 2**64 float64 can tell only a handful of values apart (its spacing
    there is 4,096): a shift of 500 is found only if the integers are compared exactly."""
    rng = np.random.default_rng(9)

    def near_top(shift: int) -> pa.Array:
        return pa.array([top - 2000 + int(v) + shift for v in rng.integers(0, 1000, 2000)], type=kind)

    reference = pa.table({"id": near_top(0)})
    same = drift(tmp_path, reference, pa.table({"id": near_top(0)}))
    assert same.code == 0 and same.judged()["id"]["drifted"] is False, same.out
    shifted = drift(tmp_path, reference, pa.table({"id": near_top(500)}))
    assert shifted.code == 1 and [d["column"] for d in shifted.report["drifted"]] == ["id"], shifted.out


def test_floats_float64_cannot_bin_are_named(tmp_path):
    constant = pa.array([1e17] * ROWS)
    both = drift(tmp_path, *pair("big", constant, constant))
    assert both.code == 0 and "cannot split into histogram bins" in both.not_judged()["big"]["reason"]
    one = drift(tmp_path, *pair("big", normal(3), pa.array([-1.7e308, 1.7e308] * (ROWS // 2))))
    assert one.code == 1 and one.not_judged()["big"]["counts_as_drift"] is True


def test_a_sample_with_no_column_to_judge_is_refused(tmp_path):
    table = pa.table({"tags": NESTED["list"], "nothing": pa.nulls(ROWS)})
    line = drift(tmp_path, table, table).refusal()
    assert line.startswith("error: no column can be judged: tags: it is nested (list<element: int64>)")
    assert "nothing: no values (every row null) in both samples" in line


def test_a_column_whose_kind_differs_is_refused(tmp_path):
    line = drift(tmp_path, pa.table({"x": pa.array([1, 2, 3])}), pa.table({"x": pa.array(["1", "2", "3"])})).refusal()
    assert line == "error: --current: column x is string but int64 in the reference"


def test_a_column_named_twice_is_refused(tmp_path):
    twice = pa.Table.from_arrays([normal(1), normal(2)], names=["a", "a"])
    assert drift(tmp_path, twice, twice).refusal().endswith("column a appears twice; name each column once")


def test_a_name_with_a_newline_stays_on_one_line(tmp_path):
    done = drift(tmp_path, *pair("x\ny", pa.nulls(ROWS, pa.float64()), pa.nulls(ROWS, pa.float64())))
    assert r"not judged: 'x\ny': no values" in done.out and len(done.out.splitlines()) == 2


# --- look-alikes that must still be judged -----------------------------------------------

def test_look_alikes_are_judged(tmp_path):
    """Some nulls or NaNs, a plain uint64, booleans (with nulls in one sample only), time
    of day, durations and decimals: every column judged."""
    def sample(seed: int) -> pa.Table:
        r = np.random.default_rng(seed)
        some = r.normal(size=ROWS)
        some[::7] = np.nan
        return pa.table({
            "some_nan": pa.array(some),
            "some_null": pa.array([None if i % 5 == 0 else float(v) for i, v in enumerate(r.normal(size=ROWS))]),
            "uint64": pa.array(r.integers(0, 10**6, ROWS).astype(np.uint64)),
            "flag": pa.array(r.random(ROWS) > 0.5) if seed == 1 else
            pa.array([None if i % 9 == 0 else bool(v > 0.5) for i, v in enumerate(r.random(ROWS))]),
            "one_value": pa.array([None] * (ROWS - 1) + [1.0]),
            "time_of_day": pa.array(r.integers(0, 86400, ROWS).astype(np.int32), type=pa.time32("s")),
            "latency": pa.array(r.integers(0, 10**6, ROWS), type=pa.duration("ms")),
            "amount": pa.array([decimal.Decimal(int(v)) / 100 for v in r.integers(0, 10**6, ROWS)],
                               type=pa.decimal128(12, 2)),
            "country": pa.array(r.choice(["ae", "sa", "qa"], ROWS)).dictionary_encode(),
        })

    done = drift(tmp_path, sample(1), sample(2))
    assert done.code in (0, 1), done.err
    assert done.report["not_judged"] == [] and len(done.judged()) == 9


def test_the_index_pandas_stored_is_not_a_column(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(5)
    frames = [pd.DataFrame({"a": rng.normal(size=ROWS)}, index=[f"row{i}" for i in range(ROWS)]) for _ in range(2)]
    for frame, name in zip(frames, ("r", "c")):
        frame.to_parquet(tmp_path / f"{name}.parquet")  # the index is stored as a column
    done = cli("--reference", str(tmp_path / "r.parquet"), "--current", str(tmp_path / "c.parquet"))
    assert done.code == 0 and done.out.strip().endswith("0 of 1 columns drifted (300 reference rows, 300 current rows)")


# --- limits, from the footer ---------------------------------------------------------------

def test_a_file_of_3000_columns_is_refused_from_its_footer(tmp_path, good):
    """Judged, 3,000 columns take Evidently minutes: in a subprocess, so that a missing
    check fails here in seconds."""
    wide = write(pa.table({f"c{i}": pa.array([0.0, 1.0]) for i in range(3000)}), tmp_path / "wide.parquet")
    done, _ = subprocess_cli("--reference", wide, "--current", good)
    assert done.refusal() == (f"error: --reference {wide}: has 3,000 columns; drift judges at most 100 "
                              "(--max-columns): give the features to compare, or raise --max-columns")


def test_the_limits_are_options(tmp_path):
    reference = pa.table({f"c{i}": normal(i, rows=2000) for i in range(4)})
    current = pa.table({f"c{i}": normal(10 + i, rows=2000) for i in range(4)})
    assert "holds 2,000 rows; drift reads at most 1,000 a sample (--max-rows)" in \
        drift(tmp_path, reference, current, "--max-rows", "1000").refusal()
    assert "has 4 columns; drift judges at most 3 (--max-columns)" in \
        drift(tmp_path, reference, current, "--max-columns", "3").refusal()
    assert drift(tmp_path, reference, current, "--max-rows", "2000", "--max-columns", "4").code in (0, 1)


@pytest.fixture(scope="module")
def thirty_million_rows(tmp_path_factory) -> Path:
    """30,000,000 rows of 0.0 in 30 row groups: a few hundred kilobytes on disk, 240 MB of
    float64 once read, and far more as pandas and Evidently copy it."""
    path = tmp_path_factory.mktemp("rows") / "rows.parquet"
    zeros = pa.table({"a": pa.array(np.zeros(1_000_000))})
    with pq.ParquetWriter(path, zeros.schema, compression="zstd") as writer:
        for _ in range(30):
            writer.write_table(zeros)
    return path


def test_30_million_rows_in_a_small_file_are_refused_before_reading(thirty_million_rows, good):
    assert thirty_million_rows.stat().st_size < 1 << 20
    done, peak_mib = subprocess_cli("--reference", good, "--current", str(thirty_million_rows))
    assert done.refusal() == (f"error: --current {thirty_million_rows}: holds 30,000,000 rows; drift reads at most "
                              "1,000,000 a sample (--max-rows): give a sample of the rows, or raise --max-rows")
    assert peak_mib < 1024, f"peak {peak_mib:.0f} MiB"


def test_columns_that_take_more_than_the_budget_are_refused_from_the_footer(tmp_path):
    """1,000,000 rows x 40 float64 columns of 0.0: 320 MB once read, a few hundred
    kilobytes on disk (each column encodes to almost nothing)."""
    zeros = pa.array(np.zeros(1_000_000))
    path = write(pa.table({f"c{i}": zeros for i in range(40)}), tmp_path / "wide.parquet", compression="zstd")
    done, peak_mib = subprocess_cli("--reference", path, "--current", path)
    assert done.refusal() == (f"error: --reference {path}: its 40 judged columns take more than 268,435,456 bytes "
                              "once read; give a sample of fewer rows (or fewer columns)")
    assert peak_mib < 200, f"peak {peak_mib:.0f} MiB: the columns were read"


def test_text_that_expands_past_the_budget_is_refused_before_it_expands(tmp_path):
    """One string of 1 MiB in every one of 1,000 rows, dictionary-encoded: kilobytes on
    disk, a gigabyte if each row got its own copy. No Arrow schema is stored, so it reads
    back as plain text."""
    big = pa.DictionaryArray.from_arrays(pa.array(np.zeros(1000, dtype=np.int32)), pa.array(["x" * (1 << 20)]))
    path = write(pa.table({"a": big}), tmp_path / "bomb.parquet", store_schema=False, compression="zstd")
    assert os.path.getsize(path) < 1 << 20
    text = write(pa.table({"a": pa.array(["x", "y"])}), tmp_path / "text.parquet")
    done, peak_mib = subprocess_cli("--reference", text, "--current", path)
    assert done.refusal() == (f"error: --current {path}: its 1 judged columns take more than 268,435,456 bytes "
                              "once read; give a sample of fewer rows (or fewer columns)")
    assert peak_mib < 1024, f"peak {peak_mib:.0f} MiB"


# --- what the inputs are --------------------------------------------------------------------

def test_a_device_is_refused_by_what_it_is(good):
    done, _ = subprocess_cli("--reference", good, "--current", "/dev/zero")
    assert done.refusal() == "error: --current /dev/zero: is a character device, not a Parquet file; name the file " \
                             "itself"


def test_a_fifo_is_refused_without_blocking(tmp_path, good):
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    done, _ = subprocess_cli("--reference", str(fifo), "--current", good)
    assert done.refusal() == f"error: --reference {fifo}: is a FIFO (named pipe), not a Parquet file; name the file " \
                             "itself"


def test_a_directory_and_a_symlink_loop_are_refused(tmp_path, good):
    assert cli("--reference", str(tmp_path), "--current", good).refusal() == \
        f"error: --reference {tmp_path}: is a directory; give a Parquet file"
    loop = tmp_path / "loop.parquet"
    loop.symlink_to(loop)
    assert cli("--reference", good, "--current", str(loop)).refusal() == \
        f"error: --current {loop}: is a symbolic link that loops; point it at the Parquet file"


def test_a_huge_file_is_refused_by_its_size_and_a_large_one_by_its_first_bytes(tmp_path, good):
    huge, large = tmp_path / "huge.parquet", tmp_path / "large.parquet"
    for path, size in ((huge, 5 << 30), (large, 64 << 20)):
        with open(path, "wb") as f:  # sparse: nothing is written to disk
            f.truncate(size)
    assert cli("--reference", good, "--current", str(huge)).refusal() == \
        f"error: --current {huge}: is 5,368,709,120 bytes; a drift sample may be at most 4,294,967,296 (sample " \
        "fewer rows)"
    assert cli("--reference", good, "--current", str(large)).refusal() == \
        f"error: --current {large}: not a readable Parquet file (it does not begin and end with PAR1)"


@pytest.mark.parametrize("content, said", [
    (b"PAR1" + b"\0" * 100 + (10**6).to_bytes(4, "little") + b"PAR1", "its footer claims 1,000,000 bytes of 112"),
    (b"PAR1" + b"\xff" * 100 + (100).to_bytes(4, "little") + b"PAR1", "not a readable Parquet file ("),
    (b"PAR1" + b"\0" * 100 + (100).to_bytes(4, "little") + b"PARE", "its footer is encrypted"),
])
def test_a_file_that_only_looks_like_parquet_is_one_line(tmp_path, good, content, said):
    path = tmp_path / "fake.parquet"
    path.write_bytes(content)
    assert said in cli("--reference", good, "--current", str(path)).refusal()


@pytest.mark.parametrize("pandas", [b"[" * 100_000, b"not json", b"[1, 2]"])
def test_pandas_metadata_that_is_not_what_pandas_writes_is_one_line(tmp_path, good, pandas):
    path = write(pa.table({"a": normal(1)}).replace_schema_metadata({b"pandas": pandas}), tmp_path / "meta.parquet")
    assert cli("--reference", good, "--current", path).refusal() == \
        f"error: --current {path}: not a readable Parquet file (its pandas metadata is not a JSON object)"


def test_a_path_with_a_newline_stays_on_one_line(tmp_path, good):
    line = cli("--reference", good, "--current", str(tmp_path / "x\ny.parquet")).refusal()
    assert line.endswith("y.parquet': no such file")


def test_a_json_path_that_cannot_be_written_is_refused_before_the_check(tmp_path, good):
    line = cli("--reference", good, "--current", good, "--json", str(tmp_path)).refusal()
    assert line == f"error: {tmp_path}: is a directory; name the file to write the drift report to"


# --- the drift job -------------------------------------------------------------------------

def test_the_drift_job_names_what_it_did_not_judge_and_pushes_a_lost_feature_as_drifted():
    import pandas as pd

    from workloads.monitor.drift_job import COMPARED, push

    rng = np.random.default_rng(0)
    baseline = pd.DataFrame({c: rng.normal(size=400) for c in COMPARED})
    current = baseline.copy()
    current["std_token_id"] = np.nan
    verdict = judge(baseline, current)
    assert verdict.drift and [c.column for c in verdict.columns] == ["distinct_ratio", "mean_token_id"]
    assert verdict.not_judged[0].column == "std_token_id" and verdict.not_judged[0].counts_as_drift
    pushed = []
    push("gw", "gpt", 3, verdict.columns, {"current": 400}, pusher=lambda *a, **k: pushed.append(k["registry"]),
         not_judged=verdict.not_judged)
    drifted = {s.labels["column"]: s.value for m in pushed[0].collect() if m.name == "mlplat_model_input_drifted"
               for s in m.samples}
    assert drifted == {"distinct_ratio": 0.0, "mean_token_id": 0.0, "std_token_id": 1.0}


def test_the_drift_job_names_a_log_that_is_not_one(tmp_path):
    from datetime import datetime, timezone

    from workloads.monitor.drift_job import DriftJobError, logged_requests

    now = datetime.now(timezone.utc)
    day = tmp_path / f"date={now:%Y-%m-%d}"
    day.mkdir()
    os.mkfifo(day / "0-pipe.parquet")
    said: list[BaseException] = []

    def read() -> None:
        try:
            logged_requests(str(tmp_path), 1, now)
        except BaseException as err:  # noqa: BLE001 - looked at below
            said.append(err)

    reader = threading.Thread(target=read, daemon=True)  # a read that blocks on the FIFO fails the test
    reader.start()
    reader.join(SECONDS)
    assert not reader.is_alive(), "the job blocked on a FIFO"
    assert isinstance(said[0], DriftJobError) and \
        "0-pipe.parquet: is a FIFO (named pipe), not a Parquet file" in str(said[0])
    (day / "0-pipe.parquet").unlink()
    (day / "1-junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DriftJobError, match=r"request log .*1-junk.parquet: not a readable Parquet file"):
        logged_requests(str(tmp_path), 1, now)
    write(pa.table({"time": [now.isoformat()]}), day / "1-junk.parquet")
    with pytest.raises(DriftJobError, match="lacks tokens, distinct_ratio, mean_token_id, std_token_id"):
        logged_requests(str(tmp_path), 1, now)


def test_a_column_evidently_fails_on_is_named_and_the_others_judged(monkeypatch):
    """Kinds nothing here foresaw: Evidently's failure on one column, or a score that is no
    number, is named in the verdict; the other columns keep theirs."""
    import pandas as pd

    from workloads.monitor import drift as module

    judged = module.compare

    def compare(reference, current):
        if "b" in reference.columns:
            raise ValueError("no\nway")
        results = judged(reference, current)
        return [module.ColumnDrift(**{**r.as_dict(), "score": float("nan")}) if r.column == "c" else r
                for r in results]

    monkeypatch.setattr(module, "compare", compare)
    rng = np.random.default_rng(0)
    frames = [pd.DataFrame({c: rng.normal(size=200) for c in "abc"}) for _ in range(2)]
    verdict = judge(*frames)
    assert [c.column for c in verdict.columns] == ["a"]
    assert [(n.column, n.reason) for n in verdict.not_judged] == [
        ("b", "Evidently cannot judge it (ValueError: 'no')"), ("c", "Evidently's K-S p_value gave no score (nan)")]


# --- properties ------------------------------------------------------------------------------

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_SCALARS = [pa.null(), pa.bool_(), *_INTS, pa.float16(), pa.float32(), pa.float64(), pa.string(), pa.large_string(),
            pa.binary(), pa.large_binary(), pa.binary(3), pa.date32(), pa.timestamp("ms"),
            pa.timestamp("us", tz="Asia/Dubai"), pa.time32("s"), pa.time64("ns"), pa.duration("ms"),
            pa.decimal128(9, 2), pa.decimal128(38, 0), pa.decimal256(76, 0), pa.dictionary(pa.int32(), pa.string()),
            pa.dictionary(pa.int8(), pa.int64())]


def _nested(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        inner.map(pa.list_), inner.map(pa.large_list),
        st.tuples(inner, st.integers(1, 3)).map(lambda t: pa.list_(t[0], t[1])),
        st.lists(inner, min_size=1, max_size=3).map(lambda ts: pa.struct([(f"f{i}", t) for i, t in enumerate(ts)])),
        st.tuples(st.sampled_from([pa.string(), pa.int32()]), inner).map(lambda kv: pa.map_(*kv)))


ARROW_TYPES = st.recursive(st.sampled_from(_SCALARS), _nested, max_leaves=4)


def _integers_of(arrow_type: pa.DataType) -> st.SearchStrategy:
    info = np.iinfo(arrow_type.to_pandas_dtype())
    edges = st.sampled_from([int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2])
    return st.one_of(edges, st.integers(int(info.min), int(info.max)))


def _stored_as(arrow_type: pa.DataType, storage: pa.DataType, low: int, high: int) -> st.SearchStrategy:
    return st.integers(low, high).map(lambda v: pa.scalar(v, storage).cast(arrow_type))


def values_of(arrow_type: pa.DataType) -> st.SearchStrategy:
    """Python (or Arrow scalar) values of an Arrow type, null among them."""
    return st.none() if pa.types.is_null(arrow_type) else st.one_of(st.none(), present_values_of(arrow_type))


def present_values_of(arrow_type: pa.DataType) -> st.SearchStrategy:
    """As values_of, never null."""
    t = pa.types
    if t.is_boolean(arrow_type):
        some = st.booleans()
    elif t.is_integer(arrow_type):
        some = _integers_of(arrow_type)
    elif t.is_floating(arrow_type):
        width = arrow_type.bit_width
        top = float(np.finfo(f"float{width}").max)  # the edges of the type's range, and a large constant
        some = st.one_of(st.floats(width=width), st.sampled_from([0.0, top, -top, float("nan"), min(1e17, top)]))
        if width == 16:
            some = some.map(np.float16)
    elif t.is_string(arrow_type) or t.is_large_string(arrow_type):
        some = st.text(max_size=4)
    elif t.is_fixed_size_binary(arrow_type):
        some = st.binary(min_size=arrow_type.byte_width, max_size=arrow_type.byte_width)
    elif t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        some = st.binary(max_size=4)
    elif t.is_date32(arrow_type):
        some = _stored_as(arrow_type, pa.int32(), -(10**6), 10**6)
    elif t.is_timestamp(arrow_type) or t.is_duration(arrow_type):
        some = _stored_as(arrow_type, pa.int64(), -(2**62), 2**62)
    elif t.is_time32(arrow_type):
        some = _stored_as(arrow_type, pa.int32(), 0, 86399)
    elif t.is_time64(arrow_type):
        some = _stored_as(arrow_type, pa.int64(), 0, 86399 * 10**9)
    elif t.is_decimal(arrow_type):
        bound = 10**arrow_type.precision - 1
        exact = decimal.Context(prec=arrow_type.precision + 2)
        some = st.integers(-bound, bound).map(lambda v: decimal.Decimal(v).scaleb(-arrow_type.scale, exact))
    elif t.is_dictionary(arrow_type):
        some = present_values_of(arrow_type.value_type)
    elif t.is_list(arrow_type) or t.is_large_list(arrow_type):
        some = st.lists(values_of(arrow_type.value_type), max_size=3)
    elif t.is_fixed_size_list(arrow_type):
        some = st.lists(values_of(arrow_type.value_type), min_size=arrow_type.list_size,
                        max_size=arrow_type.list_size)
    elif t.is_struct(arrow_type):
        some = st.fixed_dictionaries({f.name: values_of(f.type) for f in arrow_type})
    elif t.is_map(arrow_type):
        some = st.lists(st.tuples(present_values_of(arrow_type.key_type), values_of(arrow_type.item_type)),
                        max_size=2)
    else:
        raise AssertionError(f"no values for {arrow_type}")
    return some


@st.composite
def columns_of(draw, arrow_type: pa.DataType, rows: int) -> pa.Array:
    """A column: varied values, or one value (null, NaN, an integer's edge) in every row."""
    value = values_of(arrow_type)
    if draw(st.booleans()):
        return pa.array([draw(value)] * rows, type=arrow_type)
    return pa.array(draw(st.lists(value, min_size=rows, max_size=rows)), type=arrow_type)


@st.composite
def sample_pairs(draw) -> tuple[pa.Table, pa.Table]:
    """Two small tables with (mostly) the same columns: names that may repeat or hold a
    newline, types of every kind, and now and then one column of another type in one."""
    count = draw(st.integers(1, 3))
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "", "x\ny"]), min_size=count, max_size=count,
                          unique=draw(st.integers(0, 9)) > 0))
    types = draw(st.lists(st.one_of(st.sampled_from(_SCALARS), ARROW_TYPES), min_size=count, max_size=count))
    tables = []
    for sample in range(2):
        rows = draw(st.integers(1, 12))
        these = [draw(ARROW_TYPES) if sample and draw(st.integers(0, 9)) == 0 else t for t in types]
        tables.append(pa.Table.from_arrays([draw(columns_of(t, rows)) for t in these], names=names))
    return tables[0], tables[1]


_EDGE = pa.table({"a": pa.array([UINT64_MAX] * 3, type=pa.uint64())})


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sample_pairs())
@example((_EDGE, _EDGE))
@example((pa.table({"a": pa.array([1.0, 2.0])}), pa.table({"a": pa.array([None, None], pa.float64())})))
@example((pa.table({"a": pa.array([[1]])}), pa.table({"a": pa.array([[2]])})))
@example((pa.table({"x\ny": pa.nulls(1, pa.map_(pa.string(), pa.null()))}),) * 2)  # the type's text holds the name
def test_any_pair_of_small_samples_gets_a_verdict_or_one_line(tmp_path_factory, tables):
    folder = tmp_path_factory.mktemp("fuzz")
    reference, current = tables
    for table in tables:
        try:  # what pyarrow itself cannot write (a dictionary under a null struct) is no sample
            table.validate(full=True)
            pq.write_table(table, io.BytesIO())
        except pa.ArrowException:
            reject()
    done = drift(folder, reference, current)
    event(f"exit {done.code}")
    if done.code == 2:
        done.refusal()
    else:
        assert done.code in (0, 1) and not done.err, done.err
        named = [*done.judged(), *done.not_judged()]
        assert sorted(named) == sorted(set(reference.column_names)), named


@pytest.mark.fuzz
@given(st.dictionaries(st.text(max_size=3), ARROW_TYPES, max_size=4), st.data())
@example({"a": pa.null()}, None)
@example({"a": pa.list_(pa.int8()), "b": pa.timestamp("s")}, None)
def test_the_schema_check_judges_numbers_and_categories_and_names_the_rest(reference, data):
    """Every column is judged or named with why, or the pair is refused in one line."""
    current = dict(reference)
    if data is not None and reference and data.draw(st.booleans()):
        current[data.draw(st.sampled_from(sorted(reference)))] = data.draw(ARROW_TYPES)
    try:
        planned = plan(reference, current)
    except DriftInputError as err:
        assert "\n" not in str(err)
        return
    assert sorted([*planned.columns, *(n.column for n in planned.not_judged)]) == sorted(reference)
    for name in planned.columns:
        assert {kind_of(reference[name])[0], kind_of(current[name])[0]} <= {"number", "category", "null"}
    for skipped in planned.not_judged:
        assert skipped.reason and "\n" not in skipped.reason and not skipped.counts_as_drift


@pytest.mark.fuzz
@given(st.sampled_from([pa.int64(), pa.uint64()]).flatmap(lambda t: st.tuples(
    st.lists(_integers_of(t), min_size=1, max_size=20), st.lists(_integers_of(t), min_size=1, max_size=20),
    st.just(t))))
@example(([UINT64_MAX, UINT64_MAX - 1], [UINT64_MAX - 4096], pa.uint64()))
@example(([INT64_MIN, INT64_MIN + 1], [INT64_MAX], pa.int64()))
def test_integers_keep_their_order_and_distances(samples):
    """What the tests see of two integer columns is the integers shifted by one common
    amount: order kept always, distances exact within 2**53."""
    import pandas as pd

    reference, current, kind = samples
    as_series = [pd.Series(pd.array(v, dtype="UInt64" if kind == pa.uint64() else "Int64")) for v in (reference,
                                                                                                       current)]
    seen = np.concatenate([s.to_numpy(dtype=np.float64) for s in exact_integers(*as_series)])
    given_ = reference + current
    for (i, a), (j, b) in zip(enumerate(given_), enumerate(given_[1:], 1)):
        if a < b:
            assert seen[i] <= seen[j]
        if abs(b - a) <= 2**53 and max(given_) - min(given_) <= 2**53:
            assert seen[j] - seen[i] == b - a, (a, b, seen[i], seen[j])
    assert np.isfinite(seen).all()


def test_a_column_lost_counts_as_drift_even_with_nothing_else_judged():
    assert Verdict([], [NotJudged("b", "no values", counts_as_drift=True)]).drift
    assert not Verdict([], [NotJudged("b", "nested")]).drift
