"""Read-only queries the agent tools need besides search. Every function takes the caller's scope
and must run inside `activate(scope)`; an id outside the scope behaves exactly like a missing one."""

from __future__ import annotations

import json

from django.db.models import CharField, Count, F, Func, Max, Min, Q
from django.db.models.fields.json import KT

from kb.models import Chunk, Corpus, Document, DocumentStatus
from tenants.scope import Scope

CHUNK_FIELDS = ("id", "document_id", "corpus_id", "corpus__name", "document__title", "document__metadata", "locator",
                "page", "ordinal", "text", "content_hash", "flags")


def chunks_around(scope: Scope, chunk_id: int, neighbours: int) -> list[dict]:
    """The chunk and up to `neighbours` chunks either side in its document, in order; [] if not visible."""
    anchor = Chunk.objects.for_scope(scope).filter(pk=chunk_id).values("document_id", "ordinal").first()
    if anchor is None:
        return []
    lo, hi = anchor["ordinal"] - neighbours, anchor["ordinal"] + neighbours
    rows = (Chunk.objects.for_scope(scope).filter(document_id=anchor["document_id"], ordinal__gte=lo, ordinal__lte=hi)
            .order_by("ordinal").values(*CHUNK_FIELDS))
    return list(rows)


def document_section(scope: Scope, document_id: int, section: str, limit: int) -> list[dict]:
    """Chunks of a visible document whose locator contains `section` (all chunks if empty), in order."""
    qs = Chunk.objects.for_scope(scope).filter(document_id=document_id)
    if section:
        qs = qs.filter(locator__icontains=section)
    return list(qs.order_by("ordinal").values(*CHUNK_FIELDS)[:limit])


def visible_corpora(scope: Scope) -> list[dict]:
    rows = (Corpus.objects.for_scope(scope)
            .annotate(ready_documents=Count("documents", filter=Q(documents__status=DocumentStatus.READY)))
            .order_by("name").values("id", "name", "description", "department_id", "ready_documents"))
    return list(rows)


FACET_KEYS = ("source", "category")


def metadata_facets(scope: Scope, corpus_ids: list[int] | None = None, max_values: int = 50) -> dict:
    """Metadata values present in the scope: sources, categories (document counts), published date range.

    Aggregated in PostgreSQL (GROUP BY over jsonb), so the cost does not grow with Python work per document."""
    qs = Document.objects.for_scope(scope).filter(status=DocumentStatus.READY)
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

def runs_for(scope: Scope):
    """The runs `scope` may audit, newest first. Inside activate(scope).

    A department-restricted caller sees only runs that were themselves confined to departments it
    can see (a whole-tenant run may have read any department)."""
    from agents.models import Run

    qs = Run.objects.for_scope(scope)
    if not scope.all_departments:
        qs = qs.filter(scope__all_departments=False).extra(
            where=["(agents_run.scope -> 'department_ids') <@ %s::jsonb"], params=[json.dumps(sorted(scope.department_ids))])
    return qs.order_by("-seq")


def _visible(scope: Scope, run_id: int) -> bool:
    return scope.all_departments or runs_for(scope).filter(pk=run_id).exists()


def run_steps(scope: Scope, run_id: int) -> list:
    """A run's steps in order ([] for a run the scope may not audit). Inside activate(scope)."""
    from agents.models import RunStep

    if not _visible(scope, run_id):
        return []
    return list(RunStep.objects.for_scope(scope).filter(run_id=run_id).order_by("ordinal"))


def run_citations(scope: Scope, run_id: int) -> list:
    """A run's citations with verdicts, in answer order ([] for a run the scope may not audit). Inside activate(scope)."""
    from agents.models import Citation

    if not _visible(scope, run_id):
        return []
    return list(Citation.objects.for_scope(scope).filter(run_id=run_id).order_by("ordinal"))
