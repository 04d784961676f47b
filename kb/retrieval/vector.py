"""The vector side of the retrieval stage: per model, the choice between an exact scan and the
cheapest covering HNSW index (the model's, the tenant's own, or one arm per department), with its SQL.
Entry: `vector_search` (called once per search by kb.retrieval.retrieve)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from django.db import connections

from kb.retrieval.prepare import PlannedCorpus, QueryVector
from kb.retrieval.tunables import MAX_ARMS, MODEL_KEY, snapshot

if TYPE_CHECKING:  # the search entry's plan, for annotations only (it imports this module's stage)
    from kb.retrieval.pipeline import SearchPlan


def vector_search(plan: SearchPlan, vectors: Mapping[str, QueryVector], n: int, using: str,
                  prefetched: dict[int, tuple] | None, max_distance: float | None) -> tuple[list[list[tuple[int, float]]], list[str]]:
    """Nearest `n` chunks of each model of the plan, with the query embedded by that model (`vectors`):
    one [(chunk id, cosine distance)] list per model, nearest first, without hits farther than
    `max_distance`; and each model's path, "<model key>:<path>"."""
    lists: list[list[tuple[int, float]]] = []
    paths: list[str] = []
    for model_key, group in plan.by_model.items():
        rows, path = _vector_search(plan, model_key, group, vectors[model_key], n, using, prefetched)
        if max_distance is not None:
            rows = [(cid, d) for cid, d in rows if d <= max_distance]
        lists.append(rows)
        paths.append(f"{model_key}:{path}")
    return lists, paths

@dataclass(frozen=True)
class HnswIndex:
    """A valid HNSW index of one model: the model's own (every tenant), or a scope index of a
    tenant ("all" departments) or of one department of it (None: its tenant-wide rows)."""

    tenant_id: int | None
    department: int | None | str
    rows: int


@dataclass(frozen=True)
class VectorPlan:
    """How one model's rows are searched: exact, one index scan, or one arm per department."""

    kind: Literal["exact", "index", "parts"]
    index: HnswIndex | None = None  # kind "index"
    # kind "parts", one arm each: (department or None, its index or None for an exact arm, rows
    # the arm takes: n from an unfiltered scan, RETRIEVAL_HNSW_FETCH from a filtered one)
    parts: tuple[tuple[int | None, HnswIndex | None, int], ...] = ()
    visits: float = 0.0

    def label(self, ef: int) -> str:
        if self.kind == "exact":
            return "exact"
        if self.kind == "index":
            where = "model" if self.index is None or self.index.tenant_id is None else "tenant"
            return f"hnsw(ef={ef},{where} index)"
        n_idx = sum(1 for _, ix, _ in self.parts if ix is not None)
        return f"hnsw(ef={ef},{n_idx} department index{'es' if n_idx != 1 else ''}" + (
            f"+{len(self.parts) - n_idx} exact)" if n_idx < len(self.parts) else ")")


_index_cache: dict[tuple[str, str], tuple[float, list[HnswIndex]]] = {}


_PREDICATE = re.compile(r"^\(*\(embedding_model\)::text = '(?P<key>[^']+)'::text\)(?: AND \(tenant_id = (?P<t>\d+)\))?"
                        r"(?: AND \((?:department_id = (?P<d>\d+)|(?P<null>department_id IS NULL))\))?\)?$")


