"""Document summaries and page groups: what the `summarise_document` and `search_pages` tools show.

Every chunk read here comes from kb.retrieval.search under the caller's scope (a document id the
scope does not see yields no hits, exactly like one that does not exist); the document row (its
title, version and hash) through kb.access.visible_documents. Nothing here widens a scope.

A summary is extractive and built in code, the same for every provider: the document's most
central sentences (TF-IDF cosine centrality: a sentence shares the words of many others), at most
one per section first so the summary spans the document, in document order, each with the chunk
it is a slice of, so an answer quoting it with [c:<id>] is checked by agents.citations. Chunks
flagged at ingest as holding instructions to a model, and sentences that read like such, are
never picked.

The summary is cached per document version in the Django cache under the tenant id, the document
id, its content hash and version, and the algorithm's version (`SUMMARY_VERSION`): a re-uploaded
document misses. A cached summary is used only after its document was found through the caller's
scope and every cited chunk was returned by a scoped search again with the sentence still in it;
anything else (a cache that is down included) rebuilds it.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.cache import cache

from agents.lexical import looks_like_instructions, ordered_terms, sentences
from kb import retrieval
from kb.access import visible_documents
from kb.models import DocumentStatus
from tenants.scope import Scope, activate

log = logging.getLogger(__name__)

SUMMARY_VERSION = 1
SUMMARY_TTL_SECONDS = 30 * 24 * 3600
MAX_SUMMARY_SENTENCES = 8
MIN_SUMMARY_SENTENCES = 3
MIN_SENTENCE_TERMS = 4  # shorter lines (headings, "Owner: Finance.") say too little to summarise with
REDUNDANT = 0.5  # a sentence this similar (cosine) to one already picked adds nothing
PAGE_RRF_K = 10.0  # a page's score: the sum of 1 / (PAGE_RRF_K + rank) over its hits


@dataclass(frozen=True, slots=True)
class SummarySentence:
    chunk_id: int
    text: str
    locator: str


@dataclass(frozen=True)
class DocumentSummary:
    document_id: int
    title: str
    sentences: tuple[SummarySentence, ...]
    hits: tuple[retrieval.SearchHit, ...]  # the chunks cited, as the scoped search returned them
    cached: bool = False


@dataclass(frozen=True)
class PageGroup:
    """The hits of one page (PDF) or one section (heading path) of one document, best first."""

    document_id: int
    title: str
    locator: str
    page: int | None
    score: float
    hits: tuple[retrieval.SearchHit, ...]


# --- Pages --------------------------------------------------------------------------------------

def group_pages(hits: Sequence[retrieval.SearchHit]) -> list[PageGroup]:
    """Hits grouped by (document, page or else section locator), ranked by the sum of their
    reciprocal ranks: a page several good hits fall on ranks above one with a single hit of the same rank."""
    groups: dict[tuple, list[tuple[int, retrieval.SearchHit]]] = {}
    for rank, hit in enumerate(hits, start=1):
        key = (hit.document_id, hit.page) if hit.page is not None else (hit.document_id, hit.locator)
        groups.setdefault(key, []).append((rank, hit))
    out = [PageGroup(members[0][1].document_id, members[0][1].document_title, members[0][1].locator, members[0][1].page,
                     sum(1.0 / (PAGE_RRF_K + rank) for rank, _ in members), tuple(h for _, h in members))
           for members in groups.values()]
    return sorted(out, key=lambda g: -g.score)


# --- Summaries ----------------------------------------------------------------------------------

def central_sentences(hits: Sequence[retrieval.SearchHit], limit: int | None = None) -> list[SummarySentence]:
    """The document's summary sentences (module docstring), in document order. `hits`: its chunks."""
    candidates: list[tuple[int, int, SummarySentence, list[str]]] = []  # (ordinal, position, sentence, terms)
    for hit in hits:
        if hit.flags:
            continue
        for pos, text in enumerate(sentences(hit.text)):
            words = ordered_terms(text)
            if len(words) >= MIN_SENTENCE_TERMS and not looks_like_instructions(text):
                candidates.append((hit.ordinal, pos, SummarySentence(hit.chunk_id, " ".join(text.split()), hit.locator), words))
    if not candidates:
        return []
    vectors = _tfidf([words for *_, words in candidates])
    centrality = [sum(_cosine(v, w) for j, w in enumerate(vectors) if j != i) for i, v in enumerate(vectors)]
    n = limit or min(MAX_SUMMARY_SENTENCES, max(MIN_SUMMARY_SENTENCES, round(math.sqrt(len(candidates)))))
    order = sorted(range(len(candidates)), key=lambda i: -centrality[i])
    picked: list[int] = []
    sections: set[str] = set()
    for one_per_section in (True, False):  # first the best sentence of as many sections as fit, then the rest
        for i in order:
            if len(picked) >= n:
                break
            locator = candidates[i][2].locator
            if i in picked or (one_per_section and locator in sections):
                continue
            if any(_cosine(vectors[i], vectors[j]) >= REDUNDANT for j in picked):
                continue
            picked.append(i)
            sections.add(locator)
    return [candidates[i][2] for i in sorted(picked, key=lambda i: (candidates[i][0], candidates[i][1]))]


