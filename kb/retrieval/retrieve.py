"""Retrieval, the second stage of a search: the vector side (kb.retrieval.vector), the keyword side
(BM25, here) and their fusion into one ranked list. Entry: `retrieve`.

The keyword side: BM25 in SQL over the GIN candidates of the query's rarest lexemes, with per-corpus
document frequencies from ts_stat (cached). Each corpus's chunks are matched with the query's lexemes
under that corpus's text search language (Corpus.language).

Side connections: a hybrid search runs two independent ranking queries (vector and BM25). On one
connection they run one after the other; PostgreSQL can run them at once on two (measured in
docs/retrieval.md: a hybrid search costs about the larger of the two instead of their sum). Worker
threads here each keep their own Django connection (connections are per thread) for the life of the
process, so no search pays for connecting. Only for statements that need no transaction shared with
the caller: `retrieve` uses them when the search is not inside the caller's transaction, where every
statement script is its own transaction anyway (and sets the RLS tenant first), so the side
connection sees exactly what the caller's would. A failure on a side connection closes it (the next
task reconnects) and is raised to the caller, which runs the work itself.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections

from kb.fusion import rrf_scores
from kb.retrieval.prepare import PlannedCorpus, QueryVector
from kb.retrieval.query import Mode
from kb.retrieval.tunables import MAX_SCORED_TERMS
from kb.retrieval.vector import vector_search
from tenants.conf import product_settings

if TYPE_CHECKING:  # the search entry's plan, for annotations only (it imports this module's stage)
    from kb.retrieval.pipeline import SearchPlan

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Retrieved:
    """The retrieval stage's result."""

    vector_lists: list[list[tuple[int, float]]]  # per model: [(chunk id, cosine distance)], nearest first
    keyword_list: list[tuple[int, float]]  # [(chunk id, BM25 score)], best first
    ranked: list[tuple[int, float]]  # the fused list (see combine)
    paths: list[str]  # for the result's path: per model, then the keyword side's label
    weights: dict[str, float]  # BM25 idf of the lexemes `weigh` named (the sentence re-rank's)
    timings: dict[str, float]  # "vector", "keyword" (ms)


def retrieve(plan: SearchPlan, mode: Mode, lexemes: dict[str, list[str]], vectors: Mapping[str, QueryVector], n: int,
             using: str, prefetched: dict[int, tuple] | None, max_distance: float | None, *,
             weigh: list[str] | None = None) -> Retrieved:
    """The top `n` of each side `mode` asks for, and their fusion.

    `prefetched`: the ranking statements also return their hits' rows (kept there by chunk id).
    `weigh`: lexemes whose BM25 idf over the plan's corpora the sentence re-rank needs (from the
    keyword side's statistics, computed with them).
    """
    timings: dict[str, float] = {}
    vector_lists: list[list[tuple[int, float]]] = []
    keyword_list: list[tuple[int, float]] = []
    weights: dict[str, float] = {}
    paths: list[str] = []
    label = ""
    side = None  # hybrid outside the caller's transaction: BM25 on a side connection, at the same time
    workers = product_settings.RETRIEVAL_PARALLEL_WORKERS
    if mode == "hybrid" and not plan.empty and not plan.tx.nested and workers > 0:
        side = submit(plan.on_own_connection, _keyword_on_side_connection, lexemes, n, using, weigh, using=using, workers=workers)
    if mode in ("vector", "hybrid") and not plan.empty:
        t = time.perf_counter()
        vector_lists, vector_paths = vector_search(plan, vectors, n, using, prefetched, max_distance)
        paths += vector_paths
        timings["vector"] = _ms(t)
    if side is not None:
        try:
            (keyword_list, label, weights), timings["keyword"] = side.result()
            label += " (side connection)"
        except Exception:
            log.warning("keyword search on a side connection failed; running it here", exc_info=True)
            side = None
    if mode in ("keyword", "hybrid") and not plan.empty and side is None:
        t = time.perf_counter()
        keyword_list, label = _keyword_search(plan, lexemes, n, using, prefetched)
        timings["keyword"] = _ms(t)
    if mode in ("keyword", "hybrid") and not plan.empty:
        paths.append(label)
    if weigh is not None and side is None:
        weights = _idf_weights(plan, weigh, using)
    return Retrieved(vector_lists, keyword_list, combine(mode, vector_lists, keyword_list, plan.knobs), paths, weights, timings)


