"""Reads about sources for other screens: which sync produced a document version."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from tenants.access import visible_departments
from tenants.models import Department
from tenants.scope import Scope

PRODUCED = ("added", "changed")  # a move keeps the version it moves

# The signs of a sync summary ("+3 ~1 ↔0 -0 !0"), each the SourceSync count it shows (kb.sources.sync counts them).
SYNC_SIGNS = (
    ("+", "added", "new items ingested"),
    ("~", "changed", "changed items re-ingested"),
    ("↔", "moved", "items moved to another department or key, their chunks kept"),
    ("-", "removed", "items gone upstream, their documents deleted"),
    ("!", "failed", "items that could not be read or parsed (a previous version stays searchable)"),
)
SYNC_LEGEND = "; ".join(f"{sign} {name}: {meaning}" for sign, name, meaning in SYNC_SIGNS) + \
    "; unchanged items are not fetched again"


def grantable_departments(scope: Scope) -> list[Department]:
    """The departments a source's mapping rules may name for `scope`, by name: of its tenant, visible to it
    and ones it may place documents in (kb.access.check_may_manage_source makes the final check)."""
    return [d for d in visible_departments(scope).order_by("name") if scope.may_change_department(d.pk)]


def version_origins(changes: QuerySet, versions: Iterable[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """(document id, version) -> {source, sync, action, at, key} for the versions a sync produced.
    `changes` is the caller's visible SourceChange rows (kb.access, or the admin's scoped queryset)."""
    wanted = {(int(d), int(v)) for d, v in versions if d is not None and v is not None}
    if not wanted:
        return {}
    rows = (changes.filter(document_id__in={d for d, _ in wanted}, action__in=PRODUCED).select_related("sync__source")
            .order_by("-id"))
    out: dict[tuple[int, int], dict] = {}
    for change in rows:
        pair = (change.document_id, change.document_version)
        if pair in wanted and pair not in out:
            out[pair] = {"source": change.sync.source.name, "sync": change.sync_id, "action": change.action,
                         "at": change.created_at, "key": change.key}
    return out
