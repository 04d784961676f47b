"""`search`: the one scoped entry point. It runs the three stages of a search in order, each a module
with one public entry, and times them:

1. query preparation (kb.retrieval.prepare): the effective filter, the query's lexemes and embeddings;
2. retrieval (kb.retrieval.retrieve): the vector and keyword rankings, fused into one list;
3. post-processing (kb.retrieval.postprocess): the winners' rows, the sentence re-rank, MMR.

It also holds what every stage uses while it runs, so that a search goes down through the stages and
never back into a module it left: the search's SearchPlan (the effective filter, its chunk predicate,
the tunables read once at the start), its statement runner (TenantStatements: scripts under the
scope's RLS tenant, prepared statements, ranking statements that return their hits' rows) and the
corpus rows this process remembers per scope (speculative plans, StalePlan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import DatabaseError, OperationalError, connections, transaction

from kb.retrieval.postprocess import postprocess
from kb.retrieval.prepare import PlannedCorpus, SharedParameter, prepare
from kb.retrieval.query import HIT_COLS, HIT_JOIN, Mode, SearchFilters, SearchResult
from kb.retrieval.retrieve import retrieve
from kb.retrieval.tunables import MAX_K, snapshot
from tenants.db_wall import tenant_statements
from tenants.replicas import PRIMARY, mark_unreachable, read_alias
from tenants.scope import Scope

T = TypeVar("T")
log = logging.getLogger(__name__)


def search(scope: Scope, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: SearchFilters | None = None,
           max_distance: float | None = None, mmr_lambda: float | None = None,
           query_vectors: Mapping[str, Sequence[float]] | None = None, rerank: bool = False,
           rerank_query: str | None = None, using: str | None = None) -> SearchResult:
    """Search the chunks `scope` may see. Must not be given a tenant id from anywhere but the scope.

    `using`: the database alias; None lets tenants.replicas.read_alias choose (the read replica when
    one is configured, caught up with the caller's own writes and the caller is not inside a
    transaction on "default"; else "default").

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
    chosen = using or read_alias(scope)
    knobs = snapshot()
    k, filters = max(1, min(int(k), MAX_K)), filters or SearchFilters()

    def run(alias: str) -> SearchResult:
        # A search that needs only the visible corpora (vector mode, no document-level filters)
        # resolves them in the same round trip as its first ranking statement when this process
        # has seen the scope before (kb.retrieval.prepare); if they changed meanwhile, it runs again.
        args = (scope, query, k, mode, filters, max_distance, mmr_lambda, query_vectors, rerank, rerank_query, alias, knobs)
        try:
            return _search(*args, speculate=bool(knobs["RETRIEVAL_REUSE_PLANS"]))
        except StalePlan:
            return _search(*args, speculate=False)

    try:
        return run(chosen)
    except OperationalError:
        if using is not None or chosen == PRIMARY:
            raise
        # The read replica failed under it (gone, or a query cancelled by a conflict with its recovery):
        # the primary answers, and this process reads there for a while (tenants.replicas).
        log.warning("search on the read replica failed; searching the primary", exc_info=True)
        mark_unreachable()
        return run(PRIMARY)


