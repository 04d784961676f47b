"""kb.retrieval.search: scoping, narrowing filters, modes, fusion, vector paths, model separation."""

from __future__ import annotations

import hashlib
import random

import pytest
from django.db import connections

from kb.ingest.dates import document_date
from kb.models import Chunk, Corpus, Document
from kb.retrieval import SearchFilters, search
from tenants.scope import Scope, activate
from tests.factories import department, dept_scope, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=False)


def corpus(tenant, name="Policies", department=None, model="hash", dim=64, chunk_count=0, date_key="published_at",
           language="english") -> Corpus:
    with activate(whole_tenant(tenant)):
        return Corpus.objects.create(tenant=tenant, department=department, name=name, embedding_model=model,
                                     embedding_dim=dim, chunk_count=chunk_count, date_key=date_key, language=language)


def doc(c: Corpus, title: str, metadata: dict | None = None, department=None) -> Document:
    with activate(whole_tenant(c.tenant)):
        return Document.objects.create(
            tenant=c.tenant, corpus=c, department=department if department is not None else c.department, title=title,
            source_name=title, mime_type="text/plain", sha256=hashlib.sha256(title.encode()).hexdigest(),
            status="ready", metadata=metadata or {}, dated_at=document_date(metadata, c.date_key))


def chunk(d: Document, text: str, embedding: list[float] | None = None, ordinal: int | None = None,
          model_key: str | None = None) -> Chunk:
    """A chunk with its search vector (title + text) and, by default, the corpus model's embedding of it."""
    from kb.embedding import get_embedder

    c = d.corpus
    scope = whole_tenant(c.tenant)
    with activate(scope):
        if embedding is None:
            embedding = get_embedder(c.model_key).embed([text])[0]
        if ordinal is None:
            ordinal = Chunk.objects.for_scope(scope).filter(document=d).count()
        ch = Chunk.objects.create(
            tenant=c.tenant, department=d.department, corpus=c, document=d, ordinal=ordinal, text=text,
            locator=f"{d.title} > {ordinal}", char_start=0, char_end=len(text),
            content_hash=hashlib.sha256(text.encode()).hexdigest(), embedding=embedding,
            embedding_model=model_key or c.model_key)
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector(%s::regconfig, %s || ' ' || text) "
                        "WHERE tenant_id = %s AND id = %s", [c.language, d.title, ch.tenant_id, ch.id])
    return ch


def ids(result) -> list[int]:
    return [h.chunk_id for h in result.hits]


MODES = ("vector", "keyword", "hybrid")


@pytest.fixture
def two_tenants():
    a = make_tenant("Acme")
    b = make_tenant("Beta")
    sales = department(a, "Sales")
    eng = department(a, "Engineering")
    ca_wide = corpus(a, "Handbook")
    ca_sales = corpus(a, "Sales playbook", department=sales)
    ca_eng = corpus(a, "Eng wiki", department=eng)
    cb = corpus(b, "Beta handbook")
    text = "Travel expenses are reimbursed within thirty days of the trip"
    out = {
        "a": a, "b": b, "sales": sales, "eng": eng, "ca_wide": ca_wide, "ca_sales": ca_sales, "ca_eng": ca_eng, "cb": cb,
        "wide": chunk(doc(ca_wide, "Travel policy", {"source": "HR", "published_at": "2023-10-01T00:00:00+00:00"}), text),
        "sales_chunk": chunk(doc(ca_sales, "Sales travel", {"source": "Sales", "published_at": "2023-11-15T00:00:00+00:00"}),
                             text + " for sales staff"),
        "eng_chunk": chunk(doc(ca_eng, "Eng travel", {"source": "Eng", "published_at": "2023-12-20T00:00:00+00:00"}),
                           text + " for engineers"),
        "b_chunk": chunk(doc(cb, "Beta travel"), text),
    }
    return out


@pytest.mark.parametrize("mode", MODES)
def test_other_tenants_and_departments_never_returned(two_tenants, mode):
    t = two_tenants
    sales_scope = dept_scope(t["a"], "Sales")
    got = ids(search(sales_scope, "travel expenses reimbursed", k=10, mode=mode))
    assert set(got) == {t["wide"].id, t["sales_chunk"].id}
    got_all = ids(search(whole_tenant(t["a"]), "travel expenses reimbursed", k=10, mode=mode))
    assert set(got_all) == {t["wide"].id, t["sales_chunk"].id, t["eng_chunk"].id}
    got_b = ids(search(whole_tenant(t["b"]), "travel expenses reimbursed", k=10, mode=mode))
    assert got_b == [t["b_chunk"].id]


