"""A tenant's budgets: per run (`Budgets`, every run's caps) and per UTC day (the daily run budget).

Both come from the tenant's settings, read through their one schema (tenants.tenant_settings: the
keys, defaults, ranges; a stored value that cannot be used falls back to its default, a number out of
range is clamped so a bad setting cannot disable a limit).

The daily run budget is spent by agents.services.ask itself, so every caller gets it (the REST and MCP
edges, conversation turns, the admin's playground, `manage.py ask`): `spend_daily_run` raises
`BudgetExceeded` once the day's runs are used up (the REST API answers 429, MCP a tool error), and
tenants.counters.CounterUnavailable when nothing can count them (it fails closed: it caps spending).
An edge that must refuse before it answers (a stream's 200 goes out first) spends it itself and tells
ask so (`spend_budget=False`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tenants import counters, tenant_settings
from tenants.counters import Decision, RetryLater
from tenants.tenant_settings import Budgets, TenantSettings

__all__ = ["Budgets", "BudgetExceeded", "budgets_from_settings", "budgets_for_tenant", "daily_run_limit", "spend_daily_run",
           "consume_daily_run"]


class BudgetExceeded(RetryLater):
    """The tenant's daily run budget is used up: no run until `retry_after` seconds from now (UTC midnight)."""

    def __init__(self, retry_after: int):
        super().__init__("the tenant's daily agent-run budget is used up", retry_after)


def budgets_from_settings(stored: dict | None, **overrides: Any) -> Budgets:
    """The run budgets of stored tenant settings, with `overrides` (budget keys; None: not set) on top."""
    return tenant_settings.read(stored, **overrides).budgets


def budgets_for_tenant(tenant_id: int, **overrides: Any) -> Budgets:
    """Tenant `tenant_id`'s run budgets (its stored settings), with `overrides` on top."""
    return tenant_settings.for_tenant(tenant_id, **overrides).budgets


def daily_run_limit(stored: dict | None) -> int:
    """The agent runs per UTC day stored tenant settings allow (`daily_runs`, else DEFAULT_DAILY_RUNS; 0: unlimited)."""
    return tenant_settings.read(stored).daily_runs


def spend_daily_run(tenant_id: int, stored: TenantSettings | None = None) -> Decision:
    """Count one agent run against tenant `tenant_id`'s budget for today (UTC) and return the count.
    BudgetExceeded once it is used up (retry_after: seconds to UTC midnight), CounterUnavailable when
    nothing can count it. agents.services.ask calls it for every run it is not told was counted.
    `stored`: the tenant's settings when the caller has read them already (else read here)."""
    stored = stored if stored is not None else tenant_settings.for_tenant(tenant_id)
    decision = consume_daily_run(tenant_id, stored.daily_runs)
    if not decision.allowed:
        raise BudgetExceeded(decision.retry_after)
    return decision


def consume_daily_run(tenant_id: int, limit: int) -> Decision:
    """Take one of the `limit` runs (0 or less: unlimited) of tenant `tenant_id`'s budget for today (UTC);
    not allowed once they are used up. Fails closed: CounterUnavailable when nothing can count it."""
    if limit <= 0:
        return Decision(True, 0, 0)
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return counters.consume(f"runs:{tenant_id}:{now:%Y%m%d}", limit, 86400, reset_in=(midnight - now).total_seconds(),
                            fail_open=False)
