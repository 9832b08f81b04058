"""A tenant's training job never shares an IAM role name with the tenant's other roles: its
role is `<prefix>-<tenant>-<job>`, and the feature store's, the pipeline engine's, the
pipeline steps' and each drift check's are `<prefix>-<tenant>-<suffix>` too."""

from __future__ import annotations

import pytest

from components import drift_spec, features_spec, pipelines_spec, training_spec
from infra.config import ConfigError, parse_config, read_stack_file, stack_file

PREFIX, TENANT = "mlplat-prod", "research"
OTHERS = [features_spec.role_name(PREFIX, TENANT), pipelines_spec.engine_role_name(PREFIX, TENANT),
          pipelines_spec.steps_role_name(PREFIX, TENANT), drift_spec.role_name(PREFIX, TENANT, "gpt")]


@pytest.mark.parametrize("other", OTHERS)
def test_a_job_named_after_another_role_is_refused(other):
    job = other.removeprefix(f"{PREFIX}-{TENANT}-")
    assert training_spec.role_name(PREFIX, TENANT, job) == other  # the clash the check is for
    assert training_spec.role_collision(job)
    config = dict(read_stack_file(stack_file("prod")))
    config["mlplat:training"] = {**config.get("mlplat:training", {}), "name": job}
    with pytest.raises(ConfigError) as raised:
        parse_config(config, "stacks/Pulumi.prod.yaml")
    message = str(raised.value)
    assert "\n" not in message and "mlplat:training.name" in message and "pick another name" in message


@pytest.mark.parametrize("job", ["gpt2-smoke", "feature-lab", "drift", "pipeline", "featuresx"])
def test_look_alike_job_names_keep_their_own_role(job):
    assert training_spec.role_collision(job) is None
    assert training_spec.role_name(PREFIX, TENANT, job) not in OTHERS