@pytest.mark.parametrize("mode", MODES)
def test_narrowing_filters(two_tenants, mode):
    t = two_tenants
    scope = whole_tenant(t["a"])
    q = "travel expenses"

    def run(**kw) -> set[int]:
        return set(ids(search(scope, q, k=10, mode=mode, filters=SearchFilters(**kw))))

    assert run(corpus_ids=(t["ca_sales"].id,)) == {t["sales_chunk"].id}
    assert run(document_ids=(t["eng_chunk"].document_id,)) == {t["eng_chunk"].id}
    assert run(metadata={"source": "HR"}) == {t["wide"].id}
    # A list is "any of"; an unknown value in it adds nothing.
    assert run(metadata={"source": ["HR", "Eng", "Nowhere"]}) == {t["wide"].id, t["eng_chunk"].id}
    assert run(metadata={"source": ["Nowhere"]}) == set()
    assert run(date_after="2023-11-01", date_before="2023-12-01") == {t["sales_chunk"].id}
    assert run(date_after="2023-11-01T00:00:00Z") == {t["sales_chunk"].id, t["eng_chunk"].id}
    assert run(department_ids=(t["eng"].id,)) == {t["eng_chunk"].id}
    assert run(department_ids=(t["eng"].id,), include_tenant_wide=True) == {t["eng_chunk"].id, t["wide"].id}
    # Filters only narrow: the intersection of two is applied.
    assert run(corpus_ids=(t["ca_sales"].id,), metadata={"source": "Eng"}) == set()
    # Another tenant's ids, or a department outside the caller's scope, yield nothing (no error).
    assert run(corpus_ids=(t["cb"].id,)) == set()
    assert run(document_ids=(t["b_chunk"].document_id,)) == set()
    sales_only = dept_scope(t["a"], "Sales")
    narrowed = search(sales_only, q, k=10, mode=mode, filters=SearchFilters(department_ids=(t["eng"].id,)))
    assert narrowed.hits == []
    assert search(sales_only, q, mode=mode, filters=SearchFilters(corpus_ids=(t["ca_eng"].id,))).hits == []


def test_applied_filter_records_the_effective_scope(two_tenants):
    t = two_tenants
    scope = dept_scope(t["a"], "Sales")
    res = search(scope, "travel", k=5, mode="hybrid",
                 filters=SearchFilters(corpus_ids=(t["ca_sales"].id, t["ca_eng"].id, t["cb"].id), metadata={"source": "Sales"}))
    f = res.applied_filter
    assert f["tenant_id"] == t["a"].id
    assert f["department_ids"] == [t["sales"].id]
    assert f["corpus_ids"] == [t["ca_sales"].id]  # eng (out of scope) and Beta's (other tenant) dropped
    assert f["metadata"] == {"source": "Sales"}
    assert f["model_keys"] == ["hash:64"]
    assert f["mode"] == "hybrid" and f["k"] == 5
    assert ids(res) == [t["sales_chunk"].id]
    assert res.hits[0].corpus_name == "Sales playbook"
    assert res.hits[0].document_title == "Sales travel"
    assert res.hits[0].metadata["source"] == "Sales"


def test_hit_fields_and_scores(two_tenants):
    t = two_tenants
    res = search(whole_tenant(t["a"]), "Travel expenses are reimbursed within thirty days of the trip", k=3, mode="vector")
    top = res.hits[0]
    assert top.chunk_id == t["wide"].id
    assert top.distance == pytest.approx(0.0, abs=1e-5) and top.score == pytest.approx(1.0, abs=1e-5)
    assert top.locator == "Travel policy > 0" and top.content_hash and top.text.startswith("Travel")
    kw = search(whole_tenant(t["a"]), "sales staff", k=3, mode="keyword")
    assert ids(kw)[0] == t["sales_chunk"].id and kw.hits[0].keyword_score > 0
    assert "resolve" in kw.timings_ms and "total" in kw.timings_ms and kw.path.startswith("bm25(")


# --- Fusion: one mode misses, hybrid finds both -----------------------------------------------

