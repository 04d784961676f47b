"""The per-tenant hash chain over finished runs, and its verification.

hash(run) = sha256(canonical JSON of {run row without `hash`, its step rows, its citation rows}),
where the run row includes `prev_hash` (the previous run's hash in the same tenant, "0"*64 for the
first) and `seq`. Every concrete column takes part, so changing one byte of any run, step or
citation row breaks that run's hash, and rewriting a hash breaks the next run's `prev_hash`.
Appends are serialised per tenant with a transaction-level advisory lock.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connections, models

from agents.models import Citation, Run, RunStep
from tenants.conf import product_settings

GENESIS = "0" * 64
CHAIN_LOCK_CLASS = 0x6167  # first key of pg_advisory_xact_lock(int4, int4); the second is the tenant id
TRACE_TABLES = ("agents_run", "agents_runstep", "agents_citation", "agents_feedback")  # append-only for the app role


def clean_json(value: Any) -> Any:
    """Make a value store and load back identically through jsonb (so hashes survive the round trip).

    Integral floats become ints (jsonb prints 1e16 as 10000000000000000), NUL characters are
    dropped (PostgreSQL rejects them), non-finite floats become strings, tuples become lists.
    """
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [clean_json(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    return str(value)


def _plain(value):
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


# Columns added after runs were first chained: hashed only when they hold something, so the runs
# written before them keep their hashes. "Nothing" is NULL or an empty text or JSON value, never 0:
# a link changed from NULL to 0 must break the hash like any other change.
# "conversation_id", "turn", "message": a run's conversation turn; "cached_from_*": a run served from the answer cache.
LATER_COLUMNS = frozenset({"model_input", "conversation_id", "turn", "message", "cached_from_run_id", "cached_from_hash"})


def _empty(value) -> bool:
    return value is None or (isinstance(value, str | dict | list) and not value)


def canonical_row(instance: models.Model) -> dict:
    return {f.attname: _plain(getattr(instance, f.attname)) for f in instance._meta.concrete_fields
            if f.attname != "hash" and not (f.attname in LATER_COLUMNS and _empty(getattr(instance, f.attname)))}


def run_hash(run: Run, steps: Iterable[RunStep], citations: Iterable[Citation]) -> str:
    body = {
        "run": canonical_row(run),
        "steps": [canonical_row(s) for s in sorted(steps, key=lambda s: (s.ordinal, s.pk or 0))],
        "citations": [canonical_row(c) for c in sorted(citations, key=lambda c: (c.ordinal, c.pk or 0))],
    }
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def lock_chain(tenant_id: int, using: str = "default") -> None:
    """Serialise chain appends for one tenant until the surrounding transaction ends."""
    with connections[using].cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CHAIN_LOCK_CLASS, int(tenant_id)])


def allocate_ids(model: type[models.Model], n: int, using: str = "default") -> list[int]:
    """Primary keys taken from the table's sequence up front, so they can be part of the hash."""
    if n <= 0:
        return []
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT nextval(pg_get_serial_sequence('{model._meta.db_table}', 'id')) FROM generate_series(1, %s)", [n])  # noqa: S608  (the table name comes from the model's metadata)
        return [r[0] for r in cur.fetchall()]


@dataclass(frozen=True)
class ChainBreak:
    tenant_id: int
    run_id: int
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"tenant {self.tenant_id}: run {self.run_id} (seq {self.seq}): {self.reason}"


@dataclass(frozen=True)
class ChainReport:
    tenant_id: int
    runs_checked: int
    first_break: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.first_break is None


def verify_tenant_chain(tenant_id: int, *, using: str = "owner", batch: int = 500) -> ChainReport:
    """Recompute every run's hash in chain order; name the first run whose link is broken.

    Runs as the owner by default (a maintenance read across RLS); with using="default" it must be
    called inside `activate(scope)` for that tenant.
    """
    expected_prev, expected_seq, checked = GENESIS, 1, 0
    runs = Run.objects.unscoped_dangerously(using).filter(tenant_id=tenant_id).order_by("seq")
    last_seq = -1
    while True:
        page = list(runs.filter(seq__gt=last_seq)[:batch])
        if not page:
            break
        last_seq = page[-1].seq
        ids = [r.id for r in page]
        steps, cites = defaultdict(list), defaultdict(list)
        for s in RunStep.objects.unscoped_dangerously(using).filter(tenant_id=tenant_id, run_id__in=ids):
            steps[s.run_id].append(s)
        for c in Citation.objects.unscoped_dangerously(using).filter(tenant_id=tenant_id, run_id__in=ids):
            cites[c.run_id].append(c)
        for run in page:
            reason = None
            if run.seq != expected_seq:
                reason = f"sequence gap: expected seq {expected_seq}, found {run.seq} (a run was removed or inserted)"
            elif run.prev_hash != expected_prev:
                reason = "prev_hash does not match the previous run's hash (a run before it was rewritten or removed)"
            elif run_hash(run, steps[run.id], cites[run.id]) != run.hash:
                reason = "hash mismatch: the run, one of its steps or one of its citations was changed"
            if reason:
                return ChainReport(tenant_id, checked + 1, ChainBreak(tenant_id, run.id, run.seq, reason))
            checked += 1
            expected_prev, expected_seq = run.hash, run.seq + 1
        if len(page) < batch:
            break
    return ChainReport(tenant_id, checked, None)


def revoke_changes_on_trace_tables(using: str) -> None:
    """APPEND_ONLY_HOOKS entry: the app role may INSERT and SELECT trace and evidence rows, nothing more."""
    role = product_settings.DATABASE_APP_USER
    with connections[using].cursor() as cur:
        for table in (*TRACE_TABLES, "agents_evidence"):
            cur.execute(f'REVOKE UPDATE, DELETE, TRUNCATE ON "{table}" FROM "{role}"')
