"""The Citus check (tenants/distribution.py): the migrated schema meets Citus's rules for each table's
declared role, and the check fails on tables built the old way (issue 50).

The fixture tables live in a schema of their own, created inside the test's transaction (rolled back),
with roles of their own; beside each broken table a table built the new way must pass, so the check
cannot pass everything or fail everything."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections

from tenants.distribution import (
    ALLOWED_SET_CONFIG,
    DISTRIBUTED,
    LOCAL,
    REFERENCE,
    ROLES,
    Role,
    check_schema,
    check_tenant_setting_source,
    distribution_sql,
    errors,
    product_sources,
    read_functions,
    read_schema,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "citus_fixture"


def _migrated_schema():
    with connections["owner"].cursor() as cur:
        return read_schema(cur)


@pytest.mark.django_db(databases=["default", "owner"])
def test_the_migrated_schema_meets_citus_rules_for_every_declared_role():
    tables = _migrated_schema()
    assert "kb_chunk" in tables and "grounded_private.wall_key" in tables  # every schema the product owns
    problems = errors(check_schema(tables))
    assert problems == [], "\n" + "\n".join(map(str, problems))


@pytest.mark.django_db(databases=["default", "owner"])
def test_every_trace_and_guard_trigger_is_reported_as_a_warning():
    """Rule 5: triggers are listed (warnings), so a new trigger on a Citus table shows up here; the two that
    read tables (the user guard, the folder-grant disjointness) sit on reference tables."""
    findings = check_schema(_migrated_schema())
    triggers = {f.message.split()[1]: f.severity for f in findings if f.rule == "triggers"}
    assert {"agents_run_append_only", "auth_user_guard", "kb_sourcegrant_by_operator", "kb_sourcegrant_disjoint"} <= set(
        triggers)
    assert set(triggers.values()) == {"warning"}
    assert ROLES["kb_sourcegrant"].kind == ROLES["tenants_tenantuser"].kind == ROLES["auth_user"].kind == REFERENCE


@pytest.mark.django_db(databases=["default", "owner"])
def test_a_trigger_reading_tables_fails_on_a_distributed_table_only(old_way):
    findings = [f for f in check_schema(old_way, FIXTURE_ROLES) if f.rule == "triggers"]
    assert sorted((f.table, f.severity) for f in findings) == [
        (f"{FIXTURE}.entry", "error"), (f"{FIXTURE}.kind", "warning"), (f"{FIXTURE}.line", "warning")]


OLD_WAY = f"""
CREATE SCHEMA {FIXTURE};
CREATE TABLE {FIXTURE}.tenant (id bigint PRIMARY KEY, slug text UNIQUE);
-- distributed, the old way: a unique key without tenant_id, the id unique on its own, tenant_id nullable
CREATE TABLE {FIXTURE}.doc (id bigint PRIMARY KEY, tenant_id bigint REFERENCES {FIXTURE}.tenant,
                            name text, CONSTRAINT uniq_doc_name UNIQUE (name));
-- distributed, the old way: a key to another distributed table on id alone, an EXISTS policy
CREATE TABLE {FIXTURE}.chunk (tenant_id bigint, id bigint, doc_id bigint REFERENCES {FIXTURE}.doc (id),
                              PRIMARY KEY (tenant_id, id));
ALTER TABLE {FIXTURE}.chunk ENABLE ROW LEVEL SECURITY;
CREATE POLICY link_exists ON {FIXTURE}.chunk
    USING (EXISTS (SELECT 1 FROM {FIXTURE}.doc d WHERE d.id = doc_id));
-- the new way, beside them: composite keys, a key holding tenant_id first on both sides, a plain policy
CREATE TABLE {FIXTURE}.page (tenant_id bigint NOT NULL REFERENCES {FIXTURE}.tenant, id bigint,
                             PRIMARY KEY (tenant_id, id));
CREATE TABLE {FIXTURE}.line (tenant_id bigint NOT NULL, id bigint, page_id bigint, ordinal int,
                             PRIMARY KEY (tenant_id, id), CONSTRAINT uniq_line UNIQUE (tenant_id, page_id, ordinal),
                             FOREIGN KEY (tenant_id, page_id) REFERENCES {FIXTURE}.page (tenant_id, id) ON DELETE CASCADE);
