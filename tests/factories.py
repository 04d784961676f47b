"""Small factories as fixtures: tenants with departments, members, staff users, scopes, corpora and chunks.

Departments, keys and memberships sit behind row-level security like every tenant-owned row: the
factories activate the tenant they write into, as production code does.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from kb.models import Chunk, Corpus, Document
from tenants.models import Department, Membership, Tenant
from tenants.scope import Scope, activate

_seq = itertools.count(1)


def make_tenant(name: str | None = None, departments: tuple[str, ...] = ("Sales", "Engineering")) -> Tenant:
    n = next(_seq)
    tenant = Tenant.objects.create(name=name or f"Tenant {n}", slug=f"t{n}-{(name or 'x').lower().replace(' ', '-')}")
    with activate(Scope.system(tenant.id)):
        for d in departments:
            Department.objects.create(tenant=tenant, name=d)
    return tenant


def department(tenant: Tenant, name: str) -> Department:
    """`tenant`'s department called `name`."""
    with activate(Scope.system(tenant.id)):
        return Department.objects.get(tenant=tenant, name=name)


def departments_of(tenant: Tenant) -> list[Department]:
    """All of `tenant`'s departments, oldest first."""
    with activate(Scope.system(tenant.id)):
        return list(Department.objects.filter(tenant=tenant).order_by("id"))


def make_membership(user, tenant: Tenant, role: str = "reader", *, all_departments: bool = False,
                    departments: Iterable[Department] = ()) -> Membership:
    """`user`'s membership of `tenant` (created under the tenant's activation, as the API does)."""
    with activate(Scope.system(tenant.id)):
        member = Membership.objects.create(user=user, tenant=tenant, role=role, all_departments=all_departments)
        if departments:
            member.departments.set(list(departments))
    return member


def make_staff_user(username: str, password: str | None = None, *, superuser: bool = False, **fields):
    """A staff (or superuser) account made the way production makes one: through the owner connection,
    since the application role may not set those flags (tenants 0003). The row is committed only in a
    transactional test (`django_db(transaction=True, databases=["default", "owner"])`), the only kind
    in which the application role then sees it; returns the user as read through "default"."""
    user_model = get_user_model()
    with transaction.atomic(using="owner"):
        user = user_model.objects.db_manager("owner").create_user(
            username=username, password=password, is_staff=True, is_superuser=superuser, **fields)
    found = user_model.objects.filter(pk=user.pk).first()
    if found is None:
        raise RuntimeError("make_staff_user needs a transactional test: the owner connection's row is not "
                           "visible to the application role inside another test transaction")
    return found


def whole_tenant(tenant: Tenant, role: str = "admin") -> Scope:
    return Scope(tenant_id=tenant.id, all_departments=True, role=role, principal="test")


def dept_scope(tenant: Tenant, *names: str, role: str = "reader") -> Scope:
    with activate(Scope.system(tenant.id)):
        ids = list(Department.objects.filter(tenant=tenant, name__in=names).values_list("id", flat=True))
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


def as_stored(values: Iterable[float]) -> list[float]:
    """A vector as kb_chunk and kb_chunksentence store it (halfvec): each value rounded to a 2-byte float."""
    import numpy as np  # only the vector tests need it

    return [float(v) for v in np.asarray(list(values), dtype=np.float16)]