def _hnsw_indexes(model_key: str, using: str) -> list[HnswIndex]:
    """The model's valid HNSW indexes with their sizes (pg_class.reltuples), cached a minute.

    Recognised by predicate: the model's own index (kb.vector_index) and its scope indexes (tenant,
    tenant + department). Any other partial HNSW index is ignored.
    """
    key = (connections[using].settings_dict["NAME"], model_key)
    hit = _index_cache.get(key)
    if hit and time.monotonic() - hit[0] < 60:
        return hit[1]
    with connections[using].cursor() as cur:
        cur.execute("SELECT pg_get_expr(i.indpred, i.indrelid), c.reltuples FROM pg_index i "
                    "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
                    "WHERE i.indrelid = 'kb_chunk'::regclass AND a.amname = 'hnsw' AND i.indisvalid "
                    "AND position(%s in pg_get_expr(i.indpred, i.indrelid)) > 0", [f"'{model_key}'"])
        found = cur.fetchall()
    out = []
    for pred, reltuples in found:
        m = _PREDICATE.match(pred or "")
        if not m or m["key"] != model_key or ((m["d"] or m["null"]) and not m["t"]):
            continue
        # A never-analysed index reports -1: count it as present with unknown size (selectivity 1).
        rows = max(int(reltuples or 0), 1)
        dept: int | None | str = int(m["d"]) if m["d"] else None if m["null"] else "all"
        out.append(HnswIndex(int(m["t"]) if m["t"] else None, dept, rows))
    _index_cache[key] = (time.monotonic(), out)
    return out


def _index_rows(model_key: str, using: str) -> int | None:
    """Entries in the model's own HNSW index; None when it has none."""
    rows = [ix.rows for ix in _hnsw_indexes(model_key, using) if ix.tenant_id is None]
    return max(rows) if rows else None


def _scan_visits(scope_rows_: float, index_rows: int, ef: int, fetch: int) -> float:
    """Index tuples a filtered relaxed-order scan visits to find `fetch` in-scope rows."""
    return ef + fetch / min(1.0, max(scope_rows_, 1.0) / max(index_rows, 1))


def choose_vector_plan(rows_in_scope: int, tenant_id: int, department_parts: dict[int | None, int] | None,
                       indexes: Sequence[HnswIndex], ef: int, fetch: int, n: int, *,
                       knobs: Mapping[str, Any] | None = None) -> VectorPlan:
    """The path choice, per query, from the scope's size and the indexes that cover it.

    Scopes up to RETRIEVAL_EXACT_MAX_ROWS are scanned exactly. Otherwise every index that covers
    the scope is priced in visited tuples (ef + fetch / selectivity: pgvector filters after the
    index, each visit a heap check): the model's index, the tenant's scope index, and, for a scope
    of explicit departments (`department_parts`: department or None for tenant-wide rows -> rows
    in scope), one arm per department on its own index (unfiltered: ef + n) or, without one, an
    exact arm over its rows. The cheapest wins if its visits times RETRIEVAL_HNSW_TUPLE_COST are
    below the rows an exact scan reads. `knobs`: the tunables (kb.retrieval.tunables.snapshot; read now
    when not given).
    """
    knobs = snapshot() if knobs is None else knobs
    exact = VectorPlan("exact")
    if rows_in_scope <= knobs["RETRIEVAL_EXACT_MAX_ROWS"]:
        return exact
    options: list[VectorPlan] = []
    if not knobs["RETRIEVAL_SCOPE_INDEXES"]:
        indexes = [ix for ix in indexes if ix.tenant_id is None]
    for ix in indexes:
        if ix.tenant_id is None or (ix.tenant_id == tenant_id and ix.department == "all"):
            options.append(VectorPlan("index", index=ix, visits=_scan_visits(rows_in_scope, ix.rows, ef, fetch)))
    if department_parts and len(department_parts) <= MAX_ARMS:
        own = {ix.department: ix for ix in indexes if ix.tenant_id == tenant_id and ix.department != "all"}
        parts: list[tuple[int | None, HnswIndex | None, int]] = []
        visits, exact_rows = 0.0, 0.0
        for dept, rows in sorted(department_parts.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)):
            arm_index = own.get(dept)
            if arm_index is not None and rows > 0:
                # Stored counts and reltuples are estimates: within 10% the arm is taken as unfiltered.
                take = n if rows >= 0.9 * arm_index.rows else max(n, fetch)
                visits += _scan_visits(rows, arm_index.rows, ef, take)
                parts.append((dept, arm_index, take))
            else:
                exact_rows += rows
                parts.append((dept, None, n))
        if any(ix is not None for _, ix, _ in parts):
            options.append(VectorPlan("parts", parts=tuple(parts), visits=visits + exact_rows / _tuple_cost(knobs)))
    if not options:
        return exact
    best = min(options, key=lambda o: o.visits)
    return best if best.visits * _tuple_cost(knobs) < rows_in_scope else exact


