"""The one scoped entry point for searching chunks.

Contract (other modules rely on it): `search(scope, query, k=..., mode=..., filters=...)` returns a
`SearchResult`. The scope comes from the authenticated caller; `filters` can only narrow it. A filter
naming something outside the scope yields no hits (never an error that reveals existence).

How a search runs (docs/retrieval.md has the measurements behind each choice):

1. Resolve the effective filter under RLS for the scope's tenant (set by every statement script:
   see _TenantTx), in one round trip: visible corpora (tenant, departments, requested corpus ids),
   the documents matching document-level filters (ids, metadata, dates) and the query's lexemes.
   The scope's size per embedding model comes from the stored chunk counts of those
   corpora/documents, never from a count(*) over chunks.
2. Vector: the query is embedded once per model key in scope; each model is searched on its own
   rows only. Small scopes are scanned exactly (pgvector filters after the index scan, so a
   selective filter would starve it); large ones use the cheapest covering HNSW index (the
   model's, the tenant's own, or one arm per department on the departments' own indexes:
   kb.vector_index scope indexes) with iterative relaxed-order scanning, re-sorted, and fall back
   to exact when short of k.
3. Keyword: BM25 computed in SQL over the GIN candidates of an OR tsquery of the rarest lexemes
   (at most 10% of the chunks and 1,000 by document frequency), with per-corpus document
   frequencies from ts_stat (cached) and per-term frequencies via ts_rank_cd. The GIN index is
   usable under RLS only because migration kb 0003 marks ts_match_vq LEAKPROOF.
4. Hybrid: weighted reciprocal rank fusion of the two lists. Optional MMR diversification.
5. Optional sentence re-rank (`rerank=True`, corpora with sentence vectors): the candidates' rank
   fused with their ranks by best-matching sentences, by vector and by the query terms one
   sentence holds (kb.sentences), one more round trip.

Raw SQL lives here only; the tenant id in every statement is a parameter taken from the scope.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from django.conf import settings
from django.db import DatabaseError, connections, transaction

from kb import parallel
from tenants.scope import Scope

Mode = Literal["vector", "keyword", "hybrid"]


@dataclass(frozen=True)
class SearchFilters:
    """Narrowing filters. None means "no narrowing" for that dimension."""

    corpus_ids: tuple[int, ...] | None = None
    document_ids: tuple[int, ...] | None = None
    # Only chunks of these departments (intersected with the scope). Tenant-wide chunks (no
    # department) are excluded unless include_tenant_wide is set.
    department_ids: tuple[int, ...] | None = None
    # Equality on Document.metadata keys; a list value means "any of these" (one publisher may have
    # several source names).
    metadata: dict[str, str | int | float | bool | list | tuple] | None = None
    published_after: str | None = None  # ISO date/datetime on Document.metadata["published_at"], inclusive
    published_before: str | None = None  # exclusive
    include_tenant_wide: bool = False


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    document_id: int
    corpus_id: int
    corpus_name: str
    document_title: str
    locator: str
    page: int | None
    ordinal: int
    text: str
    content_hash: str
    score: float
    metadata: dict = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    distance: float | None = None  # cosine distance when the hit came from the vector side
    keyword_score: float | None = None  # BM25 score when it came from the keyword side
    embedding_model: str = ""


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    applied_filter: dict  # the effective filter actually applied (scope ∩ narrowing), for the trace
    path: str = ""  # e.g. "exact", "hnsw(ef=100)", "keyword", "hybrid"
    timings_ms: dict = field(default_factory=dict)


# --- Tunables (measured: docs/retrieval.md; each may be overridden in Django settings) ----------
DEFAULTS = {
    # Scopes up to this many rows (per model) are always scanned exactly.
    "RETRIEVAL_EXACT_MAX_ROWS": 4000,
    # Above it, HNSW is used when its expected work is smaller: it visits about
    # ef_search + fetch / selectivity index tuples (selectivity = scope rows / rows in the model's
    # index), each costing about HNSW_TUPLE_COST exact-scan rows.
    "RETRIEVAL_HNSW_TUPLE_COST": 10.0,
    "RETRIEVAL_HNSW_EF_SEARCH": 40,
    "RETRIEVAL_HNSW_FETCH": 40,  # in-scope rows taken from the relaxed-order scan before re-sorting
    "RETRIEVAL_HNSW_MAX_SCAN_TUPLES": 40000,
    # Use the per-tenant / per-department partial HNSW indexes kb.vector_index builds for large scopes.
    "RETRIEVAL_SCOPE_INDEXES": True,
    # Reciprocal rank fusion: score = sum(weight / (RRF_K + rank)).
    "RETRIEVAL_RRF_K": 60,
    "RETRIEVAL_KEYWORD_WEIGHT": 1.0,
    "RETRIEVAL_VECTOR_WEIGHT": 0.1,
    # How many candidates each side contributes to fusion / MMR.
    "RETRIEVAL_CANDIDATES": 50,
    # Keyword candidates come from the rarest query lexemes covering at most this share of the
    # chunks (1 = every lexeme: exact BM25 top-n, no cap either)
    "RETRIEVAL_BM25_CANDIDATE_SHARE": 0.1,
    # ... and at most this many chunks (estimated from document frequencies): the cost of keyword
    # search is per candidate (heap row + tsvector), so large corpora need an absolute cap too.
    "RETRIEVAL_BM25_MAX_CANDIDATES": 1000,
    "RETRIEVAL_BM25_K1": 1.2,
    "RETRIEVAL_BM25_B": 0.75,
    "RETRIEVAL_TERM_STATS_TTL_S": 300,
    # Run the ranking and hit-row statements as prepared statements of the connection (generic
    # plans, no planning per search). Off behind a transaction-pooling proxy (PgBouncer
    # pool_mode=transaction), where a session's prepared statements are not its own.
    "RETRIEVAL_PREPARED_STATEMENTS": True,
    # A hybrid search outside the caller's transaction runs BM25 on a side connection while the
    # vector query runs on its own (kb.parallel): this many worker threads (and connections) per
    # process; 0 runs the two one after the other.
    "RETRIEVAL_PARALLEL_WORKERS": 2,
}


def _setting(name: str):
    return getattr(settings, name, DEFAULTS[name])


log = logging.getLogger(__name__)

MAX_K = 200
MAX_ARMS = 8  # a scope of more departments is not split into per-department arms (planning grows per arm)
MAX_QUERY_TERMS = 32
_MODEL_KEY = re.compile(r"^[A-Za-z0-9._/-]+:[0-9]+$")


# --- Public entry point -------------------------------------------------------------------------

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
    k = max(1, min(int(k), MAX_K))
    filters = filters or SearchFilters()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    wants_lexemes = mode in ("keyword", "hybrid")
    sentence_query = " ".join((rerank_query or "").split()) or query
    # The re-rank's lexical side needs the sentence query's lexemes: those of the query when they
    # are the same text and already resolved, else resolved in the same round trip.
    own_rerank_lexemes = rerank and not (wants_lexemes and sentence_query == query)
    with _tenant_transaction(scope, using) as tx:
        plan, lexemes, rerank_lexemes = _resolve(scope, filters, using, tx, query if wants_lexemes else None,
                                                 sentence_query if own_rerank_lexemes else None)
        if rerank and not own_rerank_lexemes:
            rerank_lexemes = lexemes
        timings["resolve"] = _ms(t0)
        by_sentences = rerank and any(c.sentences for c in plan.corpora.values())
        reranks = mmr_lambda is not None or by_sentences
        pool = max(k, _setting("RETRIEVAL_CANDIDATES")) if (mode == "hybrid" or reranks) else k
        vector_lists: list[list[tuple[int, float]]] = []
        keyword_list: list[tuple[int, float]] = []
        paths: list[str] = []
        # One list and no re-ranking after it: the ranking query returns the hit rows itself
        # (one round trip less); otherwise only the winners are loaded afterwards (measured: hit
        # rows for both hybrid lists, 2 x 50, cost more than loading the top k in a round trip).
        single = mmr_lambda is None and (mode == "keyword" or (mode == "vector" and len(plan.by_model) == 1))
        prefetched: dict[int, tuple] | None = {} if single else None
        side = None  # hybrid outside the caller's transaction: BM25 on a side connection, at the same time
        if mode == "hybrid" and not plan.empty and not tx.nested and _setting("RETRIEVAL_PARALLEL_WORKERS") > 0:
            side = parallel.submit(_keyword_on_side_connection, plan, lexemes, pool, using, using=using,
                                   workers=int(_setting("RETRIEVAL_PARALLEL_WORKERS")))
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
        timings["hydrate"] = _ms(t)
    timings["total"] = _ms(t0)
    applied = plan.applied(mode=mode, k=k, max_distance=max_distance, mmr_lambda=mmr_lambda, rerank=by_sentences)
    applied["path"] = paths
    if by_sentences and sentence_query != query:
        applied["rerank_query"] = sentence_query
    return SearchResult(hits=[h for h, _ in hits][:k], applied_filter=applied, path=";".join(paths) or "empty",
                        timings_ms=timings)


def _keyword_on_side_connection(plan: _Plan, lexemes: list[str], n: int, using: str) -> tuple[tuple[list, str], float]:
    """BM25 for `plan` on this worker thread's own connection (kb.parallel); its statements set
    the scope's RLS tenant first, like the caller's."""
    t = time.perf_counter()
    own = dataclasses.replace(plan, tx=_TenantTx(plan.tenant_id, nested=False, using=using))
    return _keyword_search(own, lexemes, n, using, None), _ms(t)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


# --- Effective filter ---------------------------------------------------------------------------

@dataclass
class _Corpus:
    id: int
    name: str
    model_key: str
    dim: int
    chunk_count: int
    department_id: int | None = None
    sentences: bool = False  # stores sentence vectors (kb.sentences)


@dataclass
class _Plan:
    """The effective filter: scope ∩ narrowing, resolved to ids the chunk queries use."""

    tenant_id: int
    department_ids: tuple[int, ...] | None  # None: every department
    include_tenant_wide: bool
    corpora: dict[int, _Corpus]
    document_ids: tuple[int, ...] | None  # None: no document-level narrowing
    doc_rows: int | None  # stored chunk count of those documents
    filters: SearchFilters
    by_model: dict[str, list[_Corpus]] = field(default_factory=dict)
    tx: _TenantTx | None = None  # runs this search's statements under the scope's RLS tenant

    @property
    def empty(self) -> bool:
        return not self.corpora or (self.document_ids is not None and not self.document_ids) or (
            self.department_ids is not None and not self.department_ids and not self.include_tenant_wide)

    def where(self, alias: str = "c", *, corpus_ids: Sequence[int] | None = None,
              departments: bool = True, documents: bool = True) -> tuple[str, list]:
        """The chunk predicate: tenant, corpora (default: all visible), departments, documents.

        The tenant id is a parameter. `departments=False` leaves the department condition to the
        caller (per-department arms of a vector search).
        """
        sql = [f"{alias}.tenant_id = %s", f"{alias}.corpus_id = ANY(%s)"]
        params: list = [self.tenant_id, list(self.corpora) if corpus_ids is None else list(corpus_ids)]
        if self.department_ids is not None and departments:
            if self.include_tenant_wide:
                sql.append(f"({alias}.department_id IS NULL OR {alias}.department_id = ANY(%s))")
            else:
                sql.append(f"{alias}.department_id = ANY(%s)")
            params.append(list(self.department_ids))
        if self.document_ids is not None and documents:
            sql.append(f"{alias}.document_id = ANY(%s)")
            params.append(list(self.document_ids))
        return " AND ".join(sql), params

    def applied(self, **extra) -> dict:
        f = self.filters
        out = {
            "tenant_id": self.tenant_id,
            "department_ids": "all" if self.department_ids is None else sorted(self.department_ids),
            "tenant_wide_included": self.include_tenant_wide,
            "corpus_ids": sorted(self.corpora),
            "model_keys": sorted(self.by_model),
            "document_ids": None if f.document_ids is None else sorted(set(f.document_ids) & set(self.document_ids or ())),
            "metadata": dict(f.metadata) if f.metadata else None,
            "published_after": f.published_after,
            "published_before": f.published_before,
            "documents_matched": None if self.document_ids is None else len(self.document_ids),
        }
        out.update(extra)
        return out


class _TenantTx:
    """The RLS tenant of one search: every statement script it runs sets it first (see query)."""

    def __init__(self, tenant_id: int, nested: bool, using: str) -> None:
        self.tenant = str(int(tenant_id))
        self.nested = nested
        self.using = using
        self.previous: str | None = None  # the enclosing transaction's tenant (nested only), read by the first script

    def query(self, sql: str, params: Sequence = ()) -> list[list[tuple]]:
        """Run `sql` (one or more statements) in one round trip, the scope's tenant set first.

        Outside a transaction the script is its own implicit transaction (a multi-statement simple
        query), so set_config(..., true) and SET LOCAL last exactly as long as it; inside the
        caller's transaction they last to its end and search() restores the tenant.
        """
        head = "SELECT set_config('app.tenant_id', %s, true); "
        if self.nested and self.previous is None:
            head = "SELECT current_setting('app.tenant_id', true); " + head
        with connections[self.using].cursor() as cur:
            results = _run_script_all(cur, head + sql, [self.tenant, *params])
        if self.nested and self.previous is None:
            self.previous = results.pop(0)[0][0] or ""
        return results[1:]

    def query_prepared(self, sql: str, params: Sequence, before: str = "", after: str = "",
                       retry: bool = True) -> list[tuple]:
        """The rows of one statement, run as a prepared statement of this connection with a generic plan.

        Measured: planning the ranking statements cost 0.2-0.6 ms per search, more than executing
        the vector one at 50k rows (docs/retrieval.md). `sql` uses %s placeholders; equal
        _Shared parameters (the query vector literal) become one, so the vector is sent and
        parsed once. The statement is named by a hash of its text (which inlines the model key and,
        for vector statements, the tenant id) and prepared in the same script the first time this
        connection runs it. `before` (SET LOCALs) runs ahead of it: the generic plan is made on
        the first execution, under them; `after` follows it. Every parameter, the tenant's
        included, travels with each execution; nothing about the scope is cached but the plan.
        """
        conn = connections[self.using]
        conn.ensure_connection()
        if not _setting("RETRIEVAL_PREPARED_STATEMENTS") or getattr(conn.connection, "prepare_threshold", None) is not None:
            # Switched off, or psycopg prepares statements itself and may DEALLOCATE ALL (ours too).
            return self.query(f"{before}{sql}{after}", [str(p) if isinstance(p, _Shared) else p for p in params])[0]
        text, args = _numbered(sql, params)
        state = _prepared_state(conn.connection)
        name = f"kb_{state.generation}_{hashlib.blake2b(text.encode(), digest_size=8).hexdigest()}"
        head = ""
        if name in state.names:
            state.names.move_to_end(name)
        else:
            while len(state.names) >= _PREPARED_MAX:
                head += f"DEALLOCATE {state.names.popitem(last=False)[0]}; "
            head += f"PREPARE {name} AS {text.replace('%', '%%')}; "
        script = (f"{before}SET LOCAL plan_cache_mode = force_generic_plan; {head}"
                  f"EXECUTE {name}({', '.join(['%s'] * len(args))}){after}")
        if self.nested:
            script += "; SET LOCAL plan_cache_mode TO DEFAULT"
        try:
            rows = self.query(script, args)[0]
        except DatabaseError as exc:
            # The session's statements are unknown now (a PREPARE outlives a failed script, and
            # a DISCARD ALL elsewhere drops them): new names from here on.
            state.generation += 1
            state.names.clear()
            if self.nested or not retry or getattr(exc.__cause__, "sqlstate", None) != "26000":
                raise
            return self.query_prepared(sql, params, before, after, retry=False)  # autocommit: nothing to undo
        state.names[name] = None
        return rows


_PREPARED_MAX = 128  # prepared statements kept per connection (least recently used ones are deallocated)


@dataclass
class _PreparedState:
    generation: int = 0
    names: OrderedDict[str, None] = field(default_factory=OrderedDict)


_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # raw connection -> _PreparedState
_prepared_generation = [0]


def _prepared_state(raw) -> _PreparedState:
    """The statements this process prepared on `raw` (a new connection starts empty)."""
    state = _prepared.get(raw)
    if state is None:
        _prepared_generation[0] += 1
        state = _prepared[raw] = _PreparedState(generation=_prepared_generation[0])
    return state


class _Shared(str):
    """A statement parameter passed once however often the statement names it (the query vector)."""


def _numbered(sql: str, params: Sequence) -> tuple[str, list]:
    """`sql` with %s placeholders as $1..$n, equal _Shared parameters sharing one number."""
    args: list = []
    seen: dict[str, int] = {}
    values = iter(params)

    def number(_: re.Match) -> str:
        value = next(values)
        if isinstance(value, _Shared):
            if value in seen:
                return f"${seen[value]}"
            seen[value] = len(args) + 1
            value = str(value)
        args.append(value)
        return f"${len(args)}"

    return re.sub(r"%s", number, sql), args


@contextlib.contextmanager
def _tenant_transaction(scope: Scope, using: str) -> Iterator[_TenantTx]:
    """What tenants.scope.activate gives (RLS for the scope's tenant), without its round trips.

    Outside a transaction: no transaction of its own (no BEGIN, COMMIT or restore); each script
    of statements sets the tenant and is atomic by itself (READ COMMITTED takes a snapshot per
    statement anyway). Inside the caller's transaction: a savepoint, and the caller's tenant is
    put back on success unless it was this one already; on error the savepoint rollback restores it.
    """
    conn = connections[using]
    if not conn.in_atomic_block and conn.get_autocommit():
        yield _TenantTx(scope.tenant_id, nested=False, using=using)
        return
    with transaction.atomic(using=using):
        tx = _TenantTx(scope.tenant_id, nested=True, using=using)
        yield tx
        if tx.previous is not None and tx.previous != tx.tenant and not conn.needs_rollback:
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('app.tenant_id', %s, true)", [tx.previous])


def _resolve(scope: Scope, f: SearchFilters, using: str, tx: _TenantTx, query: str | None = None,
             rerank_query: str | None = None) -> tuple[_Plan, list[str], list[str]]:
    """Intersect the scope with the filters; also the lexemes of `query` and of `rerank_query`
    when given (empty lists otherwise).

    One round trip: the RLS tenant, the visible corpora, the documents matching document-level
    filters (counted, with their stored chunk counts: the scope's exact size) and the lexemes
    travel as one script.
    """
    narrowed = scope.narrowed(f.department_ids)
    if narrowed.all_departments:
        depts: tuple[int, ...] | None = None
        tenant_wide = True
    else:
        depts = tuple(sorted(narrowed.department_ids))
        tenant_wide = f.department_ids is None or f.include_tenant_wide
    cwhere = "tenant_id = %s"
    cparams: list = [scope.tenant_id]
    if depts is not None:
        cwhere += " AND (department_id IS NULL OR department_id = ANY(%s))"
        cparams.append(list(depts))
    if f.corpus_ids is not None:
        cwhere += " AND id = ANY(%s)"
        cparams.append([int(c) for c in f.corpus_ids])
    statements: list[str] = []
    params: list = []
    statements.append(f"SELECT id, name, embedding_model, embedding_dim, chunk_count, department_id, sentence_vectors FROM kb_corpus "
                      f"WHERE {cwhere}")
    params += cparams
    doc_level = f.document_ids is not None or f.metadata or f.published_after or f.published_before
    if doc_level:
        dsql, dparams = _documents_sql(f, depts, tenant_wide, cwhere, cparams, scope.tenant_id)
        statements.append(dsql)
        params += dparams
    for text in (query, rerank_query):
        if text is not None:
            statements.append("SELECT lexeme FROM unnest(to_tsvector('english', %s))")
            params.append(text[:4000])
    results = tx.query("; ".join(statements), params)
    corpora = {r[0]: _Corpus(r[0], r[1], f"{r[2]}:{r[3]}", r[3], r[4], r[5], r[6]) for r in results.pop(0)}
    plan = _Plan(scope.tenant_id, depts, tenant_wide, corpora, None, None, f, tx=tx)
    if doc_level:
        docs = results.pop(0)
        if corpora:
            plan.document_ids = tuple(r[0] for r in docs)
            plan.doc_rows = sum(r[1] or 0 for r in docs)
    lexemes = [r[0] for r in results.pop(0)][:MAX_QUERY_TERMS] if query is not None else []
    rerank_lexemes = [r[0] for r in results.pop(0)][:MAX_QUERY_TERMS] if rerank_query is not None else []
    for c in corpora.values():
        if _MODEL_KEY.match(c.model_key):
            plan.by_model.setdefault(c.model_key, []).append(c)
    return plan, lexemes, rerank_lexemes


def _documents_sql(f: SearchFilters, depts: tuple[int, ...] | None, tenant_wide: bool, cwhere: str, cparams: list,
                   tenant_id: int) -> tuple[str, list]:
    """Documents of the visible corpora matching the document-level filters: (id, chunk_count) rows."""
    sql = [f"SELECT id, chunk_count FROM kb_document d WHERE d.tenant_id = %s "
           f"AND d.corpus_id IN (SELECT id FROM kb_corpus WHERE {cwhere})"]
    params: list = [tenant_id, *cparams]
    if depts is not None:
        sql.append("AND (d.department_id = ANY(%s)" + (" OR d.department_id IS NULL)" if tenant_wide else ")"))
        params.append(list(depts))
    if f.document_ids is not None:
        sql.append("AND d.id = ANY(%s)")
        params.append([int(d) for d in f.document_ids])
    if f.metadata:
        scalars = {key: v for key, v in f.metadata.items() if not isinstance(v, list | tuple)}
        if scalars:
            sql.append("AND d.metadata @> %s::jsonb")
            params.append(json.dumps(scalars))
        for key, values in f.metadata.items():
            if isinstance(values, list | tuple):  # any of these values; an empty list matches nothing
                sql.append("AND d.metadata @> ANY(%s::jsonb[])")
                params.append([json.dumps({key: v}) for v in values])
    published = ("CASE WHEN pg_input_is_valid(d.metadata->>'published_at', 'timestamptz') "
                 "THEN (d.metadata->>'published_at')::timestamptz END")
    if f.published_after:
        sql.append(f"AND {published} >= %s::timestamptz")
        params.append(f.published_after)
    if f.published_before:
        sql.append(f"AND {published} < %s::timestamptz")
        params.append(f.published_before)
    return " ".join(sql), params


# --- Vector side --------------------------------------------------------------------------------

_qvec_cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_qvec_lock = threading.Lock()


def _query_vector(model_key: str, query: str, given: Mapping[str, Sequence[float]] | None) -> list[float]:
    """The query embedded with `model_key` (the corpus's own model), cached per process."""
    if given and model_key in given:
        return [float(x) for x in given[model_key]]
    key = (model_key, query)
    with _qvec_lock:
        if key in _qvec_cache:
            _qvec_cache.move_to_end(key)
            return _qvec_cache[key]
    from kb.embedding import embed_windowed, get_embedder

    # A query longer than the model's window is embedded whole (the mean of its windows), not cut
    # to the window's worth of words the model would silently keep.
    vec = [float(x) for x in embed_windowed(get_embedder(model_key), [query], "query")[0]]
    with _qvec_lock:
        _qvec_cache[key] = vec
        while len(_qvec_cache) > 512:
            _qvec_cache.popitem(last=False)
    return vec


def _cast_type(dim: int) -> str:
    """vector(d) up to 2,000 dimensions, halfvec(d) above: must match kb.vector_index's index expression."""
    return f"vector({int(dim)})" if dim <= 2000 else f"halfvec({int(dim)})"


_vec_templates: dict[int, str] = {}


def _vec_literal(vec: Sequence[float]) -> str:
    """'[x1,...,xn]' with 8 significant digits; one %-format of a cached template (a third faster
    than formatting element by element)."""
    n = len(vec)
    template = _vec_templates.get(n)
    if template is None:
        template = _vec_templates[n] = "[" + ",".join(["%.8g"] * n) + "]"
    return template % tuple(map(float, vec))


def scope_rows(plan: _Plan, group: list[_Corpus]) -> int:
    """Rows the vector query may visit, from stored counts (an upper bound when departments narrow)."""
    if plan.doc_rows is not None:
        return plan.doc_rows
    return sum(c.chunk_count for c in group)


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
                       indexes: Sequence[HnswIndex], ef: int, fetch: int, n: int) -> VectorPlan:
    """The path choice, per query, from the scope's size and the indexes that cover it.

    Scopes up to RETRIEVAL_EXACT_MAX_ROWS are scanned exactly. Otherwise every index that covers
    the scope is priced in visited tuples (ef + fetch / selectivity: pgvector filters after the
    index, each visit a heap check): the model's index, the tenant's scope index, and, for a scope
    of explicit departments (`department_parts`: department or None for tenant-wide rows -> rows
    in scope), one arm per department on its own index (unfiltered: ef + n) or, without one, an
    exact arm over its rows. The cheapest wins if its visits times RETRIEVAL_HNSW_TUPLE_COST are
    below the rows an exact scan reads.
    """
    exact = VectorPlan("exact")
    if rows_in_scope <= _setting("RETRIEVAL_EXACT_MAX_ROWS"):
        return exact
    options: list[VectorPlan] = []
    if not _setting("RETRIEVAL_SCOPE_INDEXES"):
        indexes = [ix for ix in indexes if ix.tenant_id is None]
    for ix in indexes:
        if ix.tenant_id is None or (ix.tenant_id == tenant_id and ix.department == "all"):
            options.append(VectorPlan("index", index=ix, visits=_scan_visits(rows_in_scope, ix.rows, ef, fetch)))
    if department_parts and len(department_parts) <= MAX_ARMS:
        own = {ix.department: ix for ix in indexes if ix.tenant_id == tenant_id and ix.department != "all"}
        parts, visits, exact_rows = [], 0.0, 0.0
        for dept, rows in sorted(department_parts.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)):
            ix = own.get(dept)
            if ix is not None and rows > 0:
                # Stored counts and reltuples are estimates: within 10% the arm is taken as unfiltered.
                take = n if rows >= 0.9 * ix.rows else max(n, fetch)
                visits += _scan_visits(rows, ix.rows, ef, take)
                parts.append((dept, ix, take))
            else:
                exact_rows += rows
                parts.append((dept, None, n))
        if any(ix is not None for _, ix, _ in parts):
            options.append(VectorPlan("parts", parts=tuple(parts), visits=visits + exact_rows / _tuple_cost()))
    if not options:
        return exact
    best = min(options, key=lambda o: o.visits)
    return best if best.visits * _tuple_cost() < rows_in_scope else exact


def _tuple_cost() -> float:
    return max(float(_setting("RETRIEVAL_HNSW_TUPLE_COST")), 1e-9)


def use_hnsw(rows_in_scope: int, index_rows: int | None, ef: int, fetch: int) -> bool:
    """The path choice with only the model's index: see choose_vector_plan."""
    indexes = [HnswIndex(None, "all", index_rows)] if index_rows else []
    return choose_vector_plan(rows_in_scope, 0, None, indexes, ef, fetch, fetch).kind != "exact"


def _department_parts(plan: _Plan, group: list[_Corpus], rows_in_scope: int) -> dict[int | None, int] | None:
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


def _vector_search(plan: _Plan, model_key: str, group: list[_Corpus], vec: Sequence[float], n: int,
                   using: str, prefetched: dict[int, tuple] | None = None) -> tuple[list[tuple[int, float]], str]:
    """Nearest `n` chunks of one model: [(chunk id, cosine distance)], nearest first, and the path used."""
    if not _MODEL_KEY.match(model_key):
        return [], "skipped"
    dim = group[0].dim
    if len(vec) != dim:
        raise ValueError(f"query vector has {len(vec)} dimensions, model {model_key} has {dim}")
    rows_in_scope = scope_rows(plan, group)
    ef = int(_setting("RETRIEVAL_HNSW_EF_SEARCH"))
    fetch = max(n, int(_setting("RETRIEVAL_HNSW_FETCH")))
    vplan = VectorPlan("exact")
    if rows_in_scope > _setting("RETRIEVAL_EXACT_MAX_ROWS"):
        vplan = choose_vector_plan(rows_in_scope, plan.tenant_id, _department_parts(plan, group, rows_in_scope),
                                   _hnsw_indexes(model_key, using), ef, fetch, n)
    if vplan.kind != "exact":
        rows = _vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=ef, prefetched=prefetched, vplan=vplan)
        if len(rows) >= min(n, rows_in_scope):
            return rows, vplan.label(ef)
        # Too few in-scope rows met during the scan (scope smaller than its stored count said, or
        # max_scan_tuples reached): the exact scan always returns every row there is.
        return (_vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=None, prefetched=prefetched),
                f"exact(after hnsw ef={ef})")
    return _vector_sql(plan, model_key, group, vec, n, using, hnsw_ef=None, prefetched=prefetched), "exact"


