"""The tenant query checker itself (tests/query_checker.py): statements that must pass and must fail."""

from __future__ import annotations

import pytest

from tenants.scope import across_tenants
from tests import query_checker
from tests.query_checker import TenantTermMissing, violations

TABLES = frozenset({"kb_chunk", "kb_document", "agents_run", "tenants_membership"})

PASS = [
    # Django's own shapes: qualified columns, parenthesised WHERE, placeholders.
    'SELECT "kb_chunk"."id" FROM "kb_chunk" WHERE ("kb_chunk"."tenant_id" = %s AND "kb_chunk"."id" = %s)',
    'SELECT "kb_chunk"."id" FROM "kb_chunk" INNER JOIN "kb_document" ON ("kb_chunk"."document_id" = "kb_document"."id" '
    'AND "kb_chunk"."tenant_id" = "kb_document"."tenant_id") WHERE "kb_document"."tenant_id" = %s',
    'SELECT c.id FROM kb_chunk c JOIN kb_document d ON d.id = c.document_id AND d.tenant_id = %s WHERE c.tenant_id = %s',
    "SELECT id FROM kb_chunk WHERE tenant_id = 3",  # unqualified: the block's only tenant table
    'SELECT "kb_chunk"."id" FROM "kb_chunk" WHERE "kb_chunk"."tenant_id" IN (%s, %s)',
    "SELECT c.id FROM kb_chunk c WHERE c.tenant_id = ANY(%s) AND c.embedding <=> %s::vector < 0.5 ORDER BY c.embedding <#> %s",
    'UPDATE "kb_chunk" SET "text" = %s WHERE ("kb_chunk"."id" = %s AND "kb_chunk"."tenant_id" = %s)',
    'DELETE FROM "kb_chunk" WHERE ("kb_chunk"."tenant_id" = %s AND "kb_chunk"."document_id" IN (%s))',
    'INSERT INTO "kb_chunk" ("tenant_id", "text") VALUES (%s, %s) RETURNING "kb_chunk"."id"',
    # psycopg's binary and named placeholders; an INSERT ... SELECT from unnest.
    "INSERT INTO kb_chunk (tenant_id, text, embedding) SELECT %(tenant)s, u.t, u.e "
    "FROM unnest(%(text)s::text[], %(embedding)b::vector[]) AS u(t, e) RETURNING id",
    # A correlated subquery joined on an outer constrained alias; a subquery in IN constrained itself.
    "SELECT d.id FROM kb_document d WHERE d.tenant_id = %s AND EXISTS "
    "(SELECT 1 FROM kb_chunk c WHERE c.document_id = d.id AND c.tenant_id = d.tenant_id)",
    "SELECT d.id FROM kb_document d WHERE d.tenant_id = %s AND d.id IN (SELECT U0.document_id FROM kb_chunk U0 "
    "WHERE U0.tenant_id = %s)",
    # Django's FilteredRelation (tenants.tenant_models.same_tenant) parenthesises the outer column.
    'SELECT COUNT(td."id") FROM "kb_corpus" LEFT OUTER JOIN "kb_document" td ON ("kb_corpus"."id" = td."corpus_id" '
    'AND (td."tenant_id" = ("kb_corpus"."tenant_id"))) WHERE "kb_corpus"."tenant_id" = %s GROUP BY "kb_corpus"."id"',
    "WITH r AS MATERIALIZED (SELECT c.id FROM kb_chunk c WHERE c.tenant_id = $1) SELECT r.id FROM r",
    "SET LOCAL app.tenant_id = '3'; SELECT c.id FROM kb_chunk c WHERE c.tenant_id = %s",
    "PREPARE kb_1_ab AS SELECT c.id FROM kb_chunk c WHERE c.tenant_id = $1; EXECUTE kb_1_ab(%s)",
    # Not tenant tables, DDL, catalogue reads.
    'SELECT "tenants_tenant"."id" FROM "tenants_tenant" WHERE "tenants_tenant"."slug" = %s',
    "CREATE INDEX IF NOT EXISTS kb_chunk_hnsw ON kb_chunk USING hnsw ((embedding::vector(384)) vector_cosine_ops)",
    "TRUNCATE kb_chunk, kb_document RESTART IDENTITY CASCADE",
    "SELECT relname FROM pg_class WHERE relname = 'kb_chunk'",
]

FAIL = [
    'SELECT "kb_chunk"."id" FROM "kb_chunk" WHERE "kb_chunk"."id" = %s',
    'UPDATE "kb_chunk" SET "text" = %s WHERE "kb_chunk"."id" = %s',  # Model.save()'s UPDATE
    'DELETE FROM "kb_chunk" WHERE "kb_chunk"."document_id" IN (%s)',  # the deletion Collector's
    'INSERT INTO "kb_chunk" ("text") VALUES (%s)',
    # A join whose second tenant table is constrained by nothing.
    'SELECT "kb_chunk"."id" FROM "kb_chunk" INNER JOIN "kb_document" ON ("kb_chunk"."document_id" = '
    '"kb_document"."id") WHERE "kb_chunk"."tenant_id" = %s',
    # Under OR the term constrains nothing.
    "SELECT c.id FROM kb_chunk c WHERE c.tenant_id = %s OR c.id = %s",
    # Two aliases of one table: each needs its own.
    "SELECT a.id FROM kb_chunk a JOIN kb_chunk b ON b.id = a.id WHERE a.tenant_id = %s",
    # The term on another column; a subquery without one.
    "SELECT c.id FROM kb_chunk c WHERE c.department_id = %s",
    "SELECT d.id FROM kb_document d WHERE d.tenant_id = %s AND d.id IN (SELECT U0.document_id FROM kb_chunk U0)",
    "PREPARE kb_1_cd AS SELECT c.id FROM kb_chunk c WHERE c.id = $1",
    # A tenant_id equal to a column of its own block is no value.
    "SELECT c.id FROM kb_chunk c WHERE c.tenant_id = c.department_id",
]


@pytest.mark.parametrize("sql", PASS)
def test_statements_with_a_tenant_term_for_each_table_pass(sql):
    assert violations(sql, TABLES) == []


@pytest.mark.parametrize("sql", FAIL)
def test_statements_missing_a_tenant_term_fail(sql):
    assert violations(sql, TABLES)


def test_check_raises_with_the_sql_and_exemptions_let_it_through():
    sql = FAIL[0]
    with pytest.raises(TenantTermMissing, match="kb_chunk"):
        query_checker.check(sql, TABLES)
    with across_tenants("test: a deliberate cross-tenant read"):
        query_checker.check(sql, TABLES)
    with query_checker.allowed("test"):
        query_checker.check(sql, TABLES)
    with pytest.raises(ValueError), across_tenants(" "):
        pass


def test_link_tables_count_once_their_model_has_a_tenant_field():
    from django.apps import apps

    tables = query_checker.tenant_tables_of(apps.get_models(include_auto_created=True))
    assert {"kb_chunk", "kb_document", "agents_run", "tenants_membership", "tenants_department"} <= tables
    assert "tenants_tenant" not in tables and "auth_user" not in tables