def _tuple_cost(knobs: Mapping[str, Any]) -> float:
    return max(float(knobs["RETRIEVAL_HNSW_TUPLE_COST"]), 1e-9)


def use_hnsw(rows_in_scope: int, index_rows: int | None, ef: int, fetch: int) -> bool:
    """The path choice with only the model's index: see choose_vector_plan."""
    indexes = [HnswIndex(None, "all", index_rows)] if index_rows else []
    return choose_vector_plan(rows_in_scope, 0, None, indexes, ef, fetch, fetch).kind != "exact"


def _department_parts(plan: SearchPlan, group: list[PlannedCorpus], rows_in_scope: int) -> dict[int | None, int] | None:
    """Scope rows per department (None: tenant-wide) for a scope of explicit departments, else None.

    From the stored counts of the model's corpora by their department, scaled to the document-level
    count when document filters apply. Every department of the scope gets an entry (0 when none of
    its corpora is visible), so the arms cover the whole scope.
    """
    if plan.department_ids is None:
        return None
    parts: dict[int | None, int] = {d: 0 for d in plan.department_ids}
    if plan.include_tenant_wide:
        parts[None] = 0
    total = sum(c.chunk_count for c in group) or 1
    for c in group:
        if c.department_id in parts:
            parts[c.department_id] += c.chunk_count
    scale = min(1.0, rows_in_scope / total)
    return {d: int(math.ceil(r * scale)) for d, r in parts.items()}


def _scope_rows(plan: SearchPlan, group: list[PlannedCorpus]) -> int:
    """Rows the vector query may visit, from stored counts (an upper bound when departments narrow)."""
    if plan.doc_rows is not None:
        return plan.doc_rows
    return sum(c.chunk_count for c in group)


def _vector_search(plan: SearchPlan, model_key: str, group: list[PlannedCorpus], vec: QueryVector, n: int,
                   using: str, prefetched: dict[int, tuple] | None = None) -> tuple[list[tuple[int, float]], str]:
    """Nearest `n` chunks of one model: [(chunk id, cosine distance)], nearest first, and the path used."""
    if not MODEL_KEY.match(model_key):
        return [], "skipped"
    dim = group[0].dim
    if len(vec.values) != dim:
        raise ValueError(f"query vector has {len(vec.values)} dimensions, model {model_key} has {dim}")
    rows_in_scope = _scope_rows(plan, group)
    knobs = plan.knobs
    ef = int(knobs["RETRIEVAL_HNSW_EF_SEARCH"])
    fetch = max(n, int(knobs["RETRIEVAL_HNSW_FETCH"]))
    vplan = VectorPlan("exact")
    if rows_in_scope > knobs["RETRIEVAL_EXACT_MAX_ROWS"]:
        vplan = choose_vector_plan(rows_in_scope, plan.tenant_id, _department_parts(plan, group, rows_in_scope),
                                   _hnsw_indexes(model_key, using), ef, fetch, n, knobs=knobs)
    if vplan.kind != "exact":
        rows = _vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=ef, prefetched=prefetched, vplan=vplan)
        if len(rows) >= min(n, rows_in_scope):
            return rows, vplan.label(ef)
        # Too few in-scope rows met during the scan (scope smaller than its stored count said, or
        # max_scan_tuples reached): the exact scan always returns every row there is.
        return (_vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=None, prefetched=prefetched),
                f"exact(after hnsw ef={ef})")
    return _vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=None, prefetched=prefetched), "exact"


