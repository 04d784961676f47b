"""Reads about sources for other screens: which sync produced a document version."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

PRODUCED = ("added", "changed")  # a move keeps the version it moves


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
