"""The one schema of a tenant's settings (`Tenant.settings`, a JSON object): every key with its type,
default, range and meaning, and the two ways to read it.

Keys (budget keys may also sit under "budgets", which wins over the same key at the top level):

- the run budgets (`Budgets` below: max_tool_calls, max_iterations, ..., strict_citations), which
  agents.budgets hands to every run;
- `daily_runs`: agent runs per UTC day (0: unlimited; default the DEFAULT_DAILY_RUNS environment
  setting), spent by agents.budgets.spend_daily_run;
- `evidence_retention_days`: days a run's retrieved text is kept (default EVIDENCE_RETENTION_DAYS),
  read by agents.citations (evidence retention);
- `answer_cache_ttl_seconds`: seconds a run's answer is reused for the same question (0: off; default
  the ANSWER_CACHE_TTL_SECONDS environment setting), read by agents.answer_cache.

Reading:

- `parse(raw)` validates what is about to be stored (the admin's tenant form, tenants.services):
  `TenantSettingsError` (a ValueError) naming the first bad key (`budgets.max_k: ...`) for a value
  of the wrong type, out of range, or an unknown key;
- `read(raw)` / `for_tenant(tenant_id)` read what is stored, never raising: a value that cannot be
  used falls back to its default, a number out of range is clamped to it (so a bad setting cannot
  disable a limit), unknown keys are ignored. Stored data is never rewritten.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tenants.conf import product_settings
from tenants.models import Tenant


def _key(default: Any, lo: float | None, hi: float | None, doc: str) -> Any:
    """A budget field: its default, the range a stored number is clamped to, and what it means."""
    return field(default=default, metadata={"range": (lo, hi), "doc": doc})


@dataclass(frozen=True)
class Budgets:
    """A run's budgets: the defaults below, overridden per tenant by the keys of the same name."""

    max_tool_calls: int = _key(12, 0, 100, "tool calls in one run")
    max_iterations: int = _key(6, 1, 30, "model turns in the agentic loop; search rounds in the pipeline")
    max_context_chunks: int = _key(10, 1, 50, "chunks in the final context of classic/pipeline answers")
    max_tokens: int = _key(60_000, 1_000, 2_000_000, "input + output tokens over all model calls of one run")
    max_wall_seconds: float = _key(90.0, 1, 900, "no model call outlives it: a call still running then is abandoned")
    max_output_tokens: int = _key(2_048, 64, 32_000, "one model reply's cap (lower when less of max_tokens is left)")
    max_k: int = _key(10, 1, 50, "largest k a search tool call may ask for")
    tool_output_chars: int = _key(6_000, 500, 100_000, "what one tool result may put in front of the model")
    chunk_chars: int = _key(1_500, 200, 20_000, "one chunk's text in a tool result or context")
    context_chars: int = _key(20_000, 1_000, 200_000, "what the answer and judge calls may show: room for "
                              "max_context_chunks whole chunks and their tags")
    pipeline_rounds: int = _key(3, 1, 6, "search rounds of the pipeline strategy")
    # A conversation turn sees at most history_turns earlier turns, and no more of them than fit in
    # history_tokens (about 4 characters a token; the oldest go first; agents.conversations).
    history_turns: int = _key(6, 0, 50, "earlier turns a conversation turn sees, at most")
    history_tokens: int = _key(1_500, 0, 50_000, "tokens of earlier turns a conversation turn sees, at most")
    strict_citations: bool = _key(False, None, None, "withhold an answer that is not grounded")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


BUDGET_KEYS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Budgets)}


@dataclass(frozen=True)
class TenantSettings:
    """A tenant's settings as the code uses them, every key resolved (parse, read)."""

    budgets: Budgets
    daily_runs: int  # agent runs per UTC day; 0 (or less): unlimited
    evidence_retention_days: int
    answer_cache_ttl_seconds: int = 0  # agents.answer_cache: 0 (or less): no answer is reused


TOP_KEYS = {
    "budgets": "an object of budget keys (they win over the same keys at the top level)",
    "daily_runs": "agent runs per UTC day, 0 for unlimited (default: the DEFAULT_DAILY_RUNS environment setting)",
    "evidence_retention_days": "days a run's retrieved text is kept (default: EVIDENCE_RETENTION_DAYS)",
    "answer_cache_ttl_seconds": "seconds a run's answer is reused for the same question, 0 for off "
                                "(default: ANSWER_CACHE_TTL_SECONDS)",
    **{name: f.metadata["doc"] for name, f in BUDGET_KEYS.items()},
}


