"""The golden path's parameters, run ids and tokens, without servers (the whole path runs
on real servers in tests/services/test_pipeline.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from workloads.pipeline import tokens
from workloads.pipeline.params import PipelineInputError, check_run_id, parse

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "workloads" / "pipeline" / "example.yaml"


@pytest.fixture
def example(monkeypatch) -> dict:
    monkeypatch.setenv("MLPLAT_TENANT", "research")
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_is_a_valid_run(example):
    params = parse(example, "example.yaml")
    assert params.model == "research-churn" and params.training.checkpoint_upload.endswith("/research")


@pytest.mark.parametrize(("change", "said"), [
    ({"tenant": "Research"}, "tenant: String should match pattern"),
    ({"model": "analytics-churn"}, "is not one of tenant 'research''s"),
    ({"extra": 1}, "extra: Extra inputs are not permitted"),
    ({"evaluation": {"holdout": 1.0}}, "evaluation.holdout: Input should be less than 1"),
    ({"training": {"max_steps": 0, "checkpoint_upload": "s3://c/runs/research"}},
     "training.max_steps: Input should be greater than or equal to 1"),
    ({"features": {"config": "c", "entities": "e", "features": ["spend"], "dataset": "d"}},
     "features.features.0: String should match pattern"),
    ({"workdir": "/scratch/\nx"}, "workdir: String should match pattern"),
    ({"workdir": "scratch/runs"}, "workdir: String should match pattern"),  # relative: lands in the checkout
    ({"workdir": "s3://bucket/runs"}, "workdir: String should match pattern"),
    ({"serving": {"repository": "--help", "model_name": "m"}}, "serving.repository: String should match pattern"),
    ({"training": {"preset": "huge", "checkpoint_upload": "s3://c/runs/research"}}, "training.preset: Input should be"),
])
def test_a_bad_field_is_named_in_one_line(example, change, said):
    with pytest.raises(PipelineInputError) as refused:
        parse({**example, **change}, "golden.yaml")
    assert said in str(refused.value) and str(refused.value).startswith("golden.yaml: ")
    assert "\n" not in str(refused.value)


def test_the_presets_are_the_trainers():
    from workloads.pipeline.params import PRESETS
    from workloads.train.shapes import PRESETS as TRAINER

    assert PRESETS == tuple(sorted(TRAINER))


def test_another_tenants_parameters_are_refused(example, monkeypatch):
    monkeypatch.setenv("MLPLAT_TENANT", "analytics")
    with pytest.raises(PipelineInputError, match="tenant 'research' is not this pod's tenant 'analytics'"):
        parse(example, "golden.yaml")
    monkeypatch.delenv("MLPLAT_TENANT")
    with pytest.raises(PipelineInputError, match="MLPLAT_TENANT is not set"):
        parse(example, "golden.yaml")


@pytest.mark.parametrize("run", ["", "-a", "A", "a b", "a/b", "a" * 129, "a\n"])
def test_a_bad_run_id_is_refused(run):
    with pytest.raises(PipelineInputError, match="run id"):
        check_run_id(run)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=6), max_leaves=30))
def test_any_document_is_a_run_or_one_line(document):
    os.environ["MLPLAT_TENANT"] = "research"
    try:
        parse(document, "fuzz.yaml")
    except PipelineInputError as err:
        assert "\n" not in str(err)


@pytest.mark.parametrize(("content", "said"), [
    ("tenant: [", "fuzz.yaml"),
    ("- a\n- b\n", "(top level): Input should be a valid dictionary"),
    ("[" * 10_000 + "]" * 10_000, "nested"),
])
def test_the_cli_refuses_a_bad_file_in_one_line_exit_2(tmp_path, content, said):
    path = tmp_path / "fuzz.yaml"
    path.write_text(content)
    done = subprocess.run([sys.executable, "-m", "workloads.pipeline", "check", "--params", str(path)], cwd=REPO,
                          env={**os.environ, "MLPLAT_TENANT": "research"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr


@given(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**12, 10**12)),
       st.integers(0, 7), st.integers(2, 64))
def test_every_value_is_a_token_of_its_own_feature(value, feature, bins):
    token = tokens.value_token(value, feature, bins)
    assert feature * (bins + 1) <= token <= feature * (bins + 1) + bins
    assert token < tokens.vocab_size(8, bins) - 1  # never the separator
    if value is None or isinstance(value, float) and math.isnan(value):
        assert token == feature * (bins + 1) + bins  # missing has its own token


def test_signs_and_magnitudes_are_told_apart():
    assert len({tokens.value_token(v, 0, 32) for v in (0.0, 1.0, -1.0, 100.0, -100.0, None)}) == 6
    assert tokens.value_token(5.0, 0, 32) == tokens.value_token(5.0, 0, 32)  # a value alone fixes its token


def test_an_entity_is_on_one_side_of_the_split():
    table = pa.table({"customer_id": [1, 2, 3, 1, 2, 3] * 50 + list(range(4, 404)),
                      "event_timestamp": [0] * 700, "spend": [1.0] * 700})
    train, held = tokens.rows_as_tokens(table, ("v:spend",), ("customer_id",), 8, 0.3)
    assert len(train) + len(held) == 2 * 700
    heldout_ids = {c for c in range(1, 404) if tokens.heldout((c,), 0.3)}
    assert len(held) == 2 * sum(1 for c in table.column("customer_id").to_pylist() if c in heldout_ids)
    assert 0.2 < len(heldout_ids) / 403 < 0.4  # about the fraction asked for


def test_a_missing_feature_column_is_named():
    with pytest.raises(ValueError, match="no column 'visits'"):
        tokens.rows_as_tokens(pa.table({"customer_id": [1], "spend": [1.0]}), ("v:spend", "v:visits"),
                              ("customer_id",), 8, 0.5)
    with pytest.raises(ValueError, match="no column 'region'"):
        tokens.rows_as_tokens(pa.table({"customer_id": [1], "spend": [1.0]}), ("v:spend",), ("region",), 8, 0.5)


def test_a_label_column_does_not_split_an_entity():
    """Only the join keys choose the side: a label beside them must not move rows apart."""
    table = pa.table({"customer_id": [5] * 40, "label": list(range(40)), "event_timestamp": [0] * 40,
                      "spend": [1.0] * 40})
    train, held = tokens.rows_as_tokens(table, ("v:spend",), ("customer_id",), 8, 0.5)
    assert sorted((len(train), len(held))) == [0, 80]
    assert tokens.heldout((7,), 0.5) == tokens.heldout((7.0,), 0.5)  # one key, typed either way


def test_a_value_that_is_not_a_number_is_named():
    with pytest.raises(ValueError, match="holds list values"):
        tokens.value_token([1, 2], 0, 8)
