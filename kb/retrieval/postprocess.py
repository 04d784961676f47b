"""Post-processing, the last stage of a search: the winners' rows (their document title and metadata),
the optional sentence re-rank (kb.sentences) and MMR diversification. Entry: `postprocess`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kb.retrieval.prepare import QueryVector
from kb.retrieval.query import HIT_COLS, HIT_JOIN, SearchHit
from kb.retrieval.tunables import MODEL_KEY
from kb.sentences import TOP_SENTENCES, fuse

if TYPE_CHECKING:  # the search entry's plan, for annotations only (it imports this module's stage)
    from kb.retrieval.pipeline import SearchPlan

Scored = list[tuple[SearchHit, list[float] | None]]  # hits, with their vectors when MMR needs them


def postprocess(plan: SearchPlan, ranked: list[tuple[int, float]], vector_lists: list[list[tuple[int, float]]],
                keyword_list: list[tuple[int, float]], *, n: int, k: int, with_vectors: bool,
                prefetched: dict[int, tuple] | None,
                sentences: tuple[Mapping[str, QueryVector], Mapping[str, float]] | None,
                mmr_lambda: float | None) -> Scored:
    """The top `n` of `ranked` as hits, in ranked order; re-ranked by their sentences when `sentences`
    (the sentence query's vector per model, the idf of its lexemes) is given; then the `k` of them
    MMR picks when `mmr_lambda` is given. `prefetched`: hit rows the ranking statements returned."""
    hits = _hydrate(plan, ranked, vector_lists, keyword_list, n, with_vectors, prefetched)
    if sentences is not None:
        hits = _sentence_rerank(plan, *sentences, hits)
    if mmr_lambda is not None:
        hits = _mmr(hits, k, float(mmr_lambda))
    return hits


def _hydrate(plan: SearchPlan, ranked: list[tuple[int, float]], vector_lists: list[list[tuple[int, float]]],
             keyword_list: list[tuple[int, float]], n: int, with_vectors: bool,
             prefetched: dict[int, tuple] | None = None) -> Scored:
    """Load the top `n` ranked chunks with their document title and metadata, in ranked order."""
    top = ranked[:n]
    if not top:
        return []
    dist = {cid: d for rows in vector_lists for cid, d in rows}
    kw = dict(keyword_list)
    if prefetched is not None and all(cid in prefetched for cid, _ in top):
        rows = {cid: (*prefetched[cid], None) for cid, _ in top}
    else:
        vec_col = ", c.embedding::text" if with_vectors else ", NULL"
        # The ids come from this search's filtered ranking statements: tenant and corpora suffice
        # (a long document-id list would only add parsing and planning).
        where, params = plan.where("c", departments=False, documents=False)
        found = plan.tx.query_prepared(f"SELECT {HIT_COLS}{vec_col} FROM kb_chunk c {HIT_JOIN} WHERE {where} "
                                       f"AND c.id = ANY(%s)", [*params, [cid for cid, _ in top]])
        rows = {r[0]: r for r in found}
    out = []
    for cid, score in top:
        r = rows.get(cid)
        if r is None:
            continue
        metadata = r[11] if isinstance(r[11], dict) else json.loads(r[11] or "{}")
        flags = r[8] if isinstance(r[8], list) else json.loads(r[8] or "[]")
        hit = SearchHit(chunk_id=cid, document_id=r[1], corpus_id=r[2], corpus_name=plan.corpora[r[2]].name,
                        document_title=r[10], locator=r[3], page=r[4], ordinal=r[5], text=r[6], content_hash=r[7],
                        score=float(score), metadata=metadata, flags=tuple(flags), distance=dist.get(cid),
                        keyword_score=kw.get(cid), embedding_model=r[9])
        vec = [float(x) for x in r[12].strip("[]").split(",")] if with_vectors and r[12] else None
        out.append((hit, vec))
    return out


def _sentence_rerank(plan: SearchPlan, vectors: Mapping[str, QueryVector], weights: Mapping[str, float],
                     items: Scored) -> Scored:
    """Fuse the candidates' rank with two ranks of their sentences (kb.sentences), one round trip:
    by similarity to the query (mean of the two nearest sentences) and by the query terms one
    sentence holds together (the best sentence's sum of BM25 idf over the query lexemes it has:
    `weights`, computed by the retrieval stage). `vectors`: the sentence query embedded per model (prepare).

    Only among candidates of one embedding model (similarities of different models are not comparable).
    """
    models = {h.embedding_model for h, _ in items}
    if len(models) != 1 or not items:
        return items
    model_key = models.pop()
    group = plan.by_model.get(model_key)
    if not group or not MODEL_KEY.match(model_key):
        return items
    vec = vectors[model_key]
    typ = vec.cast
    sql = (f"SELECT chunk_id, avg(sim) FILTER (WHERE rn <= {int(TOP_SENTENCES)}), max(lx) FROM ("
           f"SELECT chunk_id, sim, lx, row_number() OVER (PARTITION BY chunk_id ORDER BY sim DESC) AS rn FROM ("
           f"SELECT s.chunk_id, 1 - ((s.embedding::{typ}) <=> %s::{typ}) AS sim, "
           f"(SELECT coalesce(sum(w.idf), 0) FROM unnest(%s::text[], %s::float8[]) AS w(lex, idf) WHERE w.lex = ANY(s.lexemes)) AS lx "
           f"FROM kb_chunksentence s "
           f"WHERE s.tenant_id = %s AND s.embedding_model = %s AND s.chunk_id = ANY(%s) OFFSET 0) x) y GROUP BY chunk_id")
    rows = plan.tx.query(sql, [str(vec.literal), list(weights), list(weights.values()), plan.tenant_id, model_key,
                               [h.chunk_id for h, _ in items]])[0]
    if not rows:
        return items
    by_vector = {cid: float(sim) for cid, sim, _ in rows}
    by_terms = {cid: float(lx) for cid, _, lx in rows} if weights else None
    by_id = {h.chunk_id: (h, v) for h, v in items}
    order = fuse([h.chunk_id for h, _ in items], by_vector, by_terms, rrf_k=float(plan.knobs["RETRIEVAL_RRF_K"]))
    return [by_id[cid] for cid in order]


def _mmr(items: Scored, k: int, lam: float) -> Scored:
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
