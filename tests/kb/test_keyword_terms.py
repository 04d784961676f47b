"""Keyword search on long queries: the rarest lexemes are scored, whatever their place in the alphabet."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connections

from kb.models import Chunk, Corpus, Document
from kb.retrieval import search
from kb.retrieval.retrieve import rarest_terms
from kb.retrieval.tunables import MAX_QUERY_TERMS, MAX_SCORED_TERMS
from tenants.scope import activate
from tests.factories import make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=False)


def _chunks(tenant, texts: list[str]) -> list[Chunk]:
    scope = whole_tenant(tenant)
    with activate(scope):
        c = Corpus.objects.create(tenant=tenant, name="C", embedding_model="hash", embedding_dim=64, chunk_count=len(texts))
        d = Document.objects.create(tenant=tenant, corpus=c, title="Notes", source_name="notes.txt", mime_type="text/plain",
                                    sha256=hashlib.sha256(b"notes").hexdigest(), status="ready", chunk_count=len(texts))
        out = [Chunk.objects.create(tenant=tenant, corpus=c, document=d, ordinal=i, text=t, locator="", char_start=0,
                                    char_end=len(t), content_hash=hashlib.sha256(t.encode()).hexdigest())
               for i, t in enumerate(texts)]
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector(%s::regconfig, text) "
                        "WHERE tenant_id = %s AND corpus_id = %s", [c.language, c.tenant_id, c.id])
    return out


def test_rarest_terms_keeps_the_rarest_in_order():
    terms = [("b", 1.0, 5), ("a", 2.0, 2), ("d", 0.5, 9), ("c", 2.0, 2)]
    assert rarest_terms(terms, 3) == [("b", 1.0, 5), ("a", 2.0, 2), ("c", 2.0, 2)]
    assert rarest_terms(terms, 2) == [("a", 2.0, 2), ("c", 2.0, 2)]
    assert rarest_terms(terms, 4) == terms


def test_a_long_query_keeps_its_rare_word_late_in_the_alphabet():
    """More lexemes than are scored: the rare one decides, though 40 others sort before it."""
    assert MAX_SCORED_TERMS < 41 <= MAX_QUERY_TERMS
    fillers = [f"filler{i:02d}" for i in range(40)]
    tenant = make_tenant("Long query")
    common = _chunks(tenant, [" ".join(fillers) + f" part {i}" for i in range(30)] + ["zymurgy notes"])
    target = common.pop()
    res = search(whole_tenant(tenant), " ".join(fillers) + " zymurgy", k=5, mode="keyword")
    assert [h.chunk_id for h in res.hits][0] == target.id
    assert res.path.endswith(f"/{MAX_SCORED_TERMS} terms)")
