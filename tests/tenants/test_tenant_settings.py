"""The tenant settings schema (tenants.tenant_settings): `parse` refuses a bad value naming its key,
`read` reads stored settings exactly as the budgets and the daily run limit always did (defaults for
unusable values, numbers clamped, unknown keys ignored)."""

from __future__ import annotations

import pytest

from tenants import tenant_settings
from tenants.tenant_settings import Budgets, TenantSettingsError


@pytest.mark.parametrize("raw,key", [
    ([], "settings"),
    ({"daily_runs": "lots"}, "daily_runs"),
    ({"daily_runs": -1}, "daily_runs"),
    ({"daily_runs": True}, "daily_runs"),
    ({"max_k": 0}, "max_k"),
    ({"max_k": 4.5}, "max_k"),
    ({"max_tool_calls": "4"}, "max_tool_calls"),
    ({"budgets": {"max_wall_seconds": 10_000}}, "budgets.max_wall_seconds"),
    ({"budgets": {"max_tool_call": 3}}, "budgets.max_tool_call"),
    ({"budgets": []}, "budgets"),
    ({"strict_citations": "false"}, "strict_citations"),
    ({"evidence_retention_days": -3}, "evidence_retention_days"),
    ({"answer_cache_ttl_seconds": -1}, "answer_cache_ttl_seconds"),
    ({"answer_cache_ttl_seconds": "600"}, "answer_cache_ttl_seconds"),
    ({"answer_cache_ttl_seconds": True}, "answer_cache_ttl_seconds"),
    ({"max_tool_call": 3}, "max_tool_call"),
])
def test_parse_refuses_a_bad_value_naming_its_key(raw, key):
    with pytest.raises(TenantSettingsError) as refused:
        tenant_settings.parse(raw)
    assert refused.value.key == key and str(refused.value).startswith(f"{key}: ")
    assert isinstance(refused.value, ValueError)


def test_parse_takes_every_declared_key(settings):
    settings.DEFAULT_DAILY_RUNS = 9
    parsed = tenant_settings.parse({"daily_runs": 0, "evidence_retention_days": 30, "strict_citations": True,
                                    "max_k": 4, "budgets": {"max_wall_seconds": 2.5, "max_k": 6}})
    assert parsed.daily_runs == 0 and parsed.evidence_retention_days == 30
    assert parsed.budgets == Budgets(max_k=6, max_wall_seconds=2.5, strict_citations=True)  # "budgets" wins over the top level
    assert tenant_settings.parse({}).daily_runs == 9


def test_read_never_raises_and_keeps_the_old_readings(settings):
    settings.DEFAULT_DAILY_RUNS = 7
    settings.EVIDENCE_RETENTION_DAYS = 90
    read = tenant_settings.read({"budgets": {"max_tool_calls": "4", "max_k": 10_000, "max_wall_seconds": -5, "bogus": 1},
                                 "strict_citations": "yes", "max_iterations": "lots", "daily_runs": "bad",
                                 "evidence_retention_days": "30", "unknown": 1})
    assert read.budgets == Budgets(max_tool_calls=4, max_k=50, max_wall_seconds=1.0, strict_citations=True)
    assert read.daily_runs == 7 and read.evidence_retention_days == 90
    assert tenant_settings.read({"daily_runs": None}).daily_runs == 0  # null read as unlimited, as it always was
    assert tenant_settings.read({"daily_runs": "3"}).daily_runs == 3
    assert tenant_settings.read({"max_k": float("nan")}).budgets.max_k == Budgets().max_k
    assert tenant_settings.read(None) == tenant_settings.read([]) == tenant_settings.read({})
    assert tenant_settings.read({"budgets": {"max_k": 3}}, max_k=None, max_iterations=99).budgets == Budgets(max_k=3, max_iterations=30)


def test_every_key_is_documented():
    assert set(tenant_settings.TOP_KEYS) == {"budgets", "daily_runs", "evidence_retention_days", "answer_cache_ttl_seconds",
                                             *tenant_settings.BUDGET_KEYS}
    assert all(doc for doc in tenant_settings.TOP_KEYS.values())


def test_answer_cache_ttl_defaults_to_the_environment_and_a_tenant_may_turn_it_off(settings):
    settings.ANSWER_CACHE_TTL_SECONDS = 120
    assert tenant_settings.parse({}).answer_cache_ttl_seconds == 120
    assert tenant_settings.parse({"answer_cache_ttl_seconds": 0}).answer_cache_ttl_seconds == 0
    assert tenant_settings.read({"answer_cache_ttl_seconds": "bad"}).answer_cache_ttl_seconds == 120