def _basis(dim: int, i: int, noise: float = 0.0, seed: int = 0) -> list[float]:
    rnd = random.Random(seed)
    v = [rnd.uniform(-noise, noise) for _ in range(dim)]
    v[i] += 1.0
    return v


def test_hybrid_beats_either_mode_alone():
    tenant = make_tenant("Fusion")
    c = corpus(tenant, "Catalogue", model="craft", dim=8)
    # The query: an exact product code plus a paraphrase of a refund question. Only the part sheet
    # carries the code (keyword finds it; its vector is far); only the refund page means the same as
    # the question (vector finds it; it shares no word with the query).
    part = chunk(doc(c, "Part sheet"), "Spare part XK-4471 pressure valve", embedding=_basis(8, 7))
    refund = chunk(doc(c, "Returns"), "Money back when goods arrive broken", embedding=_basis(8, 0, 0.1, 1))
    for i in range(1, 6):
        chunk(doc(c, f"Other {i}"), f"Unrelated catalogue entry number {i}", embedding=_basis(8, 0, 0.6 + i * 0.1, i + 10))
    q = {"craft:8": _basis(8, 0)}
    relevant = {part.id, refund.id}
    scope = whole_tenant(tenant)

    def recall(mode: str) -> float:
        got = ids(search(scope, "XK-4471 reimbursement damaged delivery", k=2, mode=mode, query_vectors=q))
        return len(relevant & set(got)) / len(relevant)

    assert recall("keyword") == 0.5
    assert recall("vector") == 0.5
    assert recall("hybrid") == 1.0


# --- Vector paths: exact and HNSW both return k rows for a tenant holding 1% ----------------------

@pytest.fixture
def one_percent_tenant():
    """3,000 MiniLM-sized chunks: a big tenant with 2,970, a small one with 30 (1%) spread among them."""
    rnd = random.Random(7)
    big, small = make_tenant("Big"), make_tenant("Small")
    data = {}
    for tenant, n in ((big, 2970), (small, 30)):
        c = corpus(tenant, "Docs", model="minilm-l6-v2", dim=384, chunk_count=n)
        d = doc(c, "Bulk")
        rows = [Chunk(tenant=tenant, corpus=c, document=d, ordinal=i, text=f"chunk {i}", char_start=0, char_end=7,
                      content_hash=str(i), embedding=[rnd.gauss(0, 1) for _ in range(384)],
                      embedding_model="minilm-l6-v2:384") for i in range(n)]
        with activate(whole_tenant(tenant)):
            Chunk.objects.bulk_create(rows, batch_size=500)
        data[tenant.slug] = (tenant, c)
    return data[small.slug], data[big.slug]


def force_hnsw(settings) -> None:
    settings.RETRIEVAL_EXACT_MAX_ROWS = 0
    settings.RETRIEVAL_HNSW_TUPLE_COST = 0.0


@pytest.mark.parametrize("expected_path", ["exact", "hnsw"])
def test_k_results_for_a_tenant_holding_one_percent(one_percent_tenant, settings, expected_path):
    if expected_path == "hnsw":
        force_hnsw(settings)
    (small, c), _ = one_percent_tenant
    q = {"minilm-l6-v2:384": [random.Random(3).gauss(0, 1) for _ in range(384)]}
    res = search(whole_tenant(small), "anything", k=10, mode="vector", query_vectors=q)
    assert len(res.hits) == 10
    assert res.path.startswith(f"minilm-l6-v2:384:{expected_path}")
    assert {h.corpus_id for h in res.hits} == {c.id}
    dists = [h.distance for h in res.hits]
    assert dists == sorted(dists)
    # Both paths agree with each other on this data (exact ground truth).
    settings.RETRIEVAL_EXACT_MAX_ROWS = 10**9
    exact = search(whole_tenant(small), "anything", k=10, mode="vector", query_vectors=q)
    assert ids(res) == ids(exact)


def test_hnsw_inside_a_caller_transaction_restores_planner_settings(one_percent_tenant, settings):
    force_hnsw(settings)
    (small, _), _ = one_percent_tenant
    q = {"minilm-l6-v2:384": [1.0] * 384}
    with activate(whole_tenant(small)):
        search(whole_tenant(small), "x", k=5, mode="vector", query_vectors=q)
        with connections["default"].cursor() as cur:
            cur.execute("SELECT current_setting('enable_sort'), current_setting('hnsw.iterative_scan'), "
                        "current_setting('plan_cache_mode')")
            assert cur.fetchone() == ("on", "off", "auto")


