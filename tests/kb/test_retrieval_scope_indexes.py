"""Vector search over per-tenant / per-department HNSW indexes (kb.vector_index scope indexes), the
path choice between them, and the RLS tenant handling of kb.retrieval's own transaction."""

from __future__ import annotations

import hashlib
import random

import pytest
from django.db import connections

from kb.models import Chunk, Corpus, Document
from kb.retrieval import HnswIndex, SearchFilters, choose_vector_plan, search
from kb.retrieval import vector as retrieval_vector
from kb.vector_index import ensure_scope_indexes, ensure_vector_index, scope_index_name, wanted_scope_indexes
from tenants.scope import Scope, activate
from tests.factories import departments_of, dept_scope, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

KEY = "scopetest:8"


# --- Path choice (no database) --------------------------------------------------------------------

def test_scope_index_choice(settings):
    settings.RETRIEVAL_EXACT_MAX_ROWS = 4000
    model = HnswIndex(None, "all", 100_000)
    tenant = HnswIndex(1, "all", 50_000)
    d1, d2 = HnswIndex(1, 1, 10_000), HnswIndex(1, 2, 10_000)
    everything = [model, tenant, d1, d2]
    # Small scopes are scanned exactly, whatever indexes exist.
    assert choose_vector_plan(2_000, 1, {1: 2_000}, everything, 40, 40, 10).kind == "exact"
    # One department with its own index: one unfiltered arm (plus an exact arm for tenant-wide rows).
    plan = choose_vector_plan(10_000, 1, {1: 10_000, None: 0}, everything, 40, 40, 10)
    assert plan.kind == "parts" and plan.parts == ((None, None, 10), (1, d1, 10))
    # Two departments (40% of the tenant): one filtered scan of the tenant's index beats two arms.
    plan = choose_vector_plan(20_000, 1, {1: 10_000, 2: 10_000}, everything, 100, 40, 10)
    assert plan.kind == "index" and plan.index == tenant
    # Too many departments for one statement: no arms, the tenant's index.
    many = {1: 10_000, **{d: 0 for d in range(100, 110)}}
    assert choose_vector_plan(10_000, 1, many, everything, 40, 40, 10).index == tenant
    # The whole tenant: its own index; another tenant's indexes never count.
    assert choose_vector_plan(50_000, 1, None, everything, 40, 40, 10).index == tenant
    assert choose_vector_plan(50_000, 2, None, everything, 40, 40, 10).index == model
    # Without scope indexes the model's index serves, filtered; turned off in settings, the same.
    assert choose_vector_plan(10_000, 1, {1: 10_000}, [model], 40, 40, 10).index == model
    settings.RETRIEVAL_SCOPE_INDEXES = False
    assert choose_vector_plan(10_000, 1, {1: 10_000}, everything, 40, 40, 10).index == model
    # A scope that is a sliver of a huge index is cheaper to scan exactly.
    assert choose_vector_plan(20_000, 1, None, [HnswIndex(None, "all", 10_000_000)], 100, 40, 10).kind == "exact"


def test_which_scopes_get_an_index():
    sizes = {(1, 10): 10_000, (1, 11): 10_000, (1, None): 30_000, (2, 20): 50_000, (3, 30): 500}
    wanted = wanted_scope_indexes(sizes, min_rows=4_000, max_share=0.5)
    # Tenant 1 is 50k of 100.5k (<= half): own index; tenant 2 (50k) too; tenant 3 is too small.
    assert (1, "all") in wanted and (2, "all") in wanted and (3, "all") not in wanted
    # Departments that are a minority of their tenant; tenant-wide rows are 60% of tenant 1: not.
    assert (1, 10) in wanted and (1, 11) in wanted and (1, None) not in wanted
    assert (2, 20) not in wanted  # the whole tenant: its tenant index serves it unfiltered


# --- Scope indexes end to end (transactional: the owner builds the indexes over committed rows) ---