def _vector_sql(plan: _Plan, model_key: str, group: list[_Corpus], vec: Sequence[float], n: int, using: str,
                hnsw_ef: int | None, prefetched: dict[int, tuple] | None = None,
                vplan: VectorPlan | None = None) -> list[tuple[int, float]]:
    typ = _cast_type(group[0].dim)
    corpus_ids = [c.id for c in group]  # only this model's corpora, and only rows embedded with it
    dist = f"(c.embedding::{typ}) <=> %s::{typ}"
    qlit = _Shared(_vec_literal(vec))  # one parameter however often the statement names it
    # The model key is inlined (validated by _MODEL_KEY) so the partial index predicate is provable
    # and each model and path has its own statement text (its own prepared plan, made under the
    # SETs below). The tenant id is inlined too (an int from the scope, also bound as a parameter)
    # so a tenant's or department's own index is provable.
    model_pred = f"c.embedding_model = '{model_key}' AND c.tenant_id = {int(plan.tenant_id)}"

    def exact(where: str) -> str:
        # The distance is computed once per row in a subquery the planner keeps (OFFSET 0); an
        # ORDER BY outside it cannot use the HNSW index: an exact, filter-first scan.
        return (f"SELECT id, score FROM (SELECT c.id, {dist} AS score FROM kb_chunk c WHERE {where} AND {model_pred} "
                f"OFFSET 0) e ORDER BY score LIMIT %s")

    if hnsw_ef is None or vplan is None:
        where, params = plan.where("c", corpus_ids=corpus_ids)
        ranking = "SELECT /* exact */ * FROM (" + exact(where) + ") ranked"
        rparams = [qlit, *params, n]
        sql, sparams = _with_hits(ranking, rparams, n, "ASC") if prefetched is not None else (ranking, rparams)
        return _collect(plan.tx.query_prepared(sql, sparams), prefetched)
    # Relaxed order: take `fetch` in-scope rows from the iterative index scan, keep the n nearest.
    # "+ 0": the planner would otherwise take the index's (only roughly sorted) order as sorted.
    fetch = max(n, int(_setting("RETRIEVAL_HNSW_FETCH")))
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
    sql, sparams = _with_hits(ranking, rparams, n, "ASC") if prefetched is not None else (ranking, rparams)
    max_tuples = int(_setting("RETRIEVAL_HNSW_MAX_SCAN_TUPLES"))
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
    return _collect(plan.tx.query_prepared(sql, sparams, before, after), prefetched)


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


