"""Reads about sources for other screens: which sync produced a document's current version."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from kb.models import Document

PRODUCED = ("added", "changed")  # a move keeps the version it moves


def document_origins(changes: QuerySet, documents: Iterable[Document]) -> dict[int, dict]:
    """document id -> {source, sync, version, action, at} for documents whose current version a sync
    produced. `changes` is the caller's visible SourceChange rows (kb.access / the admin's scope)."""
    docs = {d.pk: d for d in documents if d is not None}
    if not docs:
        return {}
    out: dict[int, dict] = {}
    rows = (changes.filter(document_id__in=list(docs), action__in=PRODUCED).select_related("sync__source")
            .order_by("document_id", "-id"))
    for change in rows:
        doc = docs[change.document_id]
        if change.document_id in out or change.document_version != doc.version:
            continue
        out[change.document_id] = {"source": change.sync.source.name, "sync": change.sync_id, "version": doc.version,
                                   "action": change.action, "at": change.created_at, "key": change.key}
    return out
