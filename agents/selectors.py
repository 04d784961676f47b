"""Read-only queries the agent tools need besides search. Every function takes the caller's scope
and must run inside `activate(scope)`; an id outside the scope behaves exactly like a missing one."""

from __future__ import annotations

from django.db.models import Count, Q

from agents.access import visible_citations, visible_run_steps
from agents.lexical import key_words, sentences, terms
from kb.access import visible_chunks, visible_corpora, visible_documents
from kb.metadata import scope_facets
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


def document_section(scope: Scope, document_id: int, section: str, limit: int, page: int | None = None) -> list[dict]:
    """Chunks of a visible document whose locator contains `section` and that lie on `page` (all
    chunks if neither is given), in order."""
    qs = visible_chunks(scope).filter(document_id=document_id)
    if section:
        qs = qs.filter(locator__icontains=section)
    if page is not None:
        qs = qs.filter(page=page)
    return list(qs.order_by("ordinal").values(*CHUNK_FIELDS)[:limit])


def corpus_overview(scope: Scope) -> list[dict]:
    """The corpora `scope` sees (kb.access), with their ready document counts, by name."""
    rows = (visible_corpora(scope)
            .annotate(ready_documents=Count("documents", filter=Q(documents__status=DocumentStatus.READY)))
            .order_by("name").values("id", "name", "description", "department_id", "ready_documents"))
    return list(rows)


def metadata_facets(scope: Scope, corpus_ids: list[int] | None = None, max_values: int = 50) -> dict:
    """What the scope's ready documents can be narrowed by (kb.metadata.scope_facets):

        {"enumerations": {key: {value: document count}}, "dates": {"key", "earliest", "latest"} | None,
         "other_keys": [...]}

    Enumerations are the corpora's declared facet keys plus keys discovered from the data; a value
    narrows a search as SearchFilters(metadata={key: value}), the date range as date_after/date_before.
    Aggregated in PostgreSQL, so the cost does not grow with Python work per document."""
    return scope_facets(scope, corpus_ids, max_values)


# --- Run traces (audit views) --------------------------------------------------------------------

def run_steps(scope: Scope, run_id: int) -> list:
    """A run's steps in order ([] for a run the scope may not audit: agents.access). Inside activate(scope)."""
    return list(visible_run_steps(scope).filter(run_id=run_id).order_by("ordinal"))


def run_citations(scope: Scope, run_id: int) -> list:
    """A run's citations with verdicts, in answer order ([] for a run the scope may not audit). Inside activate(scope)."""
    return list(visible_citations(scope).filter(run_id=run_id).order_by("ordinal"))


STARTER_SCAN = 200  # the newest ready documents looked at for starter questions


def starter_questions(scope: Scope, limit: int = 4) -> list[str]:
    """Questions to start a conversation with, from the newest ready documents `scope` sees: "What does
    <title> say about <topic>?", the topic the first content word of the document's first sentence that
    its title does not hold (a question about a title alone finds no sentence that answers it). One
    document per corpus first (so each corpus is represented), then more; a title at most once; a
    document with no such word gives none. Only what the caller could ask about anyway, so nothing of
    another department shows. Inside activate(scope)."""
    rows = list(visible_documents(scope).filter(status=DocumentStatus.READY).exclude(title="")
                .order_by("-created_at", "-id").values_list("id", "corpus_id", "title")[:STARTER_SCAN])
    firsts: dict[int, int] = {}
    for doc_id, corpus_id, _title in rows:
        firsts.setdefault(corpus_id, doc_id)
    ordered = list(dict.fromkeys([*firsts.values(), *(doc_id for doc_id, _, _ in rows)]))
    titles = {doc_id: " ".join(title.split())[:120] for doc_id, _, title in rows}
    opening = dict(visible_chunks(scope).filter(document_id__in=ordered[: limit * 3], ordinal=0).values_list("document_id", "text"))
    questions: dict[str, str] = {}  # title -> question
    for doc_id in ordered[: limit * 3]:
        title = titles[doc_id]
        own = terms(title)
        words = [w for s in sentences(opening.get(doc_id, "")) for w in key_words(s) if not w.isdigit() and not terms(w) <= own]
        if words and title not in questions:
            questions[title] = f"What does {title} say about {words[0]}?"
    return list(questions.values())[:limit]