def _run_script_all(cur, sql: str, params: list) -> list[list[tuple]]:
    """Execute several statements in one round trip (client-side binding); the rows of each that returns rows."""
    cur.execute(sql, params)
    raw = getattr(cur, "cursor", cur)
    out: list[list[tuple]] = []
    while True:
        if raw.description is not None:
            out.append(raw.fetchall())
        if not raw.nextset():
            break
    return out


# --- Keyword side (BM25 in SQL) -----------------------------------------------------------------

@dataclass
class _TermStats:
    n: int
    total_len: int
    df: dict[str, int]
    at: float


_stats_cache: dict[tuple[str, int], tuple[int, _TermStats]] = {}
_stats_lock = threading.Lock()


def _corpus_term_stats(corpus: _Corpus, plan: _Plan, using: str) -> _TermStats:
    """Document frequencies of one corpus's lexemes (ts_stat), cached per process by (corpus, chunk count).

    IDF is a corpus-level statistic, so one table per corpus serves every scope that sees it.
    """
    key = (connections[using].settings_dict["NAME"], corpus.id)
    ttl = _setting("RETRIEVAL_TERM_STATS_TTL_S")
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


def _keyword_search(plan: _Plan, lexemes: list[str], n: int, using: str,
                    prefetched: dict[int, tuple] | None = None) -> tuple[list[tuple[int, float]], str]:
    """Top `n` chunks by BM25: [(chunk id, score)], best first, and a label for the trace.

    Score: sum over query lexemes of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen)),
    with tf read from the tsvector by ts_rank_cd under unit weights (for a one-lexeme query it is
    exactly the occurrence count). Candidates: chunks containing one of the rarest query lexemes
    whose document frequencies add up to RETRIEVAL_BM25_CANDIDATE_SHARE of the chunks and at most
    RETRIEVAL_BM25_MAX_CANDIDATES (a chunk with
    only common words cannot outrank one with the rare ones in practice; measured in
    docs/retrieval.md); every lexeme still counts in the score. Fewer than n candidates: all lexemes.
    """
    if not lexemes:
        return [], "bm25(no terms)"
    stats = [_corpus_term_stats(c, plan, using) for c in plan.corpora.values()]
    n_docs = sum(s.n for s in stats)
    if n_docs == 0:
        return [], "bm25(empty)"
    avg_len = max(sum(s.total_len for s in stats) / n_docs, 1.0)
    k1, b = float(_setting("RETRIEVAL_BM25_K1")), float(_setting("RETRIEVAL_BM25_B"))
    terms: list[tuple[str, float, int]] = []
    for lex in lexemes:
        df = sum(s.df.get(lex, 0) for s in stats)
        if df:
            terms.append((lex, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)), df))
    if not terms:
        return [], "bm25(no match)"
    share = float(_setting("RETRIEVAL_BM25_CANDIDATE_SHARE"))
    limit = min(share * n_docs, float(_setting("RETRIEVAL_BM25_MAX_CANDIDATES") or math.inf)) if 0 < share < 1 else math.inf
    generators = _generators(terms, limit)
    rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    if len(rows) < n and len(generators) < len(terms) and plan.doc_rows is not None and limit < math.inf:
        # Document filters keep only part of the corpora's chunks, so the budget (counted in corpus
        # document frequencies) bought fewer in-scope candidates than it meant to: spend it again
        # in scope terms before falling back to every lexeme (unbounded: the p95 of filtered searches).
        in_scope = plan.doc_rows / max(sum(c.chunk_count for c in plan.corpora.values()), 1)
        wider = _generators(terms, limit / max(in_scope, 1e-3))
        if len(wider) > len(generators):
            generators = wider
            rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    if len(rows) < n and len(generators) < len(terms):
        generators = [t for t, _, _ in terms]
        rows = _bm25_sql(plan, terms, generators, avg_len, k1, b, n, using, prefetched)
    return rows, f"bm25(candidates from {len(generators)}/{len(terms)} terms)"


