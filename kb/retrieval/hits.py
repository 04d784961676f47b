"""Hit rows: the columns a ranking statement returns with its ids, and loading the winners' rows."""

from __future__ import annotations

import json

from kb.retrieval.plan import SearchPlan
from kb.retrieval.query import SearchHit

_HIT_COLS = ("c.id, c.document_id, c.corpus_id, c.locator, c.page, c.ordinal, c.text, c.content_hash, c.flags, "
             "c.embedding_model, d.title, d.metadata")


_HIT_JOIN = "JOIN kb_document d ON d.id = c.document_id AND d.tenant_id = c.tenant_id"


def _with_hits(ranking: str, params: list, n: int, order: str) -> tuple[str, list]:
    """Wrap a ranking query (id, score) so it also returns the hit columns of its rows."""
    sql = (f"WITH ranked AS MATERIALIZED ({ranking}) SELECT ranked.score, {_HIT_COLS} FROM ranked "
           f"JOIN kb_chunk c ON c.id = ranked.id {_HIT_JOIN} ORDER BY ranked.score {order}, c.id")
    return sql, params


def _collect(rows: list[tuple], prefetched: dict[int, tuple] | None) -> list[tuple[int, float]]:
    """[(id, score)] from ranking rows; with `prefetched`, rows are (score, *hit columns) and are kept."""
    if prefetched is None:
        return [(r[0], float(r[1])) for r in rows]
    for r in rows:
        prefetched[r[1]] = r[1:]
    return [(r[1], float(r[0])) for r in rows]


def _hydrate(plan: SearchPlan, ranked: list[tuple[int, float]], vector_lists: list[list[tuple[int, float]]],
             keyword_list: list[tuple[int, float]], n: int, using: str, with_vectors: bool,
             prefetched: dict[int, tuple] | None = None) -> list[tuple[SearchHit, list[float] | None]]:
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
        found = plan.tx.query_prepared(f"SELECT {_HIT_COLS}{vec_col} FROM kb_chunk c {_HIT_JOIN} WHERE {where} "
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

