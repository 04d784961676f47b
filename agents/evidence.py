"""Evidence retention: the text every run retrieved, kept for audit while the tenant's retention runs.

A document re-uploaded with changes gets new chunks (its version goes up) and a deleted document's
chunks go; a run's citations must stay fully viewable all the same. So a run is stored with the
chunks it retrieved as `Evidence` (text, document id and version, title, locator, department), once
per (chunk, content) per tenant. Evidence is append-only for the application role and is removed
only by `purge`, which keeps whatever a run created within the retention period references.

Retention: `Tenant.settings["evidence_retention_days"]`, else settings.EVIDENCE_RETENTION_DAYS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections
from django.utils import timezone

from agents.citations import RetrievedChunk
from agents.models import Evidence
from kb.models import Document
from tenants.models import Tenant
from tenants.scope import Scope


def keep(scope: Scope, chunks: Iterable[RetrievedChunk], seen_at: datetime) -> None:
    """Store the retrieved `chunks` as evidence (already kept ones are left as they are). Inside activate(scope),
    in the transaction that stores the run."""
    chunks = list(chunks)
    if not chunks:
        return
    documents = {d["id"]: d for d in Document.objects.for_scope(scope).filter(id__in={c.document_id for c in chunks})
                 .values("id", "version", "department_id")}
    rows = [Evidence(tenant_id=scope.tenant_id, department_id=documents[c.document_id]["department_id"], chunk_id=c.chunk_id,
                     content_hash=c.content_hash, document_id=c.document_id, document_version=documents[c.document_id]["version"],
                     document_title=c.title[:500], locator=c.locator[:1000], text=c.text.replace("\x00", ""), first_seen_at=seen_at)
            for c in chunks if c.document_id in documents]
    Evidence.objects.bulk_create(rows, ignore_conflicts=True)


@dataclass(frozen=True)
class CitedEvidence:
    """A citation's evidence as an auditor reads it: the text as retrieved, the version it came from, and
    whether the document has changed since (a newer version, or deleted)."""

    text: str
    document_id: int
    document_version: int
    document_title: str
    locator: str
    document_now: str  # "unchanged" | "changed (now version N)" | "deleted"

    @property
    def changed_since(self) -> bool:
        return self.document_now != "unchanged"

    def as_dict(self) -> dict:
        return {"text": self.text, "document_id": self.document_id, "document_version": self.document_version,
                "document_title": self.document_title, "locator": self.locator, "document_now": self.document_now,
                "changed_since": self.changed_since}


def for_citations(scope: Scope, pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], CitedEvidence]:
    """Evidence visible to `scope` for (chunk id, content hash) pairs, with what became of each document. Inside activate(scope)."""
    pairs = {(int(c), h) for c, h in pairs if h}
    if not pairs:
        return {}
    rows = Evidence.objects.for_scope(scope).filter(chunk_id__in={c for c, _ in pairs})
    found = [e for e in rows if (e.chunk_id, e.content_hash) in pairs]
    now = dict(Document.objects.for_scope(scope).filter(id__in={e.document_id for e in found}).values_list("id", "version"))
    out = {}
    for e in found:
        version = now.get(e.document_id)
        state = "deleted" if version is None else "unchanged" if version == e.document_version else f"changed (now version {version})"
        out[(e.chunk_id, e.content_hash)] = CitedEvidence(e.text, e.document_id, e.document_version, e.document_title, e.locator, state)
    return out


def retention_days(tenant: Tenant) -> int:
    value = (tenant.settings or {}).get("evidence_retention_days")
    return int(value) if isinstance(value, int) and value >= 0 else settings.EVIDENCE_RETENTION_DAYS


@dataclass(frozen=True)
class PurgeResult:
    removed: int
    kept: int  # rows asked for that a run within retention references
    retention_days: int


def purge(tenant: Tenant, *, document_id: int | None = None, now: datetime | None = None, using: str = "owner") -> PurgeResult:
    """Remove the tenant's evidence (or one document's) that no run created within retention retrieved or
    cited; keep and count the rest. Runs as the owner (the application role may not delete evidence)."""
    days = retention_days(tenant)
    since = (now or timezone.now()) - timedelta(days=days)
    referenced = """EXISTS (SELECT 1 FROM agents_runstep s JOIN agents_run r ON r.id = s.run_id
                            WHERE r.tenant_id = e.tenant_id AND r.created_at >= %(since)s AND s.content_hashes ? e.content_hash
                              AND s.chunk_ids @> to_jsonb(e.chunk_id))
                    OR EXISTS (SELECT 1 FROM agents_citation c JOIN agents_run r ON r.id = c.run_id
                               WHERE r.tenant_id = e.tenant_id AND r.created_at >= %(since)s
                                 AND c.chunk_id = e.chunk_id AND c.content_hash = e.content_hash)"""
    where = "e.tenant_id = %(tenant)s" + (" AND e.document_id = %(document)s" if document_id is not None else "")
    params = {"tenant": tenant.id, "document": document_id, "since": since}
    with connections[using].cursor() as cur:
        cur.execute(f"DELETE FROM agents_evidence e WHERE {where} AND NOT ({referenced})", params)  # noqa: S608  (where: fixed predicates; values are parameters)
        removed = cur.rowcount
        cur.execute(f"SELECT count(*) FROM agents_evidence e WHERE {where}", params)  # noqa: S608  (as above)
        kept = cur.fetchone()[0]
    return PurgeResult(removed, kept, days)