def _keyword_on_side_connection(plan: SearchPlan, lexemes: dict[str, list[str]], n: int, using: str,
                                weigh: list[str] | None) -> tuple[tuple[list, str, dict[str, float]], float]:
    """BM25 (and the idf of `weigh`) for `plan`, whose statements run on this worker thread's own connection."""
    t = time.perf_counter()
    rows, label = _keyword_search(plan, lexemes, n, using, None)
    weights = _idf_weights(plan, weigh, using) if weigh is not None else {}
    return (rows, label, weights), _ms(t)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def rrf(lists: list[tuple[list[tuple[int, float]], float]], rrf_k: float) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion of ([(chunk id, score)], weight) lists: [(chunk id, score)], best first."""
    scores = rrf_scores((([cid for cid, _ in rows], weight) for rows, weight in lists), rrf_k=rrf_k)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def combine(mode: Mode, vector_lists: list[list[tuple[int, float]]], keyword_list: list[tuple[int, float]],
            knobs: Mapping[str, Any]) -> list[tuple[int, float]]:
    """One ranked list [(chunk id, score)]. Vector scores are cosine similarity, keyword BM25, hybrid RRF."""
    rrf_k = float(knobs["RETRIEVAL_RRF_K"])
    if mode == "keyword":
        return keyword_list
    if mode == "vector":
        if len(vector_lists) == 1:
            return [(cid, 1.0 - d) for cid, d in vector_lists[0]]
        # Several models: their distances are not comparable, so fuse by rank.
        return rrf([(rows, 1.0) for rows in vector_lists], rrf_k)
    per_model = len(vector_lists) or 1
    weighted = [(rows, float(knobs["RETRIEVAL_VECTOR_WEIGHT"]) / per_model) for rows in vector_lists]
    weighted.append((keyword_list, float(knobs["RETRIEVAL_KEYWORD_WEIGHT"])))
    return rrf(weighted, rrf_k)


_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool): a forked child makes its own


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kb-side"))
        return _pool[1]


def submit(fn: Callable[..., T], *args: object, using: str = "default", workers: int = 2) -> Future[T]:
    """Run `fn(*args)` on a side-connection worker thread, whose `connections[using]` is its own connection."""

    def run() -> T:
        try:
            return fn(*args)
        except Exception:
            connections[using].close()  # possibly broken: reconnect on the next task
            raise

    return _executor(workers).submit(run)


def close_side_connections() -> None:
    """Stop the worker threads (waiting for their tasks); the next `submit` starts new ones, which
    connect anew (e.g. after the database they were connected to was dropped)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool[1].shutdown(wait=True)


@dataclass
class _TermStats:
    n: int
    total_len: int
    df: dict[str, int]
    at: float


_stats_cache: dict[tuple[str, int, str], tuple[int, _TermStats]] = {}


_stats_lock = threading.Lock()


def _corpus_term_stats(corpus: PlannedCorpus, plan: SearchPlan, using: str) -> _TermStats:
    """Document frequencies of one corpus's lexemes (ts_stat), cached per process by (corpus, chunk count).

    IDF is a corpus-level statistic, so one table per corpus serves every scope that sees it.
    """
    key = (connections[using].settings_dict["NAME"], corpus.id, corpus.language)
    ttl = plan.knobs["RETRIEVAL_TERM_STATS_TTL_S"]
    with _stats_lock:
        hit = _stats_cache.get(key)
    if hit and hit[0] == corpus.chunk_count and time.monotonic() - hit[1].at < ttl:
        return hit[1]
    inner = f"SELECT search_vector FROM kb_chunk WHERE tenant_id = {int(plan.tenant_id)} AND corpus_id = {int(corpus.id)}"
    words, counts = plan.tx.query(
        "SELECT word, ndoc FROM ts_stat(%s); SELECT count(*), coalesce(sum(char_end - char_start), 0) FROM kb_chunk "
        "WHERE tenant_id = %s AND corpus_id = %s AND search_vector IS NOT NULL", [inner, plan.tenant_id, corpus.id])
    df = {w: n for w, n in words}
    n, total = counts[0]
    stats = _TermStats(int(n), int(total), df, time.monotonic())
    with _stats_lock:
        _stats_cache[key] = (corpus.chunk_count, stats)
    return stats


