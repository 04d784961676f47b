"""Small factories as fixtures: tenants with departments, scopes, corpora and chunks."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from kb.models import Chunk, Corpus, Document
from tenants.models import Department, Tenant
from tenants.scope import Scope, activate

_seq = itertools.count(1)


def make_tenant(name: str | None = None, departments: tuple[str, ...] = ("Sales", "Engineering")) -> Tenant:
    n = next(_seq)
    tenant = Tenant.objects.create(name=name or f"Tenant {n}", slug=f"t{n}-{(name or 'x').lower().replace(' ', '-')}")
    for d in departments:
        Department.objects.create(tenant=tenant, name=d)
    return tenant


def whole_tenant(tenant: Tenant, role: str = "admin") -> Scope:
    return Scope(tenant_id=tenant.id, all_departments=True, role=role, principal="test")


def dept_scope(tenant: Tenant, *names: str, role: str = "reader") -> Scope:
    ids = Department.objects.filter(tenant=tenant, name__in=names).values_list("id", flat=True)
    return Scope(tenant_id=tenant.id, department_ids=frozenset(ids), role=role, principal="test")


def make_corpus(tenant: Tenant, name: str = "Policies", department: Department | None = None) -> Corpus:
    with activate(whole_tenant(tenant)):
        return Corpus.objects.create(tenant=tenant, department=department, name=name)


def make_chunk(corpus: Corpus, text: str, ordinal: int | None = None, title: str = "Doc",
               embedding: list[float] | None = None) -> Chunk:
    """A document with one chunk (or a chunk added to the corpus's document titled `title`)."""
    with activate(whole_tenant(corpus.tenant)):
        doc, _ = Document.objects.for_scope(whole_tenant(corpus.tenant)).get_or_create(
            tenant=corpus.tenant, corpus=corpus, source_name=title,
            defaults={"title": title, "department": corpus.department, "mime_type": "text/plain",
                      "sha256": hashlib.sha256(title.encode()).hexdigest(), "status": "ready"},
        )
        ordinal = ordinal if ordinal is not None else Chunk.objects.for_scope(whole_tenant(corpus.tenant)).filter(document=doc).count()
        return Chunk.objects.create(
            tenant=corpus.tenant, department=corpus.department, corpus=corpus, document=doc, ordinal=ordinal,
            text=text, char_start=0, char_end=len(text), content_hash=hashlib.sha256(text.encode()).hexdigest(),
            embedding=embedding, embedding_model=corpus.model_key if embedding is not None else "",
        )


@pytest.fixture
def tenant_factory(db):
    return make_tenant
