"""`mlplat:pipelines` as a stack file states it: each tenant's golden-path parameters are
checked where they are written (one line naming the key), before any layer renders them."""

from __future__ import annotations

import copy

import pytest

from infra.config import ConfigError, parse_config
from tests.unit.test_config import raw_stack


def parsed(change) -> str | None:
    raw = copy.deepcopy(raw_stack("prod"))
    change(raw)
    try:
        parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
    except ConfigError as err:
        assert "\n" not in str(err)
        return str(err)
    return None


def research(raw) -> dict:
    return raw["mlplat:pipelines"]["tenants"]["research"]


def test_prods_pipeline_parses():
    assert parsed(lambda raw: None) is None


@pytest.mark.parametrize("change, says", [
    (lambda raw: raw["mlplat:pipelines"]["tenants"].update({"nobody": {**research(raw), "model": "nobody-churn"}}),
     "mlplat:pipelines.tenants.nobody: 'nobody' is not a tenant"),
    (lambda raw: research(raw).update({"workdir": "/tmp/pipelines"}),
     "research.workdir: '/tmp/pipelines' is outside the tenant's scratch, which the steps mount at /fsx"),
    (lambda raw: research(raw)["features"].update({"config": "/elsewhere.yaml"}),
     "research.features.config: the steps read the tenant's feature_store.yaml at /etc/feast/feature_store.yaml"),
    (lambda raw: research(raw).update({"model": "applied-churn"}),
     "model 'applied-churn' is not one of tenant 'research''s"),
    (lambda raw: research(raw).update({"tenant": "applied"}), "research.tenant: 'applied'; a tenant's pipeline"),
    (lambda raw: research(raw)["training"].update({"preset": "gpt-99b"}), "research.training.preset"),
    (lambda raw: (raw.update({"mlplat:tracking": {"enabled": False}}),
                  raw["mlplat:inference"]["drift"].update({"enabled": False})),
     "the pipeline engine keeps its database on the tracking server's PostgreSQL"),
    (lambda raw: raw.update({"mlplat:features": {"tenants": ["applied"]}}),
     "tenant 'research' has no feature project"),
    (lambda raw: raw["mlplat:pipelines"].update({"schedule": "every day"}), "mlplat:pipelines.schedule"),
])
def test_a_wrong_pipeline_setting_is_one_line_naming_it(change, says):
    message = parsed(change)
    assert message is not None and says in message, message
