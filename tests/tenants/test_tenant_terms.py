"""The queries Django makes by itself for tenant models carry a tenant_id term (tenants.tenant_models):
save()'s UPDATE, refresh_from_db, foreign-key descriptors, joins across foreign keys, and the deletion
Collector's look-ups and batch DELETEs. Each statement is captured and read by the query checker."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connections
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from kb.ingest.vectors import vector_cursor
from kb.models import Chunk, Corpus, Document
from tenants.scope import activate
from tests import query_checker
from tests.factories import make_chunk, make_corpus, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

TABLES = query_checker.tenant_tables_of(apps.get_models(include_auto_created=True))


def captured(action) -> list[str]:
    with CaptureQueriesContext(connections["default"]) as ctx:
        action()
    return [q["sql"] for q in ctx.captured_queries]


def assert_tenant_terms(statements: list[str], *, expect: str) -> None:
    assert any(s.lstrip().upper().startswith(expect) for s in statements), statements
    for sql in statements:
        assert query_checker.violations(sql, TABLES) == [], sql


def test_save_refresh_and_descriptors_carry_the_tenant():
    tenant = make_tenant()
    chunk = make_chunk(make_corpus(tenant), "the canteen opens at eight")
    scope = whole_tenant(tenant)
    with activate(scope):
        chunk = Chunk.objects.for_scope(scope).get(pk=chunk.pk)
        chunk.text = "the canteen opens at nine"
        assert_tenant_terms(captured(lambda: chunk.save(update_fields=["text"])), expect="UPDATE")
        assert_tenant_terms(captured(chunk.refresh_from_db), expect="SELECT")
        assert_tenant_terms(captured(lambda: chunk.document.title), expect="SELECT")
    # Outside any activation the instance's own tenant is the term (RLS would show no row: SQL only).
    hinted = Corpus._base_manager.db_manager(hints={"instance": chunk}).all()
    assert query_checker.violations(str(hinted.query), TABLES) == []
    assert f'"kb_corpus"."tenant_id" = {tenant.pk}' in str(hinted.query)


def test_joins_across_foreign_keys_are_on_the_tenant_too():
    tenant = make_tenant()
    make_chunk(make_corpus(tenant), "a chunk")
    scope = whole_tenant(tenant)
    with activate(scope):
        assert_tenant_terms(captured(lambda: list(Corpus.objects.for_scope(scope).annotate(n=Count("documents")))),
                            expect="SELECT")
        assert_tenant_terms(captured(lambda: list(Chunk.objects.for_scope(scope).select_related("document", "corpus")
                                                  .filter(document__title__isnull=False))), expect="SELECT")


def test_deleting_a_document_cascades_with_the_tenant_on_every_statement():
    tenant = make_tenant()
    chunk = make_chunk(make_corpus(tenant), "to be deleted")
    scope = whole_tenant(tenant)
    with activate(scope):
        document = Document.objects.for_scope(scope).get(pk=chunk.document_id)
        statements = captured(document.delete)
        assert_tenant_terms(statements, expect="DELETE")
        assert not Chunk.objects.for_scope(scope).filter(pk=chunk.pk).exists()


def test_the_checker_refuses_the_same_statements_without_the_terms():
    """The installed checker fails a tenant-less statement of a test (what the suite relies on)."""
    tenant = make_tenant()
    chunk = make_chunk(make_corpus(tenant), "a chunk")
    with pytest.raises(query_checker.TenantTermMissing, match="kb_chunk"), connections["default"].cursor() as cur:
        cur.execute("UPDATE kb_chunk SET text = %s WHERE id = %s", ["x", chunk.pk])
    # The product's raw psycopg cursors on Django's connection (binary vectors) are checked as well.
    with pytest.raises(query_checker.TenantTermMissing, match="kb_embeddingcache"), vector_cursor() as raw:
        raw.execute("SELECT count(*) FROM kb_embeddingcache WHERE model_key = %s", ["hash:8"])
    with vector_cursor() as raw:
        raw.execute("SELECT count(*) FROM kb_embeddingcache WHERE tenant_id = %s AND model_key = %s", [tenant.pk, "hash:8"])