def _search(scope: Scope, query: str, k: int, mode: Mode, filters: SearchFilters, max_distance: float | None,
            mmr_lambda: float | None, query_vectors: Mapping[str, Sequence[float]] | None, rerank: bool,
            rerank_query: str | None, using: str, knobs: dict[str, Any], speculate: bool) -> SearchResult:
    """`search` with its arguments checked; `speculate` lets the plan come from the corpus rows this
    process saw for the scope (checked in the first script; StalePlan when they changed)."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    with _tenant_transaction(scope, using, prepared=bool(knobs["RETRIEVAL_PREPARED_STATEMENTS"])) as tx:
        p = prepare(scope, query, filters, mode=mode, rerank=rerank, rerank_query=rerank_query, query_vectors=query_vectors,
                    tx=tx, corpus_rows=_corpus_rows, using=using, speculate=speculate)
        timings["resolve"] = round(_ms(t0) - p.embed_ms, 3)
        plan = SearchPlan(scope.tenant_id, p.department_ids, p.include_tenant_wide, p.corpora, p.document_ids, p.doc_rows,
                          filters, tx, p.by_model, p.empty, knobs)
        reranks = mmr_lambda is not None or p.by_sentences
        pool = max(k, knobs["RETRIEVAL_CANDIDATES"]) if (mode == "hybrid" or reranks) else k
        # One list and no re-ranking after it: the ranking query returns the hit rows itself
        # (one round trip less); otherwise only the k winners are loaded afterwards, one round trip
        # that costs less than hit rows for every candidate of every list (docs/retrieval.md, "Figures behind rules in the code").
        single = mmr_lambda is None and (mode == "keyword" or (mode == "vector" and len(plan.by_model) == 1))
        prefetched: dict[int, tuple] | None = {} if single else None
        found = retrieve(plan, mode, p.lexemes, p.vectors, pool, using, prefetched, max_distance,
                         weigh=p.rerank_lexemes if p.by_sentences and not plan.empty else None)
        timings.update(found.timings)
        if "vector" in timings:
            timings["vector"] = round(timings["vector"] + p.embed_ms, 3)
        t = time.perf_counter()
        hits = postprocess(plan, found.ranked, found.vector_lists, found.keyword_list, n=pool if reranks else k, k=k,
                           with_vectors=mmr_lambda is not None, prefetched=prefetched,
                           sentences=(p.sentence_vectors, found.weights) if p.by_sentences else None,
                           mmr_lambda=mmr_lambda)
        paths = found.paths + (["sentence rerank"] if p.by_sentences else [])
        tx.flush()  # a speculative plan's check, when no statement carried it (nothing to rank)
        timings["hydrate"] = _ms(t)
    timings["total"] = _ms(t0)
    applied = plan.applied(mode=mode, k=k, max_distance=max_distance, mmr_lambda=mmr_lambda, rerank=p.by_sentences)
    applied["path"] = paths
    if p.by_sentences and p.sentence_query != query:
        applied["rerank_query"] = p.sentence_query
    return SearchResult(hits=[h for h, _ in hits][:k], applied_filter=applied, path=";".join(paths) or "empty",
                        timings_ms=timings)


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


@dataclass
class SearchPlan:
    """The effective filter: scope ∩ narrowing, resolved to ids the chunk queries use (prepare), with
    the search's statement runner and tunables."""

    tenant_id: int
    department_ids: tuple[int, ...] | None  # None: every department
    include_tenant_wide: bool
    corpora: dict[int, PlannedCorpus]
    document_ids: tuple[int, ...] | None  # None: no document-level narrowing
    doc_rows: int | None  # stored chunk count of those documents
    filters: SearchFilters
    tx: TenantStatements  # runs this search's statements under the scope's RLS tenant
    by_model: dict[str, list[PlannedCorpus]] = field(default_factory=dict)
    empty: bool = False  # nothing can match (see prepare)
    knobs: dict[str, Any] = field(default_factory=dict)  # the tunables, read at the search's start

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

    def applied(self, **extra: Any) -> dict:
        f = self.filters
        out = {
            "tenant_id": self.tenant_id,
            "department_ids": "all" if self.department_ids is None else sorted(self.department_ids),
            "tenant_wide_included": self.include_tenant_wide,
            "corpus_ids": sorted(self.corpora),
            "model_keys": sorted(self.by_model),
            "document_ids": None if f.document_ids is None else sorted(set(f.document_ids) & set(self.document_ids or ())),
            "metadata": dict(f.metadata) if f.metadata else None,
            "date_after": f.date_after,
            "date_before": f.date_before,
            "documents_matched": None if self.document_ids is None else len(self.document_ids),
        }
        out.update(extra)
        return out

    def on_own_connection(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(plan, *args)` with this plan's statements on the calling thread's own connection (a side
        connection, kb.retrieval.retrieve): they set the scope's RLS tenant first, like the caller's."""
        own = TenantStatements(self.tenant_id, nested=False, using=self.tx.using, prepared=self.tx.prepared)
        return fn(dataclasses.replace(self, tx=own), *args)


class StalePlan(Exception):
    """A speculative plan's corpus rows differ from the database's: search again without speculating."""


class CorpusRows:
    """The corpus rows this process resolved per scope (least recently used ones are dropped)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: OrderedDict[tuple, list[tuple]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple) -> list[tuple] | None:
        with self.lock:
            rows = self.rows.get(key)
            if rows is not None:
                self.rows.move_to_end(key)
            return rows

    def remember(self, key: tuple, rows: list[tuple]) -> None:
        with self.lock:
            self.rows[key] = list(rows)
            self.rows.move_to_end(key)
            while len(self.rows) > self.size:
                self.rows.popitem(last=False)

    def check(self, key: tuple, cached: list[tuple], rows: list[tuple]) -> None:
        """The deferred corpus statement's check: remember the fresh rows; raise StalePlan unless they
        match the cached ones but for chunk counts (column 4)."""
        self.remember(key, rows)
        if sorted(_without_count(r) for r in rows) != sorted(_without_count(r) for r in cached):
            raise StalePlan


def _without_count(row: tuple) -> tuple:
    return (*row[:4], *row[5:])


_corpus_rows = CorpusRows(1024)  # scopes remembered per process


class TenantStatements:
    """The RLS tenant of one search: every statement script it runs sets it first (see query).
    `prepared`: ranking statements run as prepared statements (RETRIEVAL_PREPARED_STATEMENTS)."""

    def __init__(self, tenant_id: int, nested: bool, using: str, prepared: bool = True) -> None:
        self.tenant = str(int(tenant_id))
        self.nested = nested
        self.using = using
        self.prepared = prepared
        self.previous: str | None = None  # the enclosing transaction's tenant (nested only), read by the first script
        self.pending: tuple[str, list, Callable[[list[tuple]], None]] | None = None  # see defer

    def defer(self, sql: str, params: Sequence, check: Callable[[list[tuple]], None]) -> None:
        """Send the one statement `sql` ahead of the next script (no round trip of its own) and give its
        rows to `check` before that script's results are returned: `check` raises to discard them.
        `flush` runs it alone if no script follows."""
        self.pending = (sql, list(params), check)

    def flush(self) -> None:
        """Run a deferred statement that no script has carried yet (and its check)."""
        if self.pending is not None:
            self.query("SELECT 1")

    def query(self, sql: str, params: Sequence = ()) -> list[list[tuple]]:
        """Run `sql` (one or more statements) in one round trip, the scope's tenant set first.

        Outside a transaction the script is its own implicit transaction (a multi-statement simple
        query), so SET LOCAL lasts exactly as long as it; inside the caller's transaction it lasts to
        its end and search() restores the tenant. The tenant goes with its proof (tenants.db_wall:
        SET LOCAL statements formatted from an int and hex digits). A deferred statement (see defer)
        runs right after the tenant is set; its check sees its rows before anything of `sql` is returned.
        """
        head = tenant_statements(int(self.tenant)) + "; "
        head_params: list = []
        if self.nested and self.previous is None:
            head = "SELECT current_setting('app.tenant_id', true); " + head
        pending, self.pending = self.pending, None
        if pending is not None:
            head += pending[0] + "; "
            head_params += pending[1]
        try:
            with connections[self.using].cursor() as cur:
                results = _run_script_all(cur, head + sql, [*head_params, *params])
        except Exception:
            self.pending = pending  # not run: the next script (a retry) carries it
            raise
        if self.nested and self.previous is None:
            self.previous = results.pop(0)[0][0] or ""
        if pending is not None:
            pending[2](results.pop(0))
        return results

    def query_prepared(self, sql: str, params: Sequence, before: str = "", after: str = "",
                       retry: bool = True) -> list[tuple]:
        """The rows of one statement, run as a prepared statement of this connection with a generic plan.

        Prepared because planning a ranking statement can cost more than executing it (figures:
        docs/retrieval.md, "Vector search"). `sql` uses %s placeholders; equal
        SharedParameter parameters (the query vector literal) become one, so the vector is sent and
        parsed once. The statement is named by a hash of its text (which inlines the model key and,
        for vector statements, the tenant id) and prepared in the same script the first time this
        connection runs it. `before` (SET LOCALs) runs ahead of it: the generic plan is made on
        the first execution, under them; `after` follows it. Every parameter, the tenant's
        included, travels with each execution; nothing about the scope is cached but the plan.
        """
        conn = connections[self.using]
        conn.ensure_connection()
        if not self.prepared or getattr(conn.connection, "prepare_threshold", None) is not None:
            # Switched off, or psycopg prepares statements itself and may DEALLOCATE ALL (ours too).
            return self.query(f"{before}{sql}{after}", [str(p) if isinstance(p, SharedParameter) else p for p in params])[0]
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

    def rank(self, ranking: str, params: list, order: str, prefetched: dict[int, tuple] | None, *, prepared: bool = True,
             before: str = "", after: str = "") -> list[tuple[int, float]]:
        """[(id, score)] of a ranking statement (rows (id, score), sorted `order` by score); prepared
        (query_prepared, with `before`/`after`) or planned per run. With `prefetched` the statement also
        returns its rows' hit columns (query.HIT_COLS), kept there by chunk id for postprocess.hydrate."""
        sql, sparams = ranking, params
        if prefetched is not None:
            # The tenant term on the hydrating join too (a distributed database routes by it), a parameter
            # after the ranking's own so the prepared statement stays one for every tenant.
            sql = (f"WITH ranked AS MATERIALIZED ({ranking}) SELECT ranked.score, {HIT_COLS} FROM ranked "
                   f"JOIN kb_chunk c ON c.id = ranked.id AND c.tenant_id = %s {HIT_JOIN} "
                   f"ORDER BY ranked.score {order}, c.id")
            sparams = [*params, int(self.tenant)]
        rows = self.query_prepared(sql, sparams, before, after) if prepared else self.query(sql, sparams)[0]
        if prefetched is None:
            return [(r[0], float(r[1])) for r in rows]
        for r in rows:
            prefetched[r[1]] = r[1:]
        return [(r[1], float(r[0])) for r in rows]


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


def _numbered(sql: str, params: Sequence) -> tuple[str, list]:
    """`sql` with %s placeholders as $1..$n, equal SharedParameter parameters sharing one number."""
    args: list = []
    seen: dict[str, int] = {}
    values = iter(params)

    def number(_: re.Match) -> str:
        value = next(values)
        if isinstance(value, SharedParameter):
            if value in seen:
                return f"${seen[value]}"
            seen[value] = len(args) + 1
            value = str(value)
        args.append(value)
        return f"${len(args)}"

    return re.sub(r"%s", number, sql), args


@contextlib.contextmanager
def _tenant_transaction(scope: Scope, using: str, prepared: bool) -> Iterator[TenantStatements]:
    """What tenants.scope.activate gives (RLS for the scope's tenant), without its round trips.

    Outside a transaction: no transaction of its own (no BEGIN, COMMIT or restore); each script
    of statements sets the tenant and is atomic by itself (READ COMMITTED takes a snapshot per
    statement anyway). Inside the caller's transaction: a savepoint, and the caller's tenant is
    put back on success unless it was this one already; on error the savepoint rollback restores it.
    """
    conn = connections[using]
    if not conn.in_atomic_block and conn.get_autocommit():
        yield TenantStatements(scope.tenant_id, nested=False, using=using, prepared=prepared)
        return
    with transaction.atomic(using=using):
        tx = TenantStatements(scope.tenant_id, nested=True, using=using, prepared=prepared)
        yield tx
        if tx.previous is not None and tx.previous != tx.tenant and not conn.needs_rollback:
            previous = int(tx.previous) if tx.previous.isdigit() and int(tx.previous) > 0 else None
            with conn.cursor() as cur:
                cur.execute(tenant_statements(previous))


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