def _generators(terms: list[tuple[str, float, int]], limit: float) -> list[str]:
    """The rarest lexemes whose document frequencies add up to at most `limit` (at least one)."""
    generators: list[str] = []
    budget = 0
    for lex, _, df in sorted(terms, key=lambda t: t[2]):
        if generators and budget + df > limit:
            break
        generators.append(lex)
        budget += df
    return generators


def _bm25_sql(plan: _Plan, terms: list[tuple[str, float, int]], generators: list[str], avg_len: float, k1: float,
              b: float, n: int, using: str, prefetched: dict[int, tuple] | None) -> list[tuple[int, float]]:
    where, params = plan.where("c")
    # GIN candidates are the access path: the visible corpora are checked on each candidate row, not
    # ANDed in as a bitmap of every chunk of those corpora (the planner did that, 3 ms at 66k rows).
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
    if prefetched is not None:
        sql, sparams = _with_hits(sql, sparams, n, "DESC")
    # Planned per search, never prepared with a generic plan: the plan depends on the tsquery's
    # selectivity and the document filter's size, which a generic plan cannot see (measured at
    # 100k chunks: document-filtered keyword searches went from 5.7 to 70 ms p50 under one).
    return _collect(plan.tx.query(sql, sparams)[0], prefetched)


# --- Fusion, hydration, MMR ---------------------------------------------------------------------

