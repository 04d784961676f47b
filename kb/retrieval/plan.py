"""The effective filter: the scope intersected with the narrowing filters, resolved in one round trip
to the corpus and document ids the chunk queries use."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from kb.retrieval.query import SearchFilters
from kb.retrieval.sql import TenantStatements
from kb.retrieval.tunables import _MODEL_KEY, MAX_QUERY_TERMS
from tenants.scope import Scope


@dataclass
class PlannedCorpus:
    id: int
    name: str
    model_key: str
    dim: int
    chunk_count: int
    department_id: int | None = None
    sentences: bool = False  # stores sentence vectors (kb.sentences)
    language: str = "english"  # the text search configuration of its chunks' tsvectors (Corpus.language)


@dataclass
class SearchPlan:
    """The effective filter: scope ∩ narrowing, resolved to ids the chunk queries use."""

    tenant_id: int
    department_ids: tuple[int, ...] | None  # None: every department
    include_tenant_wide: bool
    corpora: dict[int, PlannedCorpus]
    document_ids: tuple[int, ...] | None  # None: no document-level narrowing
    doc_rows: int | None  # stored chunk count of those documents
    filters: SearchFilters
    tx: TenantStatements  # runs this search's statements under the scope's RLS tenant
    by_model: dict[str, list[PlannedCorpus]] = field(default_factory=dict)

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


def _resolve(scope: Scope, f: SearchFilters, using: str, tx: TenantStatements, query: str | None = None,
             rerank_query: str | None = None, speculate: bool = False) -> tuple[SearchPlan, dict[str, list[str]], list[str]]:
    """Intersect the scope with the filters; also the lexemes of `query` per text search language of
    the visible corpora ({language: lexemes}) and those of `rerank_query` under any of them (empty
    when not given).

    One round trip: the RLS tenant, the visible corpora, the documents matching document-level
    filters (counted, with their stored chunk counts: the scope's exact size) and the lexemes
    travel as one script.

    `speculate`: when only the visible corpora are needed (no lexemes, no document-level filters)
    and this process resolved the same scope and corpus filter before, the plan is built from
    those corpus rows with no round trip, and the corpus statement is deferred into the next
    script (TenantStatements.defer): if the rows it returns differ from the cached ones in anything
    but chunk counts (which only steer the path choice), that script's results are discarded by
    raising StalePlan, and the caller searches again without speculating. The cached rows are what
    this scope's own statement returned (key: database, tenant, departments, corpus filter), and
    every ranking statement filters by the scope's tenant and departments anyway (and runs under
    its RLS tenant), so a cached plan can only be checked, never widen what the scope reaches.
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
    statements.append(f"SELECT id, name, embedding_model, embedding_dim, chunk_count, department_id, sentence_vectors, "
                      f"language FROM kb_corpus WHERE {cwhere}")
    params += cparams
    doc_level = f.document_ids is not None or f.metadata or f.date_after or f.date_before
    if doc_level:
        dsql, dparams = _documents_sql(f, depts, tenant_wide, cwhere, cparams, scope.tenant_id)
        statements.append(dsql)
        params += dparams
    for text in (query, rerank_query):
        if text is not None:
            # Under each language of the visible corpora; a name PostgreSQL does not know gives none.
            statements.append(f"SELECT l.language, u.lexeme FROM (SELECT DISTINCT language FROM kb_corpus WHERE {cwhere}) l "
                              f"JOIN pg_catalog.pg_ts_config t ON t.cfgname = l.language "
                              f"CROSS JOIN LATERAL unnest(to_tsvector(t.oid::regconfig, %s)) WITH ORDINALITY "
                              f"AS u(lexeme, positions, weights, ord) ORDER BY l.language, u.ord")
            params += [*cparams, text[:4000]]
    key = (connections[using].settings_dict["NAME"], scope.tenant_id, depts, None if f.corpus_ids is None else tuple(cparams[-1]))
    cached = _cached_corpus_rows(key) if speculate and len(statements) == 1 and not tx.nested else None
    if cached:
        tx.defer(statements[0], params, lambda rows: _check_corpus_rows(key, cached, rows))
        corpus_rows = cached
    else:
        results = tx.query("; ".join(statements), params)
        corpus_rows = results.pop(0)
        _remember_corpus_rows(key, corpus_rows)
    corpora = {r[0]: PlannedCorpus(r[0], r[1], f"{r[2]}:{r[3]}", r[3], r[4], r[5], r[6], r[7]) for r in corpus_rows}
    plan = SearchPlan(scope.tenant_id, depts, tenant_wide, corpora, None, None, f, tx=tx)
    if doc_level:
        docs = results.pop(0)
        if corpora:
            plan.document_ids = tuple(r[0] for r in docs)
            plan.doc_rows = sum(r[1] or 0 for r in docs)
    lexemes = _by_language(results.pop(0)) if query is not None else {}
    rerank_lexemes = any_language(_by_language(results.pop(0))) if rerank_query is not None else []
    for c in corpora.values():
        if _MODEL_KEY.match(c.model_key):
            plan.by_model.setdefault(c.model_key, []).append(c)
    return plan, lexemes, rerank_lexemes


class StalePlan(Exception):
    """A speculative plan's corpus rows differ from the database's: search again without speculating."""


_corpus_rows: OrderedDict[tuple, list[tuple]] = OrderedDict()
_corpus_rows_lock = threading.Lock()
_CORPUS_ROWS_MAX = 1024  # scopes remembered per process (least recently used ones are dropped)


def _cached_corpus_rows(key: tuple) -> list[tuple] | None:
    with _corpus_rows_lock:
        rows = _corpus_rows.get(key)
        if rows is not None:
            _corpus_rows.move_to_end(key)
        return rows


def _remember_corpus_rows(key: tuple, rows: list[tuple]) -> None:
    with _corpus_rows_lock:
        _corpus_rows[key] = list(rows)
        _corpus_rows.move_to_end(key)
        while len(_corpus_rows) > _CORPUS_ROWS_MAX:
            _corpus_rows.popitem(last=False)


def _check_corpus_rows(key: tuple, cached: list[tuple], rows: list[tuple]) -> None:
    """The deferred corpus statement's check: remember the fresh rows; raise StalePlan unless they
    match the cached ones but for chunk counts (column 4)."""
    _remember_corpus_rows(key, rows)
    if sorted(_without_count(r) for r in rows) != sorted(_without_count(r) for r in cached):
        raise StalePlan


def _without_count(row: tuple) -> tuple:
    return (*row[:4], *row[5:])


def _by_language(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for language, lexeme in rows:
        found = out.setdefault(language, [])
        if len(found) < MAX_QUERY_TERMS:
            found.append(lexeme)
    return out


def any_language(lexemes: dict[str, list[str]]) -> list[str]:
    """The lexemes of every language, once each (for statistics that are per lexeme, not per language)."""
    return list(dict.fromkeys(lex for found in lexemes.values() for lex in found))


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
    if f.date_after:
        sql.append("AND d.dated_at >= %s::timestamptz")
        params.append(f.date_after)
    if f.date_before:
        sql.append("AND d.dated_at < %s::timestamptz")
        params.append(f.date_before)
    return " ".join(sql), params


def scope_rows(plan: SearchPlan, group: list[PlannedCorpus]) -> int:
    """Rows the vector query may visit, from stored counts (an upper bound when departments narrow)."""
    if plan.doc_rows is not None:
        return plan.doc_rows
    return sum(c.chunk_count for c in group)