def _tsquery_literal(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _keyword_search(plan: SearchPlan, lexemes: dict[str, list[str]], n: int, using: str,
                    prefetched: dict[int, tuple] | None = None) -> tuple[list[tuple[int, float]], str]:
    """Top `n` chunks by BM25: [(chunk id, score)], best first, and a label for the trace.

    `lexemes`: the query's lexemes per text search language. The corpora of one language are ranked
    with that language's lexemes; a scope spanning several languages is ranked per language (each
    with its own statistics, on the GIN index as usual) and the lists merged by score.
    """
    groups: dict[str, dict[int, PlannedCorpus]] = {}
    for c in plan.corpora.values():
        groups.setdefault(c.language, {})[c.id] = c
    if len(groups) <= 1:
        language = next(iter(groups), "")
        return _keyword_search_one(plan, lexemes.get(language, []), n, using, prefetched)
    rows: list[tuple[int, float]] = []
    labels = []
    for language, corpora in sorted(groups.items()):
        found, label = _keyword_search_one(dataclasses.replace(plan, corpora=corpora), lexemes.get(language, []), n, using,
                                           prefetched)
        rows += found
        labels.append(f"{language}: {label}")
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows[:n], "; ".join(labels)


def _keyword_search_one(plan: SearchPlan, lexemes: list[str], n: int, using: str,
                        prefetched: dict[int, tuple] | None = None) -> tuple[list[tuple[int, float]], str]:
    """`_keyword_search` over corpora of one language, `lexemes` under that language.

    Score: sum over query lexemes of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)),
    with tf read from the tsvector by ts_rank_cd under unit weights (for a one-lexeme query it is
    exactly the occurrence count). Candidates: chunks containing one of the rarest query lexemes
    whose document frequencies add up to RETRIEVAL_BM25_CANDIDATE_SHARE of the chunks and at most
    RETRIEVAL_BM25_MAX_CANDIDATES (a chunk holding only common words does not outrank one holding the
    rare ones: docs/retrieval.md, "Keyword search"); every lexeme still counts in the score (a query of more than MAX_SCORED_TERMS:
    its rarest ones). Fewer than n candidates: all lexemes.
    """
    if not lexemes:
        return [], "bm25(no terms)"
    stats = [_corpus_term_stats(c, plan, using) for c in plan.corpora.values()]
    n_docs = sum(s.n for s in stats)
    if n_docs == 0:
        return [], "bm25(empty)"
    avg_len = max(sum(s.total_len for s in stats) / n_docs, 1.0)
    knobs = plan.knobs
    k1, b = float(knobs["RETRIEVAL_BM25_K1"]), float(knobs["RETRIEVAL_BM25_B"])
    terms: list[tuple[str, float, int]] = []
    for lex in lexemes:
        df = sum(s.df.get(lex, 0) for s in stats)
        if df:
            terms.append((lex, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)), df))
    if not terms:
        return [], "bm25(no match)"
    terms = rarest_terms(terms)
    share = float(knobs["RETRIEVAL_BM25_CANDIDATE_SHARE"])
    limit = min(share * n_docs, float(knobs["RETRIEVAL_BM25_MAX_CANDIDATES"] or math.inf)) if 0 < share < 1 else math.inf
    generators = candidate_lexemes(terms, limit)
    rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    if len(rows) < n and len(generators) < len(terms) and plan.doc_rows is not None and limit < math.inf:
        # Document filters keep only part of the corpora's chunks, so the budget (counted in corpus
        # document frequencies) bought fewer in-scope candidates than it meant to: spend it again
        # in scope terms before falling back to every lexeme (unbounded: the p95 of filtered searches).
        in_scope = plan.doc_rows / max(sum(c.chunk_count for c in plan.corpora.values()), 1)
        wider = candidate_lexemes(terms, limit / max(in_scope, 1e-3))
        if len(wider) > len(generators):
            generators = wider
            rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    if len(rows) < n and len(generators) < len(terms):
        generators = [t for t, _, _ in terms]
        rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    return rows, f"bm25(candidates from {len(generators)}/{len(terms)} terms)"