@pytest.fixture
def scoped_data(settings):
    settings.VECTOR_SCOPE_INDEX_MIN_ROWS = 50
    rnd = random.Random(11)
    a, b = make_tenant("ScopeA", departments=("Sales", "Engineering", "Ops")), make_tenant("ScopeB")
    dept = {d.name: d for d in departments_of(a)}
    data: dict = {"a": a, "b": b, "dept": dept, "corpus": {}, "chunks": {}}
    layout = [(a, dept["Sales"], 200), (a, dept["Engineering"], 200), (a, None, 100), (a, dept["Ops"], 12),
              (b, None, 600)]
    for tenant, department, n in layout:
        scope = whole_tenant(tenant)
        name = department.name if department else "Wide"
        with activate(scope):
            c = Corpus.objects.create(tenant=tenant, department=department, name=name, embedding_model="scopetest",
                                      embedding_dim=8, chunk_count=n)
            docs = [Document.objects.create(tenant=tenant, department=department, corpus=c, title=f"{name} {j}",
                                            source_name=f"{name}-{j}", mime_type="text/plain",
                                            sha256=hashlib.sha256(f"{tenant.id}{name}{j}".encode()).hexdigest(),
                                            status="ready", chunk_count=n // 4, metadata={"half": j % 2})
                    for j in range(4)]
            rows = Chunk.objects.bulk_create([
                Chunk(tenant=tenant, department=department, corpus=c, document=docs[i % 4], ordinal=i // 4,
                      text=f"{name} {i}", char_start=0, char_end=5, content_hash=f"{name}{i}",
                      embedding=[rnd.gauss(0, 1) for _ in range(8)], embedding_model=KEY) for i in range(n)])
        data["corpus"][(tenant.id, name)] = c
        data["chunks"].update({r.id: (tenant.id, department.id if department else None, docs[r.ordinal % 4].id) for r in rows})
    built = ensure_scope_indexes(KEY, 8, force=True)
    ensure_vector_index(KEY, 8)  # the model's own index (its scope check is throttled: just done)
    with connections["owner"].cursor() as cur:  # index sizes (reltuples) as autovacuum would leave them
        cur.execute("VACUUM ANALYZE kb_chunk")
    data["built"] = built
    retrieval_vector._index_cache.clear()
    yield data
    retrieval_vector._index_cache.clear()
    with connections["owner"].cursor() as cur:
        for name in built:
            cur.execute(f'DROP INDEX IF EXISTS "{name}"')


def _force_hnsw(settings) -> None:
    """Thresholds scaled down to the test's few hundred rows (a visit costs one exact row)."""
    settings.RETRIEVAL_EXACT_MAX_ROWS = 0
    settings.RETRIEVAL_HNSW_TUPLE_COST = 1.0
    settings.RETRIEVAL_HNSW_EF_SEARCH = 20


def _exact(scope: Scope, q: list[float], settings, **filters) -> list[int]:
    saved = settings.RETRIEVAL_EXACT_MAX_ROWS
    settings.RETRIEVAL_EXACT_MAX_ROWS = 10**9
    try:
        return [h.chunk_id for h in search(scope, "", k=10, mode="vector", query_vectors={KEY: q},
                                           filters=SearchFilters(**filters) if filters else None).hits]
    finally:
        settings.RETRIEVAL_EXACT_MAX_ROWS = saved


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_scope_indexes_are_built_and_searched(scoped_data, settings):
    d = scoped_data
    a, b, dept = d["a"], d["b"], d["dept"]
    assert set(d["built"]) == {scope_index_name(KEY, a.id), scope_index_name(KEY, a.id, dept["Sales"].id),
                               scope_index_name(KEY, a.id, dept["Engineering"].id), scope_index_name(KEY, a.id, None)}
    _force_hnsw(settings)
    q = [random.Random(5).gauss(0, 1) for _ in range(8)]
    cases = [
        (dept_scope(a, "Sales"), {}, "2 department indexes", {dept["Sales"].id, None}),
        (whole_tenant(a), {"department_ids": (dept["Engineering"].id,)}, "1 department index",
         {dept["Engineering"].id}),
        # Ops has 12 rows, no index of its own: its arm is an exact scan.
        (whole_tenant(a), {"department_ids": (dept["Engineering"].id, dept["Ops"].id)}, "1 department index+1 exact",
         {dept["Engineering"].id, dept["Ops"].id}),
        (whole_tenant(a), {}, "tenant index", {dept["Sales"].id, dept["Engineering"].id, dept["Ops"].id, None}),
        (whole_tenant(b), {}, "model index", {None}),
    ]
    for scope, filters, label, departments in cases:
        res = search(scope, "", k=10, mode="vector", query_vectors={KEY: q},
                     filters=SearchFilters(**filters) if filters else None)
        assert label in res.path, (label, res.path)
        got = [h.chunk_id for h in res.hits]
        assert len(got) == 10
        assert {d["chunks"][cid][0] for cid in got} == {scope.tenant_id}
        assert {d["chunks"][cid][1] for cid in got} <= departments
        dists = [h.distance for h in res.hits]
        assert dists == sorted(dists)
        assert len(set(got) & set(_exact(scope, q, settings, **filters))) >= 9


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_scope_index_arms_apply_document_filters(scoped_data, settings):
    d = scoped_data
    a, dept = d["a"], d["dept"]
    _force_hnsw(settings)
    settings.RETRIEVAL_HNSW_TUPLE_COST = 0.1
    q = [random.Random(6).gauss(0, 1) for _ in range(8)]
    scope = whole_tenant(a)
    narrow = {"department_ids": (dept["Engineering"].id,), "metadata": {"half": 1}}
    res = search(scope, "", k=10, mode="vector", query_vectors={KEY: q}, filters=SearchFilters(**narrow))
    assert "1 department index" in res.path, res.path
    assert len(res.hits) == 10 and all(h.metadata == {"half": 1} for h in res.hits)
    assert {d["chunks"][h.chunk_id][1] for h in res.hits} == {dept["Engineering"].id}
    assert len({h.chunk_id for h in res.hits} & set(_exact(scope, q, settings, **narrow))) >= 9
    # A filter that matches nothing: nothing, from every path.
    none = search(scope, "", k=10, mode="vector", query_vectors={KEY: q}, filters=SearchFilters(metadata={"half": 7}))
    assert none.hits == []


# --- The RLS tenant of search's own transaction ----------------------------------------------------

pytestmark_db = pytest.mark.django_db(databases=["default", "owner"])


def _tenant_setting() -> str | None:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_id', true)")
        return cur.fetchone()[0]


@pytestmark_db
def test_search_inside_another_tenants_transaction_restores_it():
    a, b = make_tenant("RlsA"), make_tenant("RlsB")
    with activate(whole_tenant(b)):
        search(whole_tenant(a), "anything", k=3)
        assert _tenant_setting() == str(b.id)
        with activate(whole_tenant(a)):  # same tenant as the caller's: nothing to restore
            search(whole_tenant(a), "anything", k=3)
            assert _tenant_setting() == str(a.id)
        assert _tenant_setting() == str(b.id)


@pytestmark_db
def test_search_error_inside_a_transaction_leaves_the_callers_tenant():
    a, b = make_tenant("RlsC"), make_tenant("RlsD")
    with activate(whole_tenant(a)):
        Corpus.objects.create(tenant=a, name="Vec", embedding_model="hash", embedding_dim=4, chunk_count=1)
    with activate(whole_tenant(b)):
        with pytest.raises(ValueError):  # raised after the tenant was set: the savepoint rollback restores b
            search(whole_tenant(a), "x", k=3, mode="vector", query_vectors={"hash:4": [1.0, 2.0]})
        assert _tenant_setting() == str(b.id)


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_search_outside_a_transaction_leaves_nothing_behind(scoped_data, settings):
    """No transaction of its own: each statement script sets the tenant (and the HNSW settings) for itself."""
    _force_hnsw(settings)
    conn = connections["default"]
    q = [random.Random(7).gauss(0, 1) for _ in range(8)]
    for scope in (whole_tenant(scoped_data["a"]), whole_tenant(scoped_data["b"])):
        res = search(scope, "", k=10, mode="vector", query_vectors={KEY: q})
        assert "hnsw" in res.path and len(res.hits) == 10
        assert {scoped_data["chunks"][h.chunk_id][0] for h in res.hits} == {scope.tenant_id}
        assert not conn.in_atomic_block and conn.connection.info.transaction_status == 0  # idle, nothing open
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('app.tenant_id', true), current_setting('enable_sort'), "
                        "current_setting('hnsw.iterative_scan'), current_setting('plan_cache_mode')")
            assert cur.fetchone() in (("", "on", "off", "auto"), (None, "on", "off", "auto"))


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_ranking_statements_are_prepared_per_tenant_and_survive_a_lost_session(scoped_data, settings):
    """The ranking statement is prepared once per connection (its text names the tenant, so each
    tenant has its own); if the session drops it, the next search prepares it again."""
    _force_hnsw(settings)
    conn = connections["default"]
    q = {KEY: [random.Random(9).gauss(0, 1) for _ in range(8)]}

    def prepared() -> set[str]:
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'kb%%'")
            return {r[0] for r in cur.fetchall()}

    a, b = whole_tenant(scoped_data["a"]), whole_tenant(scoped_data["b"])
    first = [h.chunk_id for h in search(a, "", k=10, mode="vector", query_vectors=q).hits]
    after_a = prepared()
    assert after_a
    assert [h.chunk_id for h in search(a, "", k=10, mode="vector", query_vectors=q).hits] == first
    assert prepared() == after_a  # reused, not prepared again
    hits_b = search(b, "", k=10, mode="vector", query_vectors=q).hits
    assert {scoped_data["chunks"][h.chunk_id][0] for h in hits_b} == {b.tenant_id}
    assert len(prepared()) > len(after_a)  # the other tenant's statement is its own
    with conn.cursor() as cur:
        cur.execute("DEALLOCATE ALL")
    assert [h.chunk_id for h in search(a, "", k=10, mode="vector", query_vectors=q).hits] == first
    settings.RETRIEVAL_PREPARED_STATEMENTS = False  # e.g. behind a transaction-pooling proxy
    before = prepared()
    assert [h.chunk_id for h in search(a, "", k=10, mode="vector", query_vectors=q).hits] == first
    assert {scoped_data["chunks"][h.chunk_id][0] for h in search(b, "", k=10, mode="vector", query_vectors=q).hits} == {
        b.tenant_id}
    assert prepared() == before