ALTER TABLE {FIXTURE}.line ENABLE ROW LEVEL SECURITY;
CREATE POLICY by_tenant ON {FIXTURE}.line USING (tenant_id = current_setting('app.tenant_id')::bigint);
-- a key from the new way that sets the tenant to NULL on delete: refused even when it includes tenant_id
CREATE TABLE {FIXTURE}.mark (tenant_id bigint NOT NULL, id bigint, page_id bigint, PRIMARY KEY (tenant_id, id),
                             FOREIGN KEY (tenant_id, page_id) REFERENCES {FIXTURE}.page (tenant_id, id) ON DELETE SET NULL);
-- a reference table pointing at a distributed one; a unique index outside any constraint
CREATE TABLE {FIXTURE}.kind (id bigint PRIMARY KEY, example_page bigint, example_tenant bigint,
                             FOREIGN KEY (example_tenant, example_page) REFERENCES {FIXTURE}.page (tenant_id, id));
CREATE UNIQUE INDEX uniq_page_id ON {FIXTURE}.page (id) WHERE id > 0;
-- a table nobody declared; a distributed table pointing at a coordinator-only one
CREATE TABLE {FIXTURE}.stray (id bigint PRIMARY KEY);
CREATE TABLE {FIXTURE}.ledger (id bigint PRIMARY KEY);
CREATE TABLE {FIXTURE}.entry (tenant_id bigint NOT NULL, id bigint, ledger_id bigint REFERENCES {FIXTURE}.ledger,
                              PRIMARY KEY (tenant_id, id));
-- triggers: one that reads another table (on a distributed table: an error), one that looks at the row only
CREATE FUNCTION {FIXTURE}.no_clash() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {FIXTURE}.page p WHERE p.id = NEW.id AND p.tenant_id <> NEW.tenant_id) THEN
        RAISE EXCEPTION 'clash';
    END IF;
    RETURN NEW;