def _rrf(lists: list[tuple[list[tuple[int, float]], float]], rrf_k: float) -> list[tuple[int, float]]:
    scores: dict[int, float] = {}
    for rows, weight in lists:
        for rank, (cid, _) in enumerate(rows, start=1):
            scores[cid] = scores.get(cid, 0.0) + weight / (rrf_k + rank)
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


def _hydrate(plan: _Plan, ranked: list[tuple[int, float]], vector_lists: list[list[tuple[int, float]]],
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


def _sentence_rerank(plan: _Plan, query: str, lexemes: list[str], items: list[tuple[SearchHit, list[float] | None]],
                     query_vectors: Mapping[str, Sequence[float]] | None, using: str) -> list[tuple[SearchHit, list[float] | None]]:
    """Fuse the candidates' rank with two ranks of their sentences (kb.sentences), one round trip:
    by similarity to the query (mean of the two nearest sentences) and by the query terms one
    sentence holds together (the best sentence's sum of BM25 idf over the query lexemes it has).

    Only among candidates of one embedding model (similarities of different models are not comparable).
    """
    from kb.sentences import TOP_SENTENCES, fuse

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


def _idf_weights(plan: _Plan, lexemes: list[str], using: str) -> dict[str, float]:
    """Lexeme -> BM25 idf over the plan's corpora (the keyword side's statistics, cached); lexemes
    no chunk holds are left out."""
    if not lexemes:
        return {}
    stats = [_corpus_term_stats(c, plan, using) for c in plan.corpora.values()]
    n_docs = sum(st.n for st in stats)
    out: dict[str, float] = {}
    for lex in dict.fromkeys(lexemes):
        df = sum(st.df.get(lex, 0) for st in stats)
        if df:
            out[lex] = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    return out


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