def rarest_terms(terms: list[tuple[str, float, int]], keep: int = MAX_SCORED_TERMS) -> list[tuple[str, float, int]]:
    """At most `keep` (lexeme, idf, df) terms: the rarest, in their given order (ties by spelling)."""
    if len(terms) <= keep:
        return terms
    kept = {t[0] for t in sorted(terms, key=lambda t: (t[2], t[0]))[:keep]}
    return [t for t in terms if t[0] in kept]


def candidate_lexemes(terms: list[tuple[str, float, int]], limit: float) -> list[str]:
    """The rarest lexemes whose document frequencies add up to at most `limit` (at least one)."""
    generators: list[str] = []
    budget = 0
    for lex, _, df in sorted(terms, key=lambda t: t[2]):
        if generators and budget + df > limit:
            break
        generators.append(lex)
        budget += df
    return generators


def _bm25_sql(plan: SearchPlan, terms: list[tuple[str, float, int]], generators: list[str], avg_len: float, k1: float,
              b: float, n: int, using: str, prefetched: dict[int, tuple] | None) -> list[tuple[int, float]]:
    where, params = plan.where("c")
    # GIN candidates are the access path: the visible corpora are checked on each candidate row, never
    # ANDed in as a bitmap of every chunk of those corpora, which costs a scan of them all
    # (docs/retrieval.md, "Figures behind rules in the code").
    where = where.replace("c.corpus_id = ANY(", "c.corpus_id + 0 = ANY(", 1)
    tsq = " | ".join(_tsquery_literal(t) for t in generators)
    tf_cols = ", ".join(f"ts_rank_cd('{{1,1,1,1}}', v, %s::tsquery, 0) AS tf{i}" for i in range(len(terms)))
    # idf and the average length are parameters (a prepared statement per term count and filter
    # shape), cast to the types their literals had: the same float8 and numeric arithmetic.
    norm = f"{k1} * (1 - {b} + {b} * dl / %s::numeric)"
    score = " + ".join(f"%s::float8 * tf{i} * {k1 + 1} / (tf{i} + norm)" for i in range(len(terms)))
    # The stored tsvector is decompressed once per candidate and cut down to the query's lexemes
    # (every call on the stored column would decompress it again): the query's lexemes get weight
    # A and only A is kept (ranks use unit weights and one lexeme each, so lexemes stored with A
    # already change no tf). The length norm (numeric) is computed once, not once per term.
    # OFFSET 0 keeps each layer from being flattened into the next, which would repeat the work
    # per reference.
    sql = (f"SELECT id, {score} AS score FROM (SELECT id, {norm} AS norm, {tf_cols} FROM ("
           f"SELECT c.id, GREATEST(c.char_end - c.char_start, 1) AS dl, "
           f"ts_filter(setweight(c.search_vector, 'A', %s::text[]), '{{a}}') AS v "
           f"FROM kb_chunk c WHERE {where} AND c.search_vector @@ %s::tsquery OFFSET 0) y OFFSET 0) x "
           f"ORDER BY score DESC, id LIMIT %s")
    sparams = [*(repr(float(idf)) for _, idf, _ in terms), repr(float(avg_len)),
               *(_tsquery_literal(t) for t, _, _ in terms), [t for t, _, _ in terms], *params, tsq, n]
    # Planned per search, never prepared with a generic plan: the plan depends on the tsquery's
    # selectivity and the document filter's size, which a generic plan cannot see (docs/retrieval.md, "Figures behind rules in the code").
    return plan.tx.rank(sql, sparams, "DESC", prefetched, prepared=False)


def _idf_weights(plan: SearchPlan, lexemes: list[str], using: str) -> dict[str, float]:
    """Lexeme -> BM25 idf over the plan's corpora (the keyword side's statistics, cached); lexemes
    no chunk holds are left out, and only the MAX_SCORED_TERMS rarest are kept."""
    if not lexemes:
        return {}
    stats = [_corpus_term_stats(c, plan, using) for c in plan.corpora.values()]
    n_docs = sum(st.n for st in stats)
    terms = []
    for lex in dict.fromkeys(lexemes):
        df = sum(st.df.get(lex, 0) for st in stats)
        if df:
            terms.append((lex, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)), df))
    return {lex: idf for lex, idf, _ in rarest_terms(terms)}

