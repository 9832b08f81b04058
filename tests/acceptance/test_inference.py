"""The inference smoke client answered (see docs/acceptance.md)."""

from __future__ import annotations

import pytest

from infra.acceptance.inference import check_inference_smoke


def test_inference_smoke(inference_smoke, expect):
    problems = check_inference_smoke(inference_smoke, expect.served_model)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
