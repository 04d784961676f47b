"""Read-only queries the agent tools need besides search. Every function takes the caller's scope
and must run inside `activate(scope)`; an id outside the scope behaves exactly like a missing one."""

from __future__ import annotations

from django.db.models import CharField, Count, F, Func, Max, Min, Q
from django.db.models.fields.json import KT

from agents.access import visible_citations, visible_run_steps
from kb.access import visible_chunks, visible_corpora, visible_documents
from kb.models import DocumentStatus
from tenants.scope import Scope

CHUNK_FIELDS = ("id", "document_id", "corpus_id", "corpus__name", "document__title", "document__metadata", "locator",
                "page", "ordinal", "text", "content_hash", "flags")


def chunks_around(scope: Scope, chunk_id: int, neighbours: int) -> list[dict]:
    """The chunk and up to `neighbours` chunks either side in its document, in order; [] if not visible."""
    anchor = visible_chunks(scope).filter(pk=chunk_id).values("document_id", "ordinal").first()
    if anchor is None:
        return []
    lo, hi = anchor["ordinal"] - neighbours, anchor["ordinal"] + neighbours
    rows = (visible_chunks(scope).filter(document_id=anchor["document_id"], ordinal__gte=lo, ordinal__lte=hi)
            .order_by("ordinal").values(*CHUNK_FIELDS))
    return list(rows)


def document_section(scope: Scope, document_id: int, section: str, limit: int) -> list[dict]:
    """Chunks of a visible document whose locator contains `section` (all chunks if empty), in order."""
    qs = visible_chunks(scope).filter(document_id=document_id)
    if section:
        qs = qs.filter(locator__icontains=section)
    return list(qs.order_by("ordinal").values(*CHUNK_FIELDS)[:limit])


def corpus_overview(scope: Scope) -> list[dict]:
    """The corpora `scope` sees (kb.access), with their ready document counts, by name."""
    rows = (visible_corpora(scope)
            .annotate(ready_documents=Count("documents", filter=Q(documents__status=DocumentStatus.READY)))
            .order_by("name").values("id", "name", "description", "department_id", "ready_documents"))
    return list(rows)


FACET_KEYS = ("source", "category")


def metadata_facets(scope: Scope, corpus_ids: list[int] | None = None, max_values: int = 50) -> dict:
    """Metadata values present in the scope: sources, categories (document counts), published date range.

    Aggregated in PostgreSQL (GROUP BY over jsonb), so the cost does not grow with Python work per document."""
    qs = visible_documents(scope).filter(status=DocumentStatus.READY)
    if corpus_ids:
        qs = qs.filter(corpus_id__in=corpus_ids)
    out: dict = {}
    for key, label in (("source", "sources"), ("category", "categories")):
        rows = (qs.annotate(v=KT(f"metadata__{key}")).exclude(v__isnull=True).values("v").annotate(n=Count("id"))
                .order_by("-n", "v")[:max_values])
        out[label] = {r["v"]: r["n"] for r in rows}
    dates = qs.annotate(p=KT("metadata__published_at")).exclude(p__isnull=True).aggregate(earliest=Min("p"), latest=Max("p"))
    out["published_at"] = dates if dates["earliest"] else None
    keys = (qs.annotate(k=Func(F("metadata"), function="jsonb_object_keys", output_field=CharField()))
            .values_list("k", flat=True).distinct().order_by("k")[: max_values + 3])
    out["other_metadata_keys"] = [k for k in keys if k not in (*FACET_KEYS, "published_at")][:max_values]
    return out


# --- Run traces (audit views) --------------------------------------------------------------------

def run_steps(scope: Scope, run_id: int) -> list:
    """A run's steps in order ([] for a run the scope may not audit: agents.access). Inside activate(scope)."""
    return list(visible_run_steps(scope).filter(run_id=run_id).order_by("ordinal"))


def run_citations(scope: Scope, run_id: int) -> list:
    """A run's citations with verdicts, in answer order ([] for a run the scope may not audit). Inside activate(scope)."""
    return list(visible_citations(scope).filter(run_id=run_id).order_by("ordinal"))
