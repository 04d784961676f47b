"""Hybrid search with BM25 on a side connection (kb.retrieval.retrieve): same hits, same tenant, survives a dead connection.

Transactional tests: the side connection only sees committed rows, and search() only uses it
outside the caller's transaction.
"""

from __future__ import annotations

import pytest
from django.db import connections

from kb.embedding import get_embedder
from kb.models import Corpus
from kb.retrieval import search
from tenants.scope import activate
from tests.factories import make_chunk, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=True)

TEXTS = [
    "Hotel stays are reimbursed up to EUR 180 per night in capital cities.",
    "Economy class is required for flights under six hours.",
    "Personal days added to a business trip are taken as annual leave.",
    "Laptops must be encrypted and locked when unattended.",
    "Receipts for meals are needed for every claim above EUR 25.",
]


def _corpus_with(tenant, texts: list[str], marker: str) -> None:
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Policies", embedding_model="hash", embedding_dim=64)
    emb = get_embedder("hash:64")
    for i, text in enumerate(texts):
        chunk = make_chunk(corpus, f"{text} {marker}", title=f"Policy {i}", embedding=emb.embed([f"{text} {marker}"])[0])
        with activate(scope), connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector('english', text) WHERE tenant_id = %s AND id = %s",
                        [chunk.tenant_id, chunk.id])


@pytest.fixture
def tenants():
    ours, theirs = make_tenant("Ours"), make_tenant("Theirs")
    _corpus_with(ours, TEXTS, "ours")
    _corpus_with(theirs, TEXTS, "theirs")  # the same words: only RLS and the scope keep them apart
    return ours, theirs


QUERIES = ["hotel night reimbursed", "annual leave business trip", "meal receipts claim", "encrypted laptops"]


def test_side_connection_gives_the_same_hits_in_the_same_tenant(tenants, settings):
    ours, _ = tenants
    scope = whole_tenant(ours)
    settings.RETRIEVAL_PARALLEL_WORKERS = 2
    side = [search(scope, q, k=5, mode="hybrid") for q in QUERIES]
    settings.RETRIEVAL_PARALLEL_WORKERS = 0
    serial = [search(scope, q, k=5, mode="hybrid") for q in QUERIES]
    for a, b in zip(side, serial, strict=True):
        assert "(side connection)" in a.path and "side connection" not in b.path
        assert [(h.chunk_id, round(h.score, 9)) for h in a.hits] == [(h.chunk_id, round(h.score, 9)) for h in b.hits]
        assert a.hits and all(h.text.endswith("ours") for h in a.hits)


def test_inside_a_transaction_the_search_stays_on_the_callers_connection(tenants):
    ours, _ = tenants
    with activate(whole_tenant(ours)):
        res = search(whole_tenant(ours), QUERIES[0], k=5, mode="hybrid")
    assert res.hits and "side connection" not in res.path


def test_a_dead_side_connection_is_replaced_and_the_search_still_answers(tenants):
    ours, _ = tenants
    scope = whole_tenant(ours)
    assert "(side connection)" in search(scope, QUERIES[0], k=5, mode="hybrid").path
    with connections["owner"].cursor() as cur:  # kill every other session of this database: the side connections
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
    connections["default"].close()  # ours was among them
    res = search(scope, QUERIES[1], k=5, mode="hybrid")  # the side fails, the caller runs BM25 itself
    assert res.hits and all(h.text.endswith("ours") for h in res.hits)
    assert "side connection" not in res.path
    again = [search(scope, q, k=5, mode="hybrid") for q in QUERIES]  # a worker reconnects
    assert any("(side connection)" in r.path for r in again)
    assert all(h.text.endswith("ours") for r in again for h in r.hits)