END $$;
CREATE FUNCTION {FIXTURE}.frozen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'frozen'; END $$;
CREATE TRIGGER no_clash BEFORE INSERT ON {FIXTURE}.entry FOR EACH ROW EXECUTE FUNCTION {FIXTURE}.no_clash();
CREATE TRIGGER frozen BEFORE UPDATE ON {FIXTURE}.line FOR EACH ROW EXECUTE FUNCTION {FIXTURE}.frozen();
CREATE TRIGGER no_clash BEFORE INSERT ON {FIXTURE}.kind FOR EACH ROW EXECUTE FUNCTION {FIXTURE}.no_clash();
"""
FIXTURE_ROLES = {
    f"{FIXTURE}.tenant": Role(REFERENCE),
    f"{FIXTURE}.doc": Role(DISTRIBUTED, "tenant_id", f"{FIXTURE}.page"),
    f"{FIXTURE}.chunk": Role(DISTRIBUTED, "tenant_id", f"{FIXTURE}.page"),
    f"{FIXTURE}.page": Role(DISTRIBUTED, "tenant_id"),
    f"{FIXTURE}.line": Role(DISTRIBUTED, "tenant_id", f"{FIXTURE}.page"),
    f"{FIXTURE}.mark": Role(DISTRIBUTED, "tenant_id", f"{FIXTURE}.page"),
    f"{FIXTURE}.kind": Role(REFERENCE),
    f"{FIXTURE}.gone": Role(LOCAL),
    f"{FIXTURE}.ledger": Role(LOCAL),
    f"{FIXTURE}.entry": Role(DISTRIBUTED, "tenant_id", f"{FIXTURE}.page"),
}


@pytest.fixture
def old_way(db):
    with connections["owner"].cursor() as cur:
        cur.execute(OLD_WAY)
        yield read_schema(cur, [FIXTURE])


@pytest.mark.django_db(databases=["default", "owner"])
@pytest.mark.parametrize(("table", "rule", "needle"), [
    ("doc", "unique keys", "unique constraint uniq_doc_name (name) does not include tenant_id"),
    ("doc", "unique keys", "primary key doc_pkey (id) does not include tenant_id"),
    ("chunk", "foreign keys", "chunk_doc_id_fkey -> citus_fixture.doc (doc_id) joins on id alone"),
    ("chunk", "policies", "policy link_exists has a subquery: (EXISTS ( SELECT 1"),
    ("doc", "distribution column", "tenant_id is nullable"),
    ("mark", "foreign keys", "ON DELETE SET NULL"),
    ("kind", "foreign keys", "a reference table cannot reference a distributed table"),
    ("entry", "foreign keys", "a distributed table can reference only distributed or reference tables"),
    ("entry", "triggers", "trigger no_clash (citus_fixture.no_clash) reads tables"),
    ("page", "unique keys", "unique index uniq_page_id (id) does not include tenant_id"),
    ("stray", "declared", "no Citus role declared"),
    ("gone", "declared", "declared in ROLES but no such table"),
])
def test_a_table_built_the_old_way_fails(old_way, table, rule, needle):
    findings = check_schema(old_way, FIXTURE_ROLES)
    mine = [f for f in errors(findings) if f.table == f"{FIXTURE}.{table}" and f.rule == rule]
    assert any(needle in f.message for f in mine), "\n".join(map(str, findings))


@pytest.mark.django_db(databases=["default", "owner"])
def test_tables_built_the_new_way_pass_and_distribute_in_an_order_citus_accepts(old_way):
    new_way = {name: old_way[name] for name in (f"{FIXTURE}.tenant", f"{FIXTURE}.page", f"{FIXTURE}.line")}
    new_way[f"{FIXTURE}.page"].keys = [k for k in new_way[f"{FIXTURE}.page"].keys if k[1] != "uniq_page_id"]
    roles = {name: FIXTURE_ROLES[name] for name in new_way}
    findings = check_schema(new_way, roles)
    assert [(f.severity, f.table, f.message.split()[1]) for f in findings] == [("warning", f"{FIXTURE}.line", "frozen")]
    sql = distribution_sql(new_way, roles).splitlines()
    drop = sql.index('ALTER TABLE "citus_fixture"."line" DROP CONSTRAINT "line_tenant_id_page_id_fkey";')
    unless = " WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{}'::regclass);"
    reference = sql.index("""SELECT create_reference_table('"citus_fixture"."tenant"')"""
                          + unless.format('"citus_fixture"."tenant"'))
    anchor = sql.index("""SELECT create_distributed_table('"citus_fixture"."page"', 'tenant_id')"""
                       + unless.format('"citus_fixture"."page"'))
    colocated = sql.index("""SELECT create_distributed_table('"citus_fixture"."line"', 'tenant_id', """
                          """colocate_with => '"citus_fixture"."page"')""" + unless.format('"citus_fixture"."line"'))
    add = next(i for i, line in enumerate(sql) if line.startswith('ALTER TABLE "citus_fixture"."line" ADD CONSTRAINT'))
    assert drop < reference < anchor < colocated < add and sql[0] == "BEGIN;" and sql[-1] == "COMMIT;"
    assert "FOREIGN KEY (tenant_id, page_id) REFERENCES citus_fixture.page(tenant_id, id) ON DELETE CASCADE" in sql[add]


STAND_INS = """
CREATE SCHEMA citus_standin;
CREATE TABLE citus_standin.pg_dist_partition (logicalrelid regclass);
CREATE TABLE citus_standin.calls (n serial, call text, target text);
CREATE FUNCTION citus_standin.create_reference_table(t regclass) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO citus_standin.calls (call, target) VALUES ('reference', t::text) $$;
CREATE FUNCTION citus_standin.create_distributed_table(t regclass, col text, colocate_with text DEFAULT 'default')
    RETURNS void LANGUAGE sql
    AS $$ INSERT INTO citus_standin.calls (call, target) VALUES ('distributed ' || col || ' ' || colocate_with, t::text) $$;
