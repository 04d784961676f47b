"""Fixtures for the agent tests: a small policy corpus per tenant, embedded with the hash embedder."""

from __future__ import annotations

import pytest
from django.db import connections

from agents.messages import ModelRequest, ModelTurn
from agents.providers.offline import OfflineProvider
from kb.embedding import get_embedder
from kb.models import Chunk, Corpus, Document
from tenants.models import Department
from tenants.scope import activate
from tests.factories import department, make_chunk, make_tenant, whole_tenant

EMBEDDER = "hash:64"

TRAVEL = [
    "Economy class is required for flights under six hours. Business class needs director approval.",
    "Hotel stays are reimbursed up to EUR 180 per night in capital cities and EUR 140 elsewhere.",
    "When a business trip is extended with personal days, only the travel costs of the business part can be claimed. "
    "Hotel nights and meals on personal days are not reimbursed.",
]
LEAVE = [
    "Personal days added to a business trip are taken as annual leave and must be approved by your manager.",
    "Employees receive 25 days of annual leave per calendar year.",
    "Sick leave requires a doctor's note from the third day of absence.",
]
SECRET = ["The Sales commission rate is 7 percent of net revenue for new accounts."]


def add_chunk(corpus: Corpus, text: str, title: str, *, flags: list[str] | None = None, metadata: dict | None = None) -> Chunk:
    emb = get_embedder(EMBEDDER)
    chunk = make_chunk(corpus, text, title=title, embedding=emb.embed([text])[0])
    scope = whole_tenant(corpus.tenant)
    with activate(scope):
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector('english', %s || ' ' || text) "
                        "WHERE tenant_id = %s AND id = %s", [title, chunk.tenant_id, chunk.id])
        if flags:
            Chunk.objects.for_scope(scope).filter(pk=chunk.pk).update(flags=flags)
            chunk.flags = flags
        if metadata:
            Document.objects.for_scope(scope).filter(pk=chunk.document_id).update(metadata=metadata)
    return chunk


def hash_corpus(tenant, name: str, department: Department | None = None) -> Corpus:
    """A corpus embedded with the deterministic hash:64 test embedder."""
    with activate(whole_tenant(tenant)):
        return Corpus.objects.create(tenant=tenant, department=department, name=name, embedding_model="hash", embedding_dim=64)


def make_policy_corpus(tenant):
    corpus = hash_corpus(tenant, "Policies")
    chunks = {}
    for i, text in enumerate(TRAVEL):
        chunks[f"travel{i}"] = add_chunk(corpus, text, "Travel and Expense Policy", metadata={"category": "travel", "source": "handbook"})
    for i, text in enumerate(LEAVE):
        chunks[f"leave{i}"] = add_chunk(corpus, text, "Leave Policy", metadata={"category": "leave", "source": "handbook"})
    sales = department(tenant, "Sales")
    sales_corpus = hash_corpus(tenant, "Sales only", department=sales)
    chunks["secret"] = add_chunk(sales_corpus, SECRET[0], "Sales Commission")
    return corpus, chunks


@pytest.fixture
def acme(db):
    tenant = make_tenant("Acme")
    corpus, chunks = make_policy_corpus(tenant)
    return tenant, corpus, chunks


@pytest.fixture
def globex(db):
    tenant = make_tenant("Globex")
    corpus = hash_corpus(tenant, "Globex policies")
    canary = add_chunk(corpus, "Globex canary: hotel stays reimbursed up to EUR 999 per night for annual leave travel.", "Globex Travel")
    return tenant, corpus, canary


class RecordingOffline(OfflineProvider):
    """The offline provider, keeping every request it is sent (what a test compares the record with)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ModelRequest] = []

    def generate(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        return super().generate(request)
