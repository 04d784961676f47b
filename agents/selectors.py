"""Read-only queries the agent tools need besides search. Every function takes the caller's scope
and must run inside `activate(scope)`; an id outside the scope behaves exactly like a missing one."""

from __future__ import annotations

from django.db.models import Count, Q

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
    """Metadata values present in the scope: sources, categories (with counts), published date range."""
    qs = Document.objects.for_scope(scope).filter(status=DocumentStatus.READY)
    if corpus_ids:
        qs = qs.filter(corpus_id__in=corpus_ids)
    counts: dict[str, dict[str, int]] = {k: {} for k in FACET_KEYS}
    dates: list[str] = []
    other_keys: set[str] = set()
    for meta in qs.values_list("metadata", flat=True).iterator(chunk_size=1000):
        if not isinstance(meta, dict):
            continue
        for key in FACET_KEYS:
            value = meta.get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                counts[key][str(value)] = counts[key].get(str(value), 0) + 1
        if isinstance(meta.get("published_at"), str):
            dates.append(meta["published_at"])
        other_keys.update(k for k in meta if k not in FACET_KEYS and k != "published_at")
    return {
        **{f"{k}s" if not k.endswith("y") else f"{k[:-1]}ies": dict(sorted(v.items(), key=lambda kv: -kv[1])[:max_values])
           for k, v in counts.items()},
        "published_at": {"earliest": min(dates), "latest": max(dates)} if dates else None,
        "other_metadata_keys": sorted(other_keys)[:max_values],
    }


# --- Run traces (audit views) --------------------------------------------------------------------

def runs_for(scope: Scope):
    """The tenant's runs, newest first. Inside activate(scope)."""
    from agents.models import Run

    return Run.objects.for_scope(scope).order_by("-seq")


def run_steps(scope: Scope, run_id: int) -> list:
    """A run's steps in order (empty for another tenant's run). Inside activate(scope)."""
    from agents.models import RunStep

    return list(RunStep.objects.for_scope(scope).filter(run_id=run_id).order_by("ordinal"))


def run_citations(scope: Scope, run_id: int) -> list:
    """A run's citations with verdicts, in answer order. Inside activate(scope)."""
    from agents.models import Citation

    return list(Citation.objects.for_scope(scope).filter(run_id=run_id).order_by("ordinal"))
