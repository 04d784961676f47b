"""Vector searches that reuse the corpus rows this process saw for the scope (kb.retrieval.prepare,
speculate): one round trip, and a corpus added or renamed since is seen by the very next search.

Transactional tests: search() only speculates outside the caller's transaction.
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

TEXTS = ["Hotel stays are reimbursed up to EUR 180 per night.", "Economy class is required for short flights.",
         "Receipts for meals are needed for every claim above EUR 25."]


class Scripts:
    """Counts the statement scripts sent on the default connection (each one round trip)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def _corpus(tenant, name: str, texts: list[str]) -> Corpus:
    with activate(whole_tenant(tenant)):
        corpus = Corpus.objects.create(tenant=tenant, name=name, embedding_model="hash", embedding_dim=64)
    emb = get_embedder("hash:64")
    for i, text in enumerate(texts):
        make_chunk(corpus, text, title=f"{name} {i}", embedding=emb.embed([text])[0])
    return corpus


def _vector(scope, query: str):
    scripts = Scripts()
    with connections["default"].execute_wrapper(scripts):
        result = search(scope, query, k=3, mode="vector")
    return result, scripts.count


def test_a_seen_scope_is_searched_in_one_round_trip_with_the_same_hits():
    tenant = make_tenant("Acme")
    _corpus(tenant, "Policies", TEXTS)
    scope = whole_tenant(tenant)
    first, first_scripts = _vector(scope, "hotel night")
    second, second_scripts = _vector(scope, "hotel night")
    assert first_scripts == 2  # resolve, then the ranking with its hit rows
    assert second_scripts == 1  # the corpus statement travels with the ranking
    assert [h.chunk_id for h in second.hits] == [h.chunk_id for h in first.hits] and len(first.hits) == 3


def test_a_corpus_added_since_is_searched_by_the_next_search():
    tenant = make_tenant("Acme")
    _corpus(tenant, "Policies", TEXTS)
    scope = whole_tenant(tenant)
    _vector(scope, "Parking permits are issued by facilities.")
    added = _corpus(tenant, "Facilities", ["Parking permits are issued by facilities."])
    result, scripts = _vector(scope, "Parking permits are issued by facilities.")
    assert result.hits[0].corpus_id == added.id and result.hits[0].distance == pytest.approx(0.0, abs=1e-6)
    assert added.id in result.applied_filter["corpus_ids"]
    assert scripts == 3  # the speculative script, found stale, then resolve and ranking again


def test_a_renamed_corpus_is_named_afresh():
    tenant = make_tenant("Acme")
    corpus = _corpus(tenant, "Policies", TEXTS)
    scope = whole_tenant(tenant)
    _vector(scope, "meal receipts")
    with activate(scope):
        Corpus.objects.for_scope(scope).filter(id=corpus.id).update(name="Travel rules")
    result, _ = _vector(scope, "meal receipts")
    assert {h.corpus_name for h in result.hits} == {"Travel rules"}


def test_a_grown_corpus_keeps_the_speculative_plan():
    """Chunk counts only steer the path choice: a corpus that grew keeps the one-round-trip search."""
    tenant = make_tenant("Acme")
    corpus = _corpus(tenant, "Policies", TEXTS)
    scope = whole_tenant(tenant)
    _vector(scope, "hotel night")
    with activate(scope):
        Corpus.objects.for_scope(scope).filter(id=corpus.id).update(chunk_count=corpus.chunk_count + 100)
    _, scripts = _vector(scope, "hotel night")
    assert scripts == 1


def test_plan_reuse_can_be_switched_off(settings):
    tenant = make_tenant("Acme")
    _corpus(tenant, "Policies", TEXTS)
    scope = whole_tenant(tenant)
    settings.RETRIEVAL_REUSE_PLANS = False
    _vector(scope, "hotel night")
    _, scripts = _vector(scope, "hotel night")
    assert scripts == 2
