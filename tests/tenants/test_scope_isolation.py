"""The scope fails closed, and RLS hides other tenants' rows even when the ORM is bypassed."""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from kb.models import Chunk, Corpus
from tenants.db_wall import tenant_statements
from tenants.scope import Scope, ScopeRequired, activate
from tests.factories import department, dept_scope, make_chunk, make_corpus, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


@pytest.fixture
def two_tenants():
    a = make_tenant("Acme")
    b = make_tenant("Globex")
    sales_a = department(a, "Sales")
    eng_a = department(a, "Engineering")
    shared_a = make_corpus(a, "shared")
    sales_c = make_corpus(a, "sales-only", department=sales_a)
    eng_c = make_corpus(a, "eng-only", department=eng_a)
    make_chunk(shared_a, "acme shared handbook")
    make_chunk(sales_c, "acme sales pricing secret")
    make_chunk(eng_c, "acme engineering runbook")
    make_chunk(make_corpus(b, "globex"), "globex canary text")
    return a, b


def test_unscoped_query_raises(two_tenants):
    with pytest.raises(ScopeRequired):
        list(Chunk.objects.all())
    with pytest.raises(ScopeRequired):
        Corpus.objects.filter(name="shared").exists()


def test_scoped_query_sees_only_its_tenant_and_departments(two_tenants):
    a, b = two_tenants
    scope = dept_scope(a, "Sales")
    with activate(scope):
        texts = set(Chunk.objects.for_scope(scope).values_list("text", flat=True))
    assert texts == {"acme shared handbook", "acme sales pricing secret"}
    with activate(whole_tenant(b)):
        texts_b = set(Chunk.objects.for_scope(whole_tenant(b)).values_list("text", flat=True))
    assert texts_b == {"globex canary text"}


def test_narrowing_never_widens(two_tenants):
    a, _ = two_tenants
    sales_only = dept_scope(a, "Sales")
    eng_id = department(a, "Engineering").id
    narrowed = sales_only.narrowed([eng_id])
    assert narrowed.department_ids == frozenset()
    with activate(narrowed):
        texts = set(Chunk.objects.for_scope(narrowed).values_list("text", flat=True))
    assert texts == {"acme shared handbook"}


def test_scope_for_wrong_tenant_sees_nothing_through_rls(two_tenants):
    """Even a query claiming tenant B's id returns nothing while RLS is set to tenant A."""
    a, b = two_tenants
    with activate(whole_tenant(a)):
        assert not Chunk.objects.for_scope(whole_tenant(b)).exists()


def raw_texts(sql_tenant: int | None) -> set[str]:
    """kb_chunk's texts as the application role, with `sql_tenant` set the application's way (with its proof)."""
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute(tenant_statements(sql_tenant))
        cur.execute("SELECT text FROM kb_chunk")
        return {r[0] for r in cur.fetchall()}


@pytest.mark.tenantless_sql("adversarial: raw SQL without a tenant term sees only the RLS tenant's rows")
def test_rls_hides_other_tenants_from_raw_sql(two_tenants):
    a, b = two_tenants
    assert raw_texts(None) == set()  # no tenant set: nothing, not everything
    assert raw_texts(b.id) == {"globex canary text"}
    texts_a = raw_texts(a.id)
    assert "globex canary text" not in texts_a
    assert len(texts_a) == 3  # RLS is per tenant; departments are the scope's job


def test_rls_rejects_writing_into_another_tenant(two_tenants):
    a, b = two_tenants
    from django.db import DatabaseError, transaction

    with pytest.raises(DatabaseError), transaction.atomic(using="default"), activate(whole_tenant(a)):
        Corpus.objects.create(tenant=b, name="smuggled")


def test_application_role_cannot_bypass_rls():
    with connections["default"].cursor() as cur:
        cur.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert cur.fetchone() == (False, False)
        cur.execute("SELECT tableowner = current_user FROM pg_tables WHERE tablename = 'kb_chunk'")
        assert cur.fetchone() == (False,)
        cur.execute("SELECT relforcerowsecurity FROM pg_class WHERE relname = 'kb_chunk'")
        assert cur.fetchone() == (True,)
    from django.db import DatabaseError, transaction

    for statement in ("ALTER TABLE kb_chunk DISABLE ROW LEVEL SECURITY", "SET ROLE postgres",
                      "ALTER ROLE CURRENT_USER BYPASSRLS", "TRUNCATE kb_chunk"):
        with pytest.raises(DatabaseError), transaction.atomic(using="default"), connections["default"].cursor() as cur:
            cur.execute(statement)


def test_scope_is_frozen_and_validated():
    scope = Scope(tenant_id=1, department_ids=frozenset({2}))
    with pytest.raises(AttributeError):
        scope.tenant_id = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        Scope(tenant_id=0)
    with pytest.raises(ValueError):
        Scope(tenant_id=1, role="root")
