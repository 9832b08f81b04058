"""The feature store's pure parts: project names, the key-pattern clash the config refuses,
the ACL, the CronJob's schedule and the settings the config takes or refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from components.features_spec import access_string, key_pattern_overlap, project_name, schedule
from infra.config import FeaturesConfig


def test_a_project_is_named_after_its_tenant_unless_config_names_it():
    assert project_name("team-a") == "team_a"
    assert project_name("team-a", {"team-a": "growth"}) == "growth"


def test_a_project_ending_with_another_is_a_clash_either_way_round():
    # Keys end with the project: `*a` would match every key of `ba`.
    assert key_pattern_overlap({"t1": "a", "t2": "ba"}) == (("t1", "a"), ("t2", "ba"))
    assert key_pattern_overlap({"t2": "ba", "t1": "a"}) == (("t1", "a"), ("t2", "ba"))
    assert key_pattern_overlap({"research": "research", "applied": "applied"}) is None


def test_the_acl_reaches_one_projects_keys_and_lists_none():
    acl = access_string("research").split()
    assert acl[:3] == ["on", "~*research", "-@all"]
    assert {"-@dangerous", "-scan"} <= set(acl)
    assert not any(rule.startswith(("~*", "%")) and rule != "~*research" for rule in acl)


@pytest.mark.parametrize(("minutes", "cron"), [(5, "*/5 * * * *"), (30, "*/30 * * * *"), (60, "0 * * * *"),
                                               (120, "0 */2 * * *"), (1440, "0 0 * * *")])
def test_the_schedule_runs_on_the_clock(minutes, cron):
    FeaturesConfig(materializeEveryMinutes=minutes)
    assert schedule(minutes) == cron


@pytest.mark.parametrize("minutes", [7, 45, 90, 300])
def test_a_schedule_cron_cannot_keep_is_refused(minutes):
    with pytest.raises(ValidationError, match="not a divisor of an hour or of a day"):
        FeaturesConfig(materializeEveryMinutes=minutes)


def test_the_online_store_cannot_go_without_tls():
    with pytest.raises(ValidationError, match="without TLS"):
        FeaturesConfig(transitEncryption=False)


def test_late_defaults_to_twice_the_interval_plus_a_quarter_hour():
    assert FeaturesConfig(materializeEveryMinutes=30).late_after == 75
    assert FeaturesConfig(lateAfterMinutes=20).late_after == 20