def test_scope_smaller_than_stored_count_falls_back_to_exact(one_percent_tenant, settings):
    """Stored counts are an upper bound; an HNSW scan that comes back short is redone exactly."""
    force_hnsw(settings)
    settings.RETRIEVAL_HNSW_MAX_SCAN_TUPLES = 1  # starve the index scan on purpose
    settings.RETRIEVAL_HNSW_EF_SEARCH = 1
    (small, c), _ = one_percent_tenant
    q = {"minilm-l6-v2:384": [random.Random(5).gauss(0, 1) for _ in range(384)]}
    res = search(whole_tenant(small), "x", k=10, mode="vector", query_vectors=q)
    assert len(res.hits) == 10
    assert "exact(after hnsw" in res.path


def test_path_choice_from_scope_size_and_share_of_the_index(settings):
    from kb.retrieval import use_hnsw

    assert not use_hnsw(1_000, 100_000, 100, 40)  # small scope: exact
    assert use_hnsw(20_000, 100_000, 100, 40)  # a fifth of the index: HNSW
    assert use_hnsw(50_000, 100_000, 100, 40)
    assert not use_hnsw(20_000, 10_000_000, 100, 40)  # 0.2% of the index: the filtered index scan would crawl
    assert not use_hnsw(50_000, None, 100, 40)  # the model has no index


def test_model_without_an_index_is_searched_exactly(settings):
    force_hnsw(settings)
    tenant = make_tenant("NoIndex")
    c = corpus(tenant, "C", model="noindex", dim=3, chunk_count=5000)
    chunk(doc(c, "D"), "x", embedding=[1.0, 0, 0])
    res = search(whole_tenant(tenant), "x", mode="vector", query_vectors={"noindex:3": [1.0, 0, 0]})
    assert res.path == "noindex:3:exact" and len(res.hits) == 1


# --- Models are never compared --------------------------------------------------------------------

def test_different_embedding_models_are_never_compared():
    tenant = make_tenant("Models")
    m1 = corpus(tenant, "Old", model="alpha", dim=4)
    m2 = corpus(tenant, "New", model="beta", dim=3)
    a1 = chunk(doc(m1, "A1"), "alpha one", embedding=[1.0, 0, 0, 0])
    # Same numbers as the alpha query, but a beta vector: comparing it with the alpha query would be a bug.
    b_lookalike = chunk(doc(m2, "B1"), "beta one", embedding=[1.0, 0, 0])
    b_match = chunk(doc(m2, "B2"), "beta two", embedding=[0, 1.0, 0])
    # A chunk of the alpha corpus already re-embedded into another model is not searched as alpha.
    stray = chunk(doc(m1, "A2"), "alpha stray", embedding=[1.0, 0, 0, 0], model_key="gamma:4")
    q = {"alpha:4": [1.0, 0, 0, 0], "beta:3": [0, 1.0, 0]}
    res = search(whole_tenant(tenant), "one", k=10, mode="vector", query_vectors=q)
    by_id = {h.chunk_id: h for h in res.hits}
    assert stray.id not in by_id
    assert by_id[a1.id].distance == pytest.approx(0.0, abs=1e-6)
    assert by_id[b_match.id].distance == pytest.approx(0.0, abs=1e-6)
    assert by_id[b_lookalike.id].distance == pytest.approx(1.0, abs=1e-6)
    assert {h.embedding_model for h in res.hits} == {"alpha:4", "beta:3"}
    assert sorted(res.applied_filter["model_keys"]) == ["alpha:4", "beta:3"]
    # Vector search of one model's corpus only embeds for that model.
    only = search(whole_tenant(tenant), "one", k=10, mode="vector", filters=SearchFilters(corpus_ids=(m2.id,)),
                  query_vectors={"beta:3": [0, 1.0, 0]})
    assert set(ids(only)) == {b_match.id, b_lookalike.id}


# --- Options --------------------------------------------------------------------------------------