def _vector_sql(plan: SearchPlan, model_key: str, group: list[PlannedCorpus], vec: QueryVector, n: int, using: str,
                hnsw_ef: int | None, prefetched: dict[int, tuple] | None = None,
                vplan: VectorPlan | None = None) -> list[tuple[int, float]]:
    typ = vec.cast
    corpus_ids = [c.id for c in group]  # only this model's corpora, and only rows embedded with it
    dist = f"(c.embedding::{typ}) <=> %s::{typ}"
    qlit = vec.literal  # one parameter however often the statement names it
    # The model key is inlined (validated by MODEL_KEY) so the partial index predicate is provable
    # and each model and path has its own statement text (its own prepared plan, made under the
    # SETs below). The tenant id is inlined too (an int from the scope, also bound as a parameter)
    # so a tenant's or department's own index is provable.
    model_pred = f"c.embedding_model = '{model_key}' AND c.tenant_id = {int(plan.tenant_id)}"

    def exact(where: str) -> str:
        # The distance is computed once per row in a subquery the planner keeps (OFFSET 0); an
        # ORDER BY outside it cannot use the HNSW index: an exact, filter-first scan. Ties (equal
        # distances) are cut by id, as the keyword side's are: the same rows give the same list.
        return (f"SELECT id, score FROM (SELECT c.id, {dist} AS score FROM kb_chunk c WHERE {where} AND {model_pred} "
                f"OFFSET 0) e ORDER BY score, id LIMIT %s")

    if hnsw_ef is None or vplan is None:
        where, params = plan.where("c", corpus_ids=corpus_ids)
        ranking = "SELECT /* exact */ * FROM (" + exact(where) + ") ranked"
        rparams = [qlit, *params, n]
        return plan.tx.rank(ranking, rparams, "ASC", prefetched)
    # Relaxed order: take `fetch` in-scope rows from the iterative index scan, keep the n nearest.
    # "+ 0": the planner would otherwise take the index's (only roughly sorted) order as sorted.
    fetch = max(n, int(plan.knobs["RETRIEVAL_HNSW_FETCH"]))
    if vplan.kind == "index":
        where, params = plan.where("c", corpus_ids=corpus_ids)
        inner = (f"SELECT c.id, {dist} AS score FROM kb_chunk c WHERE {where} AND {model_pred} "
                 f"ORDER BY {dist} LIMIT %s")
        rparams = [qlit, *params, qlit, fetch]
    else:
        # One arm per department: on the department's own index (provable from the inlined
        # department id), or exact for a department without one; the arms' union is the scope.
        where, params = plan.where("c", corpus_ids=corpus_ids, departments=False)
        arms, rparams = [], []
        for dept, ix, take in vplan.parts:
            dpred = "c.department_id IS NULL" if dept is None else f"c.department_id = {int(dept)}"
            if ix is None:
                arms.append(f"({exact(f'{where} AND {dpred}')})")
                rparams += [qlit, *params, take]
            else:
                arms.append(f"(SELECT c.id, {dist} AS score FROM kb_chunk c WHERE {where} AND {model_pred} AND {dpred} "
                            f"ORDER BY {dist} LIMIT %s)")
                rparams += [qlit, *params, qlit, take]
        inner = " UNION ALL ".join(arms)
    ranking = f"SELECT /* hnsw {vplan.kind} */ * FROM ({inner}) relaxed ORDER BY score + 0 LIMIT %s"
    rparams.append(n)
    max_tuples = int(plan.knobs["RETRIEVAL_HNSW_MAX_SCAN_TUPLES"])
    # The index scan is forced (never left to the planner) and configured with SET LOCAL: in a
    # script of its own that ends with the script; inside a caller's transaction it would last
    # to its end, so the defaults are put back in the same round trip. (A failure aborts the
    # transaction, which undoes the SETs anyway.)
    before = (f"SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {int(hnsw_ef)}; "
              f"SET LOCAL hnsw.max_scan_tuples = {max_tuples}; SET LOCAL enable_seqscan = off; "
              f"SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; ")
    after = ""
    if plan.tx.nested:
        after = ("; SET LOCAL hnsw.iterative_scan TO DEFAULT; SET LOCAL hnsw.ef_search TO DEFAULT; "
                 "SET LOCAL hnsw.max_scan_tuples TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT; "
                 "SET LOCAL enable_bitmapscan TO DEFAULT; SET LOCAL enable_sort TO DEFAULT")
    return plan.tx.rank(ranking, rparams, "ASC", prefetched, before=before, after=after)