# --- Keyword candidates under document filters -----------------------------------------------------

@pytestmark_db
def test_keyword_candidates_widen_in_scope_terms_before_every_lexeme(settings):
    """Under a document filter the candidate budget is spent again in scope terms (not on every lexeme)."""
    settings.RETRIEVAL_BM25_MAX_CANDIDATES = 3
    settings.RETRIEVAL_BM25_CANDIDATE_SHARE = 0.9
    tenant = make_tenant("Widen")
    scope = whole_tenant(tenant)
    texts = {"a": ["narwhal walrus", "otter walrus", "otter walrus", "walrus one", "walrus two"],
             "b": ["narwhal walrus", "otter walrus", "otter walrus", "walrus three", "walrus four",
                   *(f"filler {i}" for i in range(10))]}
    with activate(scope):
        c = Corpus.objects.create(tenant=tenant, name="C", embedding_model="hash", embedding_dim=8, chunk_count=20)
        made: dict[str, list[int]] = {}
        for part, chunks in texts.items():
            d = Document.objects.create(tenant=tenant, corpus=c, title=part, source_name=part, mime_type="text/plain",
                                        sha256=hashlib.sha256(part.encode()).hexdigest(), status="ready",
                                        chunk_count=len(chunks), metadata={"part": part})
            rows = Chunk.objects.bulk_create([
                Chunk(tenant=tenant, corpus=c, document=d, ordinal=i, text=t, char_start=0, char_end=len(t),
                      content_hash=f"{part}{i}", embedding=[1.0] * 8, embedding_model="hash:8")
                for i, t in enumerate(chunks)])
            made[part] = [r.id for r in rows]
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector('english', text) "
                        "WHERE tenant_id = %s AND corpus_id = %s", [c.tenant_id, c.id])
    only_a = SearchFilters(metadata={"part": "a"})
    # narwhal (df 2) fits the cap of 3, otter (df 4) does not: one narwhal chunk is in part a, fewer
    # than k. In scope (a quarter of the chunks) the budget is 12: narwhal + otter, not walrus (10).
    res = search(scope, "narwhal otter walrus", k=3, mode="keyword", filters=only_a)
    assert res.path == "bm25(candidates from 2/3 terms)"
    assert set(ids(res)) == set(made["a"][:3])
    settings.RETRIEVAL_BM25_CANDIDATE_SHARE = 1  # exact BM25: the same top 3
    exact = search(scope, "narwhal otter walrus", k=3, mode="keyword", filters=only_a)
    assert ids(exact) == ids(res)
    # Unfiltered, nothing changes: narwhal alone has k=2 hits.
    settings.RETRIEVAL_BM25_CANDIDATE_SHARE = 0.9
    res = search(scope, "narwhal otter walrus", k=2, mode="keyword")
    assert res.path == "bm25(candidates from 1/3 terms)"


def ids(result) -> list[int]:
    return [h.chunk_id for h in result.hits]
