"""Per-run budgets: defaults here, per-tenant overrides in Tenant.settings.

Tenant.settings may hold the keys directly or under "budgets", e.g.
{"budgets": {"max_tool_calls": 6}, "strict_citations": true}. Unknown keys are ignored;
values are clamped to sane ranges so a bad setting cannot disable a limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tenants.models import Tenant


@dataclass(frozen=True)
class Budgets:
    max_tool_calls: int = 12
    max_iterations: int = 6  # model turns in the agentic loop; search rounds in the pipeline
    max_context_chunks: int = 10  # chunks in the final context of classic/pipeline answers
    max_tokens: int = 60_000  # input + output tokens over all model calls of one run
    max_wall_seconds: float = 90.0  # no model call outlives it: a call still running then is abandoned
    max_output_tokens: int = 2_048  # one model reply's cap (lower when less of max_tokens is left)
    max_k: int = 10  # largest k a search tool call may ask for
    tool_output_chars: int = 6_000  # what one tool result may put in front of the model
    chunk_chars: int = 1_500  # one chunk's text in a tool result or context
    # What the answer and judge calls may show: room for max_context_chunks whole chunks and their tags.
    context_chars: int = 20_000
    pipeline_rounds: int = 3
    # A conversation turn sees at most this many earlier turns, and no more of them than fit in
    # history_tokens (about 4 characters a token; the oldest go first; agents.conversations).
    history_turns: int = 6
    history_tokens: int = 1_500
    strict_citations: bool = False

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_LIMITS: dict[str, tuple[float, float]] = {
    "max_tool_calls": (0, 100), "max_iterations": (1, 30), "max_context_chunks": (1, 50), "max_tokens": (1_000, 2_000_000),
    "max_wall_seconds": (1, 900), "max_k": (1, 50), "tool_output_chars": (500, 100_000), "chunk_chars": (200, 20_000),
    "context_chars": (1_000, 200_000),
    "pipeline_rounds": (1, 6), "max_output_tokens": (64, 32_000), "history_turns": (0, 50), "history_tokens": (0, 50_000),
}


def budgets_from_settings(tenant_settings: dict | None, **overrides: Any) -> Budgets:
    raw = dict(tenant_settings or {})
    raw.update(raw.pop("budgets", {}) if isinstance(raw.get("budgets"), dict) else {})
    raw.update({k: v for k, v in overrides.items() if v is not None})
    values: dict = {}
    for f in dataclasses.fields(Budgets):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if f.name == "strict_citations":
            values[f.name] = bool(value)
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        lo, hi = _LIMITS[f.name]
        number = min(max(number, lo), hi)
        values[f.name] = number if f.type in ("float", float) else int(number)
    return Budgets(**values)


def budgets_for_tenant(tenant_id: int, **overrides: Any) -> Budgets:
    tenant_settings = Tenant.objects.filter(pk=tenant_id).values_list("settings", flat=True).first()
    return budgets_from_settings(tenant_settings, **overrides)