def test_max_distance_and_mmr():
    tenant = make_tenant("Options")
    c = corpus(tenant, "C", model="craft", dim=3)
    near = chunk(doc(c, "Near"), "near", embedding=[1.0, 0.0, 0.0])
    dup = chunk(doc(c, "Dup"), "near duplicate", embedding=[1.0, 0.01, 0.0])
    other = chunk(doc(c, "Other"), "other side", embedding=[0.8, 0.0, 0.6])
    far = chunk(doc(c, "Far"), "far away", embedding=[-1.0, 0.0, 0.0])
    q = {"craft:3": [1.0, 0.0, 0.0]}
    scope = whole_tenant(tenant)
    res = search(scope, "x", k=10, mode="vector", query_vectors=q, max_distance=0.5)
    assert set(ids(res)) == {near.id, dup.id, other.id} and far.id not in ids(res)
    plain = search(scope, "x", k=2, mode="vector", query_vectors=q)
    assert ids(plain) == [near.id, dup.id]
    diverse = search(scope, "x", k=2, mode="vector", query_vectors=q, mmr_lambda=0.5)
    assert ids(diverse) == [near.id, other.id]


def test_empty_scope_and_empty_query():
    tenant = make_tenant("Empty")
    scope = Scope(tenant_id=tenant.id, department_ids=frozenset(), role="reader")
    assert search(scope, "anything", mode="hybrid").hits == []
    c = corpus(tenant, "C")
    chunk(doc(c, "D"), "some text")
    assert search(whole_tenant(tenant), "the of and", mode="keyword").hits == []  # stop words only


def test_search_requires_a_scope():
    with pytest.raises(TypeError):
        search(1, "x")  # type: ignore[arg-type]


def test_search_command_prints_hits(two_tenants):
    from io import StringIO

    from django.core.management import call_command

    t = two_tenants
    out = StringIO()
    call_command("search", "sales staff", tenant=t["a"].slug, mode="keyword", k=3, department=["Sales"], stdout=out)
    text = out.getvalue()
    assert "Sales travel" in text and "Beta travel" not in text and "Eng travel" not in text
    out = StringIO()
    call_command("search", "travel", tenant=t["a"].slug, corpus=["Eng wiki"], as_json=True, stdout=out)
    assert '"document_title": "Eng travel"' in out.getvalue()


# --- BM25 -----------------------------------------------------------------------------------------

def test_keyword_scores_are_bm25():
    """Scores equal a BM25 computed here from PostgreSQL's own lexemes (Lucene idf, k1=1.2, b=0.75)."""
    import math

    tenant = make_tenant("BM25")
    c = corpus(tenant, "C")
    texts = ["The refund policy covers refunds of damaged goods and refund requests",
             "Travel policy: hotels, flights and meals",
             "Damaged goods are replaced within a week",
             "Security policy for laptops"]
    d = doc(c, "Doc")
    chunks = [chunk(d, t) for t in texts]
    query = "refund for damaged laptops under the policy"
    scope = whole_tenant(tenant)
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", [query])
        terms = [r[0] for r in cur.fetchall()]
        tfs = []
        for ch in chunks:
            cur.execute("SELECT lexeme, array_length(positions, 1) FROM unnest((SELECT search_vector FROM kb_chunk "
                        "WHERE tenant_id = %s AND id = %s))", [ch.tenant_id, ch.id])
            tfs.append(dict(cur.fetchall()))
    n = len(chunks)
    lengths = [len(t) for t in texts]
    avg = sum(lengths) / n
    expected = {}
    for ch, tf, dl in zip(chunks, tfs, lengths, strict=True):
        s = 0.0
        for t in terms:
            df = sum(1 for x in tfs if t in x)
            if t in tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf[t] * 2.2 / (tf[t] + 1.2 * (1 - 0.75 + 0.75 * dl / avg))
        if s:
            expected[ch.id] = s
    res = search(scope, query, k=10, mode="keyword")
    got = {h.chunk_id: h.keyword_score for h in res.hits}
    assert got.keys() == expected.keys()  # any query word matches (OR), not all of them (AND)
    for cid, score in expected.items():
        assert got[cid] == pytest.approx(score, rel=1e-4)
    assert ids(res)[0] == chunks[0].id  # "refund" twice plus "damaged" and "policy"


