"""`search`: the one scoped entry point, running the steps of the package overview in order
(resolve, vector, keyword, fuse, hydrate, re-rank) and timing each."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence

from django.conf import settings

from kb.retrieval import side_connections
from kb.retrieval.hits import _hydrate
from kb.retrieval.keyword import _keyword_search
from kb.retrieval.plan import SearchPlan, StalePlan, _resolve, any_language
from kb.retrieval.query import Mode, SearchFilters, SearchResult
from kb.retrieval.rank import _combine, _mmr, _sentence_rerank
from kb.retrieval.sql import TenantStatements, _tenant_transaction
from kb.retrieval.tunables import MAX_K, _setting
from kb.retrieval.vector import _query_vector, _vector_search
from tenants.scope import Scope

log = logging.getLogger(__name__)


def search(scope: Scope, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: SearchFilters | None = None,
           max_distance: float | None = None, mmr_lambda: float | None = None,
           query_vectors: Mapping[str, Sequence[float]] | None = None, rerank: bool = False,
           rerank_query: str | None = None, using: str = "default") -> SearchResult:
    """Search the chunks `scope` may see. Must not be given a tenant id from anywhere but the scope.

    Best first. `query_vectors` (model key -> vector) skips embedding the query, e.g. when the
    caller already embedded it; `max_distance` drops vector-side hits farther than that cosine
    distance; `mmr_lambda` (0..1, 1 = pure relevance) diversifies the final k; `rerank` re-ranks
    the candidates by their best-matching sentences where their corpora store sentence vectors
    (kb.sentences; a no-op elsewhere), scored against `rerank_query` when given (e.g. the query
    without the names a metadata filter already matched, which every candidate shares).
    """
    if not isinstance(scope, Scope):
        raise TypeError("search needs a tenants.scope.Scope")
    if mode not in ("vector", "keyword", "hybrid"):
        raise ValueError(f"unknown search mode {mode!r}")
    args = (scope, query, max(1, min(int(k), MAX_K)), mode, filters or SearchFilters(), max_distance, mmr_lambda,
            query_vectors, rerank, rerank_query, using)
    try:
        # A search that needs only the visible corpora (vector mode, no document-level filters)
        # resolves them in the same round trip as its first ranking statement when this process
        # has seen the scope before (plan._resolve); if they changed meanwhile, it runs again.
        return _search(*args, speculate=bool(_setting("RETRIEVAL_REUSE_PLANS")))
    except StalePlan:
        return _search(*args, speculate=False)


def _search(scope: Scope, query: str, k: int, mode: Mode, filters: SearchFilters, max_distance: float | None,
            mmr_lambda: float | None, query_vectors: Mapping[str, Sequence[float]] | None, rerank: bool,
            rerank_query: str | None, using: str, speculate: bool) -> SearchResult:
    """`search` with its arguments checked; `speculate` lets the plan come from the corpus rows this
    process saw for the scope (checked in the first script; StalePlan when they changed)."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    wants_lexemes = mode in ("keyword", "hybrid")
    sentence_query = " ".join((rerank_query or "").split()) or query
    # The re-rank's lexical side needs the sentence query's lexemes: those of the query when they
    # are the same text and already resolved, else resolved in the same round trip.
    own_rerank_lexemes = rerank and not (wants_lexemes and sentence_query == query)
    with _tenant_transaction(scope, using) as tx:
        plan, lexemes, rerank_lexemes = _resolve(scope, filters, using, tx, query if wants_lexemes else None,
                                                 sentence_query if own_rerank_lexemes else None, speculate=speculate)
        if rerank and not own_rerank_lexemes:
            rerank_lexemes = any_language(lexemes)
        timings["resolve"] = _ms(t0)
        by_sentences = rerank and any(c.sentences for c in plan.corpora.values())
        reranks = mmr_lambda is not None or by_sentences
        pool = max(k, _setting("RETRIEVAL_CANDIDATES")) if (mode == "hybrid" or reranks) else k
        vector_lists: list[list[tuple[int, float]]] = []
        keyword_list: list[tuple[int, float]] = []
        paths: list[str] = []
        # One list and no re-ranking after it: the ranking query returns the hit rows itself
        # (one round trip less); otherwise only the k winners are loaded afterwards, one round trip
        # that costs less than hit rows for every candidate of every list (docs/retrieval.md, "Figures behind rules in the code").
        single = mmr_lambda is None and (mode == "keyword" or (mode == "vector" and len(plan.by_model) == 1))
        prefetched: dict[int, tuple] | None = {} if single else None
        side = None  # hybrid outside the caller's transaction: BM25 on a side connection, at the same time
        workers = settings.RETRIEVAL_PARALLEL_WORKERS
        if mode == "hybrid" and not plan.empty and not tx.nested and workers > 0:
            side = side_connections.submit(_keyword_on_side_connection, plan, lexemes, pool, using, using=using, workers=workers)
        if mode in ("vector", "hybrid") and not plan.empty:
            t = time.perf_counter()
            for model_key, group in plan.by_model.items():
                vec = _query_vector(model_key, query, query_vectors)
                rows, path = _vector_search(plan, model_key, group, vec, pool, using, prefetched)
                if max_distance is not None:
                    rows = [(cid, d) for cid, d in rows if d <= max_distance]
                vector_lists.append(rows)
                paths.append(f"{model_key}:{path}")
            timings["vector"] = _ms(t)
        if side is not None:
            try:
                (keyword_list, label), timings["keyword"] = side.result()
                label += " (side connection)"
            except Exception:
                log.warning("keyword search on a side connection failed; running it here", exc_info=True)
                side = None
        if mode in ("keyword", "hybrid") and not plan.empty and side is None:
            t = time.perf_counter()
            keyword_list, label = _keyword_search(plan, lexemes, pool, using, prefetched)
            timings["keyword"] = _ms(t)
        if mode in ("keyword", "hybrid") and not plan.empty:
            paths.append(label)
        ranked = _combine(mode, vector_lists, keyword_list)
        t = time.perf_counter()
        hits = _hydrate(plan, ranked, vector_lists, keyword_list, pool if reranks else k, using,
                        with_vectors=mmr_lambda is not None, prefetched=prefetched)
        if by_sentences:
            hits = _sentence_rerank(plan, sentence_query, rerank_lexemes, hits, query_vectors if sentence_query == query else None,
                                    using)
            paths.append("sentence rerank")
        if mmr_lambda is not None:
            hits = _mmr(hits, k, float(mmr_lambda))
        tx.flush()  # a speculative plan's check, when no statement carried it (nothing to rank)
        timings["hydrate"] = _ms(t)
    timings["total"] = _ms(t0)
    applied = plan.applied(mode=mode, k=k, max_distance=max_distance, mmr_lambda=mmr_lambda, rerank=by_sentences)
    applied["path"] = paths
    if by_sentences and sentence_query != query:
        applied["rerank_query"] = sentence_query
    return SearchResult(hits=[h for h, _ in hits][:k], applied_filter=applied, path=";".join(paths) or "empty",
                        timings_ms=timings)


def _keyword_on_side_connection(plan: SearchPlan, lexemes: dict[str, list[str]], n: int, using: str) -> tuple[tuple[list, str], float]:
    """BM25 for `plan` on this worker thread's own connection (kb.retrieval.side_connections); its statements set
    the scope's RLS tenant first, like the caller's."""
    t = time.perf_counter()
    own = dataclasses.replace(plan, tx=TenantStatements(plan.tenant_id, nested=False, using=using))
    return _keyword_search(own, lexemes, n, using, None), _ms(t)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)