CREATE FUNCTION citus_standin.create_distributed_function(f regprocedure) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO citus_standin.calls (call, target) VALUES ('function', f::text) $$;
SET LOCAL search_path = citus_standin, public;
"""


@pytest.mark.django_db(databases=["default", "owner"])
def test_the_distribution_sql_runs_on_the_migrated_schema_against_stand_ins_for_citus():
    """Not Citus (it cannot be installed here): stand-ins with Citus's signatures that record each call. The
    script must run as it is on the migrated schema (every name resolves, every foreign key it drops comes
    back), call each Citus table once, in the order the rules need, and skip the tables Citus has."""
    with connections["owner"].cursor() as cur:
        tables, functions = read_schema(cur), read_functions(cur)
        cur.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f'")
        (keys_before,) = cur.fetchone()
        script = distribution_sql(tables, functions=functions)
        body = "\n".join(line for line in script.splitlines() if line not in ("BEGIN;", "COMMIT;"))  # the test's transaction
        cur.execute(STAND_INS)
        cur.execute(body)
        cur.execute("SELECT call, target FROM citus_standin.calls ORDER BY n")
        calls = cur.fetchall()
        cur.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f'")
        assert cur.fetchone() == (keys_before,)
        cur.execute("INSERT INTO citus_standin.pg_dist_partition SELECT 'kb_chunk'::regclass")
        cur.execute("TRUNCATE citus_standin.calls")
        cur.execute(body)  # a second run: what Citus already has is skipped
        cur.execute("SELECT target FROM citus_standin.calls WHERE call LIKE 'distributed%'")
        again = {target for (target,) in cur.fetchall()}
    citus = {name for name, role in ROLES.items() if role.kind != LOCAL}
    assert sorted(target for call, target in calls if call != "function") == sorted(citus)
    assert "grounded_tenant()" in [target for call, target in calls if call == "function"]
    kinds = [call.split()[0] for call, _ in calls]
    assert kinds == sorted(kinds, key=["reference", "function", "distributed"].index)  # reference, functions, tables
    assert calls[kinds.index("distributed")] == ("distributed tenant_id default", "tenants_department")
    assert all(call == 'distributed tenant_id "tenants_department"' for call, target in calls
               if call.startswith("distributed") and target != "tenants_department")
    assert "kb_chunk" not in again and "kb_document" in again


@pytest.mark.django_db(databases=["default", "owner"])
def test_the_functions_policies_call_are_created_on_every_node_before_the_tables_are_distributed():
    with connections["owner"].cursor() as cur:
        functions = read_functions(cur)
        tables = read_schema(cur)
    assert "grounded_tenant()" in functions  # every tenant policy calls it, on whichever node holds the shard
    sql = distribution_sql(tables, functions=functions).splitlines()
    created = sql.index("SELECT create_distributed_function('grounded_tenant()');")
    assert max(i for i, line in enumerate(sql) if "create_reference_table('\"grounded_private\".\"wall_key\"')" in line) \
        < created < min(i for i, line in enumerate(sql) if "create_distributed_table(" in line)


@pytest.mark.django_db(databases=["default", "owner"])
def test_the_command_lists_every_table_with_its_role():
    out = io.StringIO()
    try:
        call_command("distribution_check", stdout=out)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    rows = {line.split()[0]: line.split()[1] for line in out.getvalue().splitlines()[1:] if line.split()
            and line.split()[0] in ROLES}
    assert rows == {name: role.kind for name, role in ROLES.items()}
    expected = errors(check_schema(_migrated_schema()) + check_tenant_setting_source(product_sources(ROOT)))
    assert code == (1 if expected else 0)


# --- the tenant reaches the database as SET LOCAL only ---------------------------------------------

def test_the_product_sets_the_tenant_with_set_local_only():
    assert check_tenant_setting_source(product_sources(ROOT)) == []


@pytest.mark.parametrize("source", [
    'cur.execute("SELECT set_config(\'app.tenant_id\', %s, true)", [tenant_id])',
    'sql = f"SELECT  SET_CONFIG (\'app.tenant_id\', \'{tenant}\', false)"',
    'cur.execute("SET app.tenant_id = %s", [tenant_id])',
    'cur.execute("SET SESSION app.tenant_proof = \'x\'")',
])
def test_a_module_setting_the_tenant_another_way_fails(source):
    findings = check_tenant_setting_source({"kb/retrieval/example.py": source})
    assert [f.rule for f in findings] == ["SET LOCAL"] and findings[0].table == "kb/retrieval/example.py:1"


def test_set_local_and_prose_about_set_config_pass_and_a_stale_exception_fails():
    fine = '"""Never set_config(...) here."""\ncur.execute("SET LOCAL app.tenant_id = \'4\'; SET LOCAL app.tenant_proof = \'p\'")'
    assert check_tenant_setting_source({"tenants/example.py": fine}) == []
    (allowed,) = ALLOWED_SET_CONFIG
    assert check_tenant_setting_source({allowed: 'x = "PERFORM set_config(\'app.tenant_id\', t::text, true)"'}) == []
    stale = check_tenant_setting_source({allowed: 'x = "SET LOCAL app.tenant_id = 1"'})
    assert [f.message for f in stale] == ["allowed a set_config call it no longer has: drop the exception"]