class TenantSettingsError(ValueError):
    """A tenant setting that cannot be stored; `key` names it (`budgets.max_k` for a nested one)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


class _Drop(Exception):
    """A stored value the reader cannot use: its default applies."""


class _Bad(Exception):
    """A value `parse` refuses; the message says why, the caller names the key."""


def parse(raw: object) -> TenantSettings:
    """`raw` validated for storing: TenantSettingsError naming the first bad key (module docstring)."""
    return _resolve(raw, strict=True)


def read(raw: object, **overrides: Any) -> TenantSettings:
    """Stored settings as the code uses them; never raises (module docstring). `overrides`: budget
    keys set by the caller (None: not set), clamped like stored ones."""
    return _resolve(raw, strict=False, overrides={k: v for k, v in overrides.items() if v is not None})


def for_tenant(tenant_id: int, **overrides: Any) -> TenantSettings:
    """Tenant `tenant_id`'s stored settings, read (`read`); the defaults for a tenant it cannot see."""
    return read(Tenant.objects.filter(pk=tenant_id).values_list("settings", flat=True).first(), **overrides)


def _resolve(raw: object, *, strict: bool, overrides: Mapping[str, Any] | None = None) -> TenantSettings:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        if strict:
            raise TenantSettingsError("settings", "must be a JSON object")
        raw = {}
    nested = raw.get("budgets", {})
    if not isinstance(nested, Mapping):
        if strict:
            raise TenantSettingsError("budgets", "must be a JSON object")
        nested = {}
    if strict:
        for name in raw:
            if name not in TOP_KEYS:
                raise TenantSettingsError(str(name), f"unknown key; known keys: {', '.join(sorted(TOP_KEYS))}")
        for name in nested:
            if name not in BUDGET_KEYS:
                raise TenantSettingsError(f"budgets.{name}", f"unknown budget key; known: {', '.join(BUDGET_KEYS)}")
    budget_values: dict[str, Any] = {}
    for source, prefix in ((raw, ""), (nested, "budgets."), (overrides or {}, "")):
        for name, value in source.items():
            if name not in BUDGET_KEYS:
                continue
            try:
                budget_values[name] = _budget_value(BUDGET_KEYS[name], value, strict)
            except _Drop:
                budget_values.pop(name, None)
            except _Bad as exc:
                raise TenantSettingsError(prefix + name, str(exc)) from None
    return TenantSettings(
        budgets=Budgets(**budget_values),
        daily_runs=_top_value(raw, "daily_runs", _daily_runs, int(product_settings.DEFAULT_DAILY_RUNS), strict),
        evidence_retention_days=_top_value(raw, "evidence_retention_days", _retention_days,
                                           int(product_settings.EVIDENCE_RETENTION_DAYS), strict),
        answer_cache_ttl_seconds=_top_value(raw, "answer_cache_ttl_seconds", _seconds, int(product_settings.ANSWER_CACHE_TTL_SECONDS),
                                            strict),
    )


def _top_value(raw: Mapping, name: str, convert, default: int, strict: bool) -> int:
    if name not in raw:
        return default
    try:
        return convert(raw[name], strict)
    except _Drop:
        return default
    except _Bad as exc:
        raise TenantSettingsError(name, str(exc)) from None


def _budget_value(f: dataclasses.Field, value: Any, strict: bool) -> Any:
    """A budget key's value: a bool for a flag, else a number clamped to its range (strict: refused outside it).
    _Bad when strict, _Drop for the reader."""
    if f.type in ("bool", bool):
        if strict and not isinstance(value, bool):
            raise _Bad("must be true or false")
        return bool(value)
    lo, hi = f.metadata["range"]
    whole = f.type not in ("float", float)
    kind = "a whole number" if whole else "a number"
    if strict and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _Bad(f"must be {kind} from {lo:g} to {hi:g}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _Drop from None
    if math.isnan(number):
        if strict:
            raise _Bad(f"must be {kind} from {lo:g} to {hi:g}")
        raise _Drop
    if strict and (not lo <= number <= hi or (whole and not number.is_integer())):
        raise _Bad(f"must be {kind} from {lo:g} to {hi:g}")
    number = min(max(number, lo), hi)
    return int(number) if whole else number


def _daily_runs(value: Any, strict: bool) -> int:
    if strict:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _Bad("must be a whole number, 0 for unlimited")
        return value
    try:
        return int(value or 0)  # null, 0, "": unlimited, as it always read
    except (TypeError, ValueError, OverflowError):
        raise _Drop from None


def _retention_days(value: Any, strict: bool) -> int:
    if isinstance(value, int) and value >= 0 and not (strict and isinstance(value, bool)):
        return int(value)  # true reads as 1, as it always did
    if strict:
        raise _Bad("must be a whole number of days, 0 or more")
    raise _Drop


def _seconds(value: Any, strict: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if strict:
        raise _Bad("must be a whole number of seconds, 0 or more (0: off)")
    raise _Drop
