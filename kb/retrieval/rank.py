"""Pure ranking after retrieval: weighted reciprocal rank fusion, the optional sentence re-rank
(kb.sentences) and MMR diversification."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kb.fusion import rrf_scores
from kb.retrieval.keyword import _idf_weights
from kb.retrieval.plan import SearchPlan
from kb.retrieval.query import Mode, SearchHit
from kb.retrieval.tunables import _MODEL_KEY, _setting
from kb.retrieval.vector import _cast_type, _query_vector, _vec_literal
from kb.sentences import TOP_SENTENCES, fuse


def _rrf(lists: list[tuple[list[tuple[int, float]], float]], rrf_k: float) -> list[tuple[int, float]]:
    scores = rrf_scores((([cid for cid, _ in rows], weight) for rows, weight in lists), rrf_k=rrf_k)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def _combine(mode: Mode, vector_lists: list[list[tuple[int, float]]],
             keyword_list: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """One ranked list [(chunk id, score)]. Vector scores are cosine similarity, keyword BM25, hybrid RRF."""
    rrf_k = float(_setting("RETRIEVAL_RRF_K"))
    if mode == "keyword":
        return keyword_list
    if mode == "vector":
        if len(vector_lists) == 1:
            return [(cid, 1.0 - d) for cid, d in vector_lists[0]]
        # Several models: their distances are not comparable, so fuse by rank.
        return _rrf([(rows, 1.0) for rows in vector_lists], rrf_k)
    per_model = len(vector_lists) or 1
    weighted = [(rows, float(_setting("RETRIEVAL_VECTOR_WEIGHT")) / per_model) for rows in vector_lists]
    weighted.append((keyword_list, float(_setting("RETRIEVAL_KEYWORD_WEIGHT"))))
    return _rrf(weighted, rrf_k)


def _sentence_rerank(plan: SearchPlan, query: str, lexemes: list[str], items: list[tuple[SearchHit, list[float] | None]],
                     query_vectors: Mapping[str, Sequence[float]] | None, using: str) -> list[tuple[SearchHit, list[float] | None]]:
    """Fuse the candidates' rank with two ranks of their sentences (kb.sentences), one round trip:
    by similarity to the query (mean of the two nearest sentences) and by the query terms one
    sentence holds together (the best sentence's sum of BM25 idf over the query lexemes it has).

    Only among candidates of one embedding model (similarities of different models are not comparable).
    """
    models = {h.embedding_model for h, _ in items}
    if len(models) != 1 or not items:
        return items
    model_key = models.pop()
    group = plan.by_model.get(model_key)
    if not group or not _MODEL_KEY.match(model_key):
        return items
    typ = _cast_type(group[0].dim)
    vec = _query_vector(model_key, query, query_vectors)
    weights = _idf_weights(plan, lexemes, using)
    sql = (f"SELECT chunk_id, avg(sim) FILTER (WHERE rn <= {int(TOP_SENTENCES)}), max(lx) FROM ("
           f"SELECT chunk_id, sim, lx, row_number() OVER (PARTITION BY chunk_id ORDER BY sim DESC) AS rn FROM ("
           f"SELECT s.chunk_id, 1 - ((s.embedding::{typ}) <=> %s::{typ}) AS sim, "
           f"(SELECT coalesce(sum(w.idf), 0) FROM unnest(%s::text[], %s::float8[]) AS w(lex, idf) WHERE w.lex = ANY(s.lexemes)) AS lx "
           f"FROM kb_chunksentence s "
           f"WHERE s.tenant_id = %s AND s.embedding_model = %s AND s.chunk_id = ANY(%s) OFFSET 0) x) y GROUP BY chunk_id")
    rows = plan.tx.query(sql, [_vec_literal(vec), list(weights), list(weights.values()), plan.tenant_id, model_key,
                               [h.chunk_id for h, _ in items]])[0]
    if not rows:
        return items
    by_vector = {cid: float(sim) for cid, sim, _ in rows}
    by_terms = {cid: float(lx) for cid, _, lx in rows} if weights else None
    by_id = {h.chunk_id: (h, v) for h, v in items}
    order = fuse([h.chunk_id for h, _ in items], by_vector, by_terms, rrf_k=float(_setting("RETRIEVAL_RRF_K")))
    return [by_id[cid] for cid in order]


def _mmr(items: list[tuple[SearchHit, list[float] | None]], k: int, lam: float) -> list[tuple[SearchHit, list[float] | None]]:
    """Maximal marginal relevance: trade relevance (rank-normalised score) against similarity to picks.

    Chunks embedded with different models are treated as dissimilar (their vectors are not comparable).
    """
    lam = min(max(lam, 0.0), 1.0)
    if not items:
        return items
    top, bottom = items[0][0].score, items[-1][0].score
    span = (top - bottom) or 1.0
    rel = [(h.score - bottom) / span for h, _ in items]
    chosen: list[int] = []
    left = list(range(len(items)))
    while left and len(chosen) < k:
        best, best_val = left[0], -math.inf
        for i in left:
            hi, vi = items[i]
            sim = 0.0
            for j in chosen:
                hj, vj = items[j]
                if vi is not None and vj is not None and hi.embedding_model == hj.embedding_model:
                    sim = max(sim, sum(a * b for a, b in zip(vi, vj, strict=False)))
            val = lam * rel[i] - (1 - lam) * sim
            if val > best_val:
                best, best_val = i, val
        chosen.append(best)
        left.remove(best)
    return [items[i] for i in chosen]