def _tfidf(docs: list[list[str]]) -> list[dict[str, float]]:
    df = Counter(t for words in docs for t in set(words))
    n = len(docs)
    out = []
    for words in docs:
        tf = Counter(words)
        vec = {t: c * math.log((1 + n) / (1 + df[t])) for t, c in tf.items()}
        norm = math.sqrt(sum(x * x for x in vec.values())) or 1.0
        out.append({t: x / norm for t, x in vec.items()})
    return out


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(x * b.get(t, 0.0) for t, x in a.items())


def summarise(scope: Scope, document_id: int, corpus_ids: Sequence[int] | None = None) -> DocumentSummary | None:
    """The summary of a ready document `scope` sees (within `corpus_ids` when given); None when it
    does not see it, it does not exist or is not ready (the caller cannot tell which)."""
    with activate(scope):
        docs = visible_documents(scope).filter(pk=document_id, status=DocumentStatus.READY)
        if corpus_ids is not None:
            docs = docs.filter(corpus_id__in=list(corpus_ids))
        doc = docs.values("id", "title", "sha256", "version", "chunk_count", "corpus__embedding_model", "corpus__embedding_dim").first()
    if doc is None:
        return None
    key = f"doc-summary:v{SUMMARY_VERSION}:{scope.tenant_id}:{doc['id']}:{doc['version']}:{doc['sha256']}"
    cached = _cache_get(key)
    if cached:
        hits = _document_chunks(scope, doc, chunk_ids=[cid for cid, _ in cached])
        by_id = {h.chunk_id: h for h in hits}
        if all(cid in by_id and text in " ".join(by_id[cid].text.split()) for cid, text in cached):
            picked = [SummarySentence(cid, text, by_id[cid].locator) for cid, text in cached]
            return DocumentSummary(doc["id"], doc["title"], tuple(picked), tuple(by_id[c] for c in dict.fromkeys(by_id)), cached=True)
    hits = _document_chunks(scope, doc)
    if not hits:
        return None
    picked = central_sentences(hits)
    _cache_set(key, [(s.chunk_id, s.text) for s in picked])
    cited = {s.chunk_id for s in picked}
    return DocumentSummary(doc["id"], doc["title"], tuple(picked), tuple(h for h in hits if h.chunk_id in cited))


def document_titled(scope: Scope, title: str, corpus_ids: Sequence[int] | None = None) -> int | None:
    """The one ready document `scope` sees (within `corpus_ids`) whose title is `title` (surrounding
    space aside): written the same, else the same ignoring case; None when none or several are."""
    if not title.strip():
        return None
    with activate(scope):
        docs = visible_documents(scope).filter(title__iexact=title.strip(), status=DocumentStatus.READY)
        if corpus_ids is not None:
            docs = docs.filter(corpus_id__in=list(corpus_ids))
        rows = list(docs.values_list("id", "title")[:20])
    for same in (lambda t: t.strip() == title.strip(), lambda t: True):
        ids = [doc for doc, t in rows if same(t)]
        if ids:
            return ids[0] if len(ids) == 1 else None
    return None


def _document_chunks(scope: Scope, doc: dict, chunk_ids: Sequence[int] = ()) -> list[retrieval.SearchHit]:
    """A document's chunks (at most retrieval.MAX_K), in order, through the scoped search: a vector
    search narrowed to the document ranks every chunk of it. Their order does not matter here, so the
    query vector is a fixed unit vector (no embedding call). With `chunk_ids`, only those."""
    dim = int(doc["corpus__embedding_dim"])
    unit = [1.0] + [0.0] * (dim - 1)
    result = retrieval.search(scope, doc["title"] or "document", k=retrieval.MAX_K, mode="vector",
                              filters=retrieval.SearchFilters(document_ids=(doc["id"],)),
                              query_vectors={f"{doc['corpus__embedding_model']}:{dim}": unit})
    hits = [h for h in result.hits if h.document_id == doc["id"] and (not chunk_ids or h.chunk_id in chunk_ids)]
    return sorted(hits, key=lambda h: h.ordinal)


def _cache_get(key: str) -> list[tuple[int, str]] | None:
    try:
        value = cache.get(key)
    except Exception:  # a cache that is down means no cache, never an error
        log.warning("summary cache unavailable", exc_info=True)
        return None
    if not isinstance(value, list) or not all(isinstance(v, list | tuple) and len(v) == 2 for v in value):
        return None
    return [(int(cid), str(text)) for cid, text in value]


def _cache_set(key: str, value: list[tuple[int, str]]) -> None:
    try:
        cache.set(key, value, SUMMARY_TTL_SECONDS)
    except Exception:
        log.warning("summary cache unavailable", exc_info=True)