def test_keyword_candidates_from_rare_terms_with_fallback():
    tenant = make_tenant("Rare")
    c = corpus(tenant, "C")
    d = doc(c, "Doc")
    for i in range(20):
        chunk(d, f"common words in chunk {i}")
    rare = [chunk(d, "common words and the zebra"), chunk(d, "a zebra only")]
    scope = whole_tenant(tenant)
    res = search(scope, "zebra common", k=2, mode="keyword")
    assert set(ids(res)) == {r.id for r in rare}
    assert res.path == "bm25(candidates from 1/2 terms)"  # "zebra" only: "common" is in every chunk
    more = search(scope, "zebra common", k=5, mode="keyword")  # two zebra chunks < 5: every term generates
    assert len(more.hits) == 5 and more.path == "bm25(candidates from 2/2 terms)"
    assert ids(more)[:2] == ids(res)


def test_keyword_candidates_capped_by_count(settings):
    settings.RETRIEVAL_BM25_MAX_CANDIDATES = 3
    tenant = make_tenant("Capped")
    c = corpus(tenant, "C")
    d = doc(c, "Doc")
    for i in range(6):
        chunk(d, f"walrus notes {i}")
    for i in range(4):
        chunk(d, f"otter notes {i}")
    chunk(d, "the narwhal")
    scope = whole_tenant(tenant)
    # narwhal (df 1) fits the cap of 3, otter (df 4) would exceed it; share 0.1 alone would allow 1.1.
    res = search(scope, "narwhal otter walrus", k=1, mode="keyword")
    assert res.path == "bm25(candidates from 1/3 terms)"
    settings.RETRIEVAL_BM25_CANDIDATE_SHARE = 0.9
    res = search(scope, "narwhal otter walrus", k=1, mode="keyword")
    assert res.path == "bm25(candidates from 1/3 terms)"  # the cap, not the share (9.9), stops at otter
    settings.RETRIEVAL_BM25_MAX_CANDIDATES = 5
    res = search(scope, "narwhal otter walrus", k=1, mode="keyword")
    assert res.path == "bm25(candidates from 2/3 terms)"


@pytest.mark.tenantless_sql("adversarial: a keyword match with no tenant term is filtered by RLS alone")
def test_keyword_match_uses_the_gin_index_under_rls():
    """Under RLS a condition can only drive an index when its function is LEAKPROOF (migration kb 0003)."""
    tenant = make_tenant("Gin")
    c = corpus(tenant, "C")
    d = doc(c, "Doc")
    chunk(d, "a penguin colony")
    scope = whole_tenant(tenant)
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("SELECT current_setting('is_superuser')")
        assert cur.fetchone()[0] == "off"  # the app role: RLS applies
        cur.execute("SELECT proleakproof FROM pg_proc WHERE oid = 'ts_match_vq'::regproc")
        assert cur.fetchone()[0] is True
        # (EXPLAIN on a table this small picks the tenant index whatever the marking; measured at
        # 100,000 chunks in docs/retrieval.md: a sequential scan of every tsvector without it.)
        cur.execute("SELECT count(*) FROM kb_chunk WHERE search_vector @@ 'penguin'::tsquery")
        assert cur.fetchone()[0] == 1


class TruncatingEmbedder:
    """A hash embedder that, like a real model, ignores the words past its 12-token window."""

    max_tokens = 12

    def __init__(self) -> None:
        from kb.embedding import HashEmbedder

        self.inner, self.dim, self.model_key = HashEmbedder(64), 64, "truncating:64"

    def embed(self, texts, task="document"):
        return self.inner.embed([" ".join(t.split()[: self.max_tokens]) for t in texts], task)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_a_query_longer_than_the_models_window_is_embedded_whole(monkeypatch):
    import kb.embedding
    from kb.retrieval import prepare

    emb, real = TruncatingEmbedder(), kb.embedding.get_embedder
    for module in (kb.embedding, prepare):  # the test's chunks are embedded through kb.embedding, the query through prepare
        monkeypatch.setattr(module, "get_embedder", lambda key: emb if key == "truncating:64" else real(key))
    tenant = make_tenant("Long queries")
    c = corpus(tenant, "Notes", model="truncating", dim=64)
    parking = chunk(doc(c, "Parking"), "north garage parking permits for staff cars")
    chunk(doc(c, "Weather"), "rain forecast for tomorrow morning commute")
    # Its first window is about the weather; the three after it ask about parking.
    query = "rain forecast for tomorrow morning commute. " * 2 + "north garage parking permits for staff cars. " * 6
    hits = search(whole_tenant(tenant), query, k=2, mode="vector").hits
    assert hits[0].chunk_id == parking.id, [h.document_title for h in hits]
