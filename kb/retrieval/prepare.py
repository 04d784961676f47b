"""Query preparation, the first stage of a search: the effective filter, the query's lexemes and the
query embedded per model, before anything is ranked.

`prepare` intersects the scope with the narrowing filters and resolves, in one round trip, the visible
corpora, the documents matching document-level filters (with their stored chunk counts: the scope's
exact size) and the lexemes of the query (and of the re-rank's query) under each text search language
of those corpora, less the languages the query is not written in (`_in_other_language`); then it
embeds the query with each model in scope (cached per process), as the statement parameter and SQL
type the ranking statements use. The search entry (kb.retrieval.pipeline) builds its SearchPlan from
the result.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections

from kb.embedding import embed_windowed, get_embedder
from kb.retrieval.query import Mode, SearchFilters
from kb.retrieval.tunables import MAX_QUERY_TERMS, MODEL_KEY
from kb.vector_index import cast_type  # the type of the model's index expression, which a query must repeat
from tenants.scope import Scope

if TYPE_CHECKING:  # the search entry's types, for annotations only (it imports this module)
    from kb.retrieval.pipeline import CorpusRows, TenantStatements


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


class SharedParameter(str):
    """A statement parameter passed once however often the statement names it (the query vector)."""


@dataclass(frozen=True)
class QueryVector:
    """The query embedded with one model: its values, as a statement parameter, and the SQL type both
    sides of a distance are cast to (that of the model's index expression)."""

    values: list[float]
    literal: SharedParameter
    cast: str


@dataclass
class PreparedQuery:
    """What the later stages need of the query and the scope."""

    department_ids: tuple[int, ...] | None  # None: every department
    include_tenant_wide: bool
    corpora: dict[int, PlannedCorpus]
    document_ids: tuple[int, ...] | None  # None: no document-level narrowing
    doc_rows: int | None  # stored chunk count of those documents
    by_model: dict[str, list[PlannedCorpus]]  # the visible corpora by embedding model (valid model keys only)
    empty: bool  # nothing can match: no ranking statement runs
    lexemes: dict[str, list[str]]  # the query's, per text search language (keyword and hybrid modes)
    sentence_query: str  # the text the sentence re-rank scores against
    rerank_lexemes: list[str]  # the sentence query's lexemes, any language (re-rank only)
    by_sentences: bool  # re-rank by sentences: asked, and a visible corpus stores sentence vectors
    vectors: dict[str, QueryVector]  # the query per model (vector and hybrid modes, unless empty)
    sentence_vectors: dict[str, QueryVector]  # the sentence query per model (re-rank only, unless empty)
    embed_ms: float  # time spent embedding


def prepare(scope: Scope, query: str, f: SearchFilters, *, mode: Mode, rerank: bool, rerank_query: str | None,
            query_vectors: Mapping[str, Sequence[float]] | None, tx: TenantStatements, corpus_rows: CorpusRows,
            using: str, speculate: bool) -> PreparedQuery:
    """The effective filter of `scope` ∩ `f`, the lexemes and the embeddings of the query (see the module).

    `speculate`: when only the visible corpora are needed (no lexemes, no document-level filters)
    and this process resolved the same scope and corpus filter before (`corpus_rows`), the plan is
    built from those corpus rows with no round trip, and the corpus statement is deferred into the
    next script (TenantStatements.defer): if the rows it returns differ from the cached ones in
    anything but chunk counts (which only steer the path choice), that script's results are
    discarded by raising StalePlan, and the caller searches again without speculating. The cached
    rows are what this scope's own statement returned (key: database, tenant, departments, corpus
    filter), and every ranking statement filters by the scope's tenant and departments anyway (and
    runs under its RLS tenant), so a cached plan can only be checked, never widen what the scope reaches.
    """
    wants_lexemes = mode in ("keyword", "hybrid")
    sentence_query = " ".join((rerank_query or "").split()) or query
    # The re-rank's lexical side needs the sentence query's lexemes: those of the query when they
    # are the same text and already resolved, else resolved in the same round trip.
    own_rerank_lexemes = rerank and not (wants_lexemes and sentence_query == query)
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
    for text in (query if wants_lexemes else None, sentence_query if own_rerank_lexemes else None):
        if text is not None:
            # Under each language of the visible corpora; a name PostgreSQL does not know gives none.
            statements.append(f"SELECT l.language, u.lexeme FROM (SELECT DISTINCT language FROM kb_corpus WHERE {cwhere}) l "
                              f"JOIN pg_catalog.pg_ts_config t ON t.cfgname = l.language "
                              f"CROSS JOIN LATERAL unnest(to_tsvector(t.oid::regconfig, %s)) WITH ORDINALITY "
                              f"AS u(lexeme, positions, weights, ord) ORDER BY l.language, u.ord")
            params += [*cparams, text[:4000]]
    if wants_lexemes:  # how many of the query's words each language's stop list removes (see _in_other_language)
        statements.append("SELECT cfgname, length(to_tsvector('simple', %s)) - length(to_tsvector(oid::regconfig, %s)) "
                          "FROM pg_catalog.pg_ts_config WHERE cfgname <> 'simple'")
        params += [query[:4000], query[:4000]]
    key = (connections[using].settings_dict["NAME"], scope.tenant_id, depts, None if f.corpus_ids is None else tuple(cparams[-1]))
    cached = corpus_rows.get(key) if speculate and len(statements) == 1 and not tx.nested else None
    if cached:
        tx.defer(statements[0], params, functools.partial(corpus_rows.check, key, cached))
        found = cached
    else:
        results = tx.query("; ".join(statements), params)
        found = results.pop(0)
        corpus_rows.remember(key, found)
    corpora = {r[0]: PlannedCorpus(r[0], r[1], f"{r[2]}:{r[3]}", r[3], r[4], r[5], r[6], r[7]) for r in found}
    document_ids: tuple[int, ...] | None = None
    doc_rows: int | None = None
    if doc_level:
        docs = results.pop(0)
        if corpora:
            document_ids = tuple(r[0] for r in docs)
            doc_rows = sum(r[1] or 0 for r in docs)
    lexemes = _by_language(results.pop(0)) if wants_lexemes else {}
    rerank_lexemes = _any_language(_by_language(results.pop(0))) if own_rerank_lexemes else []
    if wants_lexemes:
        removed = dict(results.pop(0))
        lexemes = {language: found for language, found in lexemes.items() if not _in_other_language(language, removed)}
    if rerank and not own_rerank_lexemes:
        rerank_lexemes = _any_language(lexemes)
    by_model: dict[str, list[PlannedCorpus]] = {}
    for c in corpora.values():
        if MODEL_KEY.match(c.model_key):
            by_model.setdefault(c.model_key, []).append(c)
    empty = not corpora or (document_ids is not None and not document_ids) or (
        depts is not None and not depts and not tenant_wide)
    by_sentences = rerank and any(c.sentences for c in corpora.values())
    t = time.perf_counter()
    vectors: dict[str, QueryVector] = {}
    if mode in ("vector", "hybrid") and not empty:
        vectors = {model_key: _embedded(model_key, group, query, query_vectors) for model_key, group in by_model.items()}
    sentence_vectors: dict[str, QueryVector] = {}
    if by_sentences and not empty:
        given = query_vectors if sentence_query == query else None
        sentence_vectors = {model_key: _embedded(model_key, group, sentence_query, given) for model_key, group in by_model.items()}
    return PreparedQuery(depts, tenant_wide, corpora, document_ids, doc_rows, by_model, empty, lexemes, sentence_query,
                         rerank_lexemes, by_sentences, vectors, sentence_vectors, round((time.perf_counter() - t) * 1000, 3))


MIN_FOREIGN_STOP_WORDS = 2


def _in_other_language(language: str, removed: Mapping[str, int]) -> bool:
    """Whether the query is written in another language than `language` (a text search configuration):
    some language's stop list removes more of its words than that of `language` does, and at least
    MIN_FOREIGN_STOP_WORDS of them (one word proves nothing: "hotel per night" is not Italian). Its
    words then match a corpus in `language` only by accident (German "die", "war", "also" in English text), so the
    keyword side leaves those corpora to the vector side, which a multilingual model matches across
    languages. A query with no function words (keywords, names) keeps every language; a "simple" corpus
    has no stop list and is never left out. (Chosen on the first half of XQuAD's German, Spanish and
    Russian questions over English paragraphs; no English question of the evaluation sets is taken for
    another language: docs/retrieval.md, docs/evaluation.md.)"""
    own = removed.get(language)
    most = max(removed.values(), default=0)
    return own is not None and most > own and most >= MIN_FOREIGN_STOP_WORDS


def _by_language(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for language, lexeme in rows:
        found = out.setdefault(language, [])
        if len(found) < MAX_QUERY_TERMS:
            found.append(lexeme)
    return out


def _any_language(lexemes: dict[str, list[str]]) -> list[str]:
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


def _embedded(model_key: str, group: list[PlannedCorpus], text: str, given: Mapping[str, Sequence[float]] | None) -> QueryVector:
    vec = query_vector(model_key, text, given)
    return QueryVector(vec, SharedParameter(vector_literal(vec)), cast_type(group[0].dim))


_qvec_cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()


_qvec_lock = threading.Lock()


def query_vector(model_key: str, query: str, given: Mapping[str, Sequence[float]] | None) -> list[float]:
    """The query embedded with `model_key` (the corpus's own model), cached per process."""
    if given and model_key in given:
        return [float(x) for x in given[model_key]]
    key = (model_key, query)
    with _qvec_lock:
        if key in _qvec_cache:
            _qvec_cache.move_to_end(key)
            return _qvec_cache[key]
    # A query longer than the model's window is embedded whole (the mean of its windows), not cut
    # to the window's worth of words the model would silently keep.
    vec = [float(x) for x in embed_windowed(get_embedder(model_key), [query], "query")[0]]
    with _qvec_lock:
        _qvec_cache[key] = vec
        while len(_qvec_cache) > 512:
            _qvec_cache.popitem(last=False)
    return vec


_vec_templates: dict[int, str] = {}


def vector_literal(vec: Sequence[float]) -> str:
    """'[x1,...,xn]' with 8 significant digits; one %-format of a cached template (a third faster
    than formatting element by element)."""
    n = len(vec)
    template = _vec_templates.get(n)
    if template is None:
        template = _vec_templates[n] = "[" + ",".join(["%.8g"] * n) + "]"
    return template % tuple(map(float, vec))
