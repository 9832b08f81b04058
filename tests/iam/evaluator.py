"""The real IAM evaluator for the tests (infra/checks/iam/evaluator.py): one that is not
installed fails the test with the line saying how to install it, and a simulation the
evaluator refuses fails it too."""

from __future__ import annotations

from typing import Any

import pytest

from infra.checks.iam.evaluator import EvaluatorError
from infra.checks.iam.evaluator import simulate as evaluate


def simulate(requests: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """{id: Allowed | ExplicitlyDenied | ImplicitlyDenied} for each (id, simulation)."""
    try:
        answers = evaluate(requests)
    except EvaluatorError as err:
        pytest.fail(str(err), pytrace=False)
    errors = {key: a["errors"] for key, a in answers.items() if a["result"] == "Error"}
    assert not errors, f"the evaluator refused these simulations: {errors}"
    return {key: a["result"] for key, a in answers.items()}
