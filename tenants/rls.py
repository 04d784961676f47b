"""PostgreSQL row-level security: the second wall behind the scoped managers.

Tenant-owned tables get ENABLE + FORCE ROW LEVEL SECURITY and one policy comparing the row's
tenant_id with `grounded_tenant()`: the transaction's `app.tenant_id`, but only with a valid
`app.tenant_proof` signed by the application process (tenants.db_wall), so SQL run as the application
role cannot name a tenant of its choosing. An unset, unproven or expired tenant matches nothing, so a
forgotten scope fails closed. The tenants app's own tables and link tables are in
tenants/migrations/0003_row_level_security.py (the link tables' policies compare their own tenant_id since
0008_tenant_keys.py, which also made every policy call `grounded_tenant()` bare: no subquery); the guard on
auth_user (no privilege flags, sign-in details only of the current tenant's own users) in 0003 and 0006_guard_user_accounts.py; the wall's
key, schema and functions in 0007_database_wall.py (and `WALL_SQL`, which every `enable_rls` repeats so
that a migration of any app, in any order, finds them).
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.migrations.operations import RunSQL

from tenants.conf import product_settings
from tenants.db_wall import install_key

# What policies compared tenant_id with before the wall (0007 rewrites policies from it, and back).
LEGACY_TENANT_EXPR = "NULLIF(current_setting('app.tenant_id', true), '')::bigint"
# The current tenant, proven: see WALL_SQL. A bare call, no subquery: Citus refuses subqueries in the policies of
# distributed tables (tenants 0008 rewrote every policy from INITPLAN_TENANT_EXPR to this). The planner may
# evaluate a bare STABLE call in a Filter once per row (bench/db_wall.py measures the cost, docs/architecture.md).
TENANT_EXPR = "grounded_tenant()"
# What policies compared tenant_id with from tenants 0007 to 0008: an InitPlan, once per statement and table.
INITPLAN_TENANT_EXPR = "(SELECT grounded_tenant())"

PRIVATE_SCHEMA = "grounded_private"


def _digits(text: str, most: int) -> str:
    """SQL condition: `text` is 1 to `most` ASCII digits (no regular expression: one costs ~10 us a call)."""
    return f"(length({text}) BETWEEN 1 AND {most} AND ltrim({text}, '0123456789') = '')"


def proof_valid_sql(purpose: str, subject: str, proof: str) -> str:
    """PL/pgSQL condition (parenthesized: IF would end at the CASE's first THEN): `proof` (text) is exactly
    `<expiry>.<hex HMAC-SHA256 of "<purpose>:<subject>:<expiry>">` under the stored key, and `expiry` (epoch
    seconds) is not before the transaction's start. Built-in sha256() only; CASE keeps the cast behind its check."""
    expiry = f"split_part({proof}, '.', 1)"
    return f"""(CASE
            WHEN {proof} IS NULL OR NOT {_digits(expiry, 12)} THEN false
            WHEN {expiry}::bigint < extract(epoch FROM now()) THEN false
            ELSE EXISTS (SELECT 1 FROM {PRIVATE_SCHEMA}.wall_key k WHERE k.id = 1 AND {proof} = {expiry} || '.' || encode(sha256(
                k.k_opad || sha256(k.k_ipad || convert_to('{purpose}:' || {subject} || ':' || {expiry}, 'UTF8'))), 'hex'))
        END)"""  # noqa: S608  (SQL text of fixed identifiers, no values)


# The wall: the key's pads in a schema the application role cannot use, and the definer functions that
# check proofs against it. Idempotent. Logged in as the owner (migrations, maintenance), the plain setting
# is accepted: that role owns the tables and can switch row-level security off anyway.
DEFINER_WALL = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
WALL_SQL = [
    f"CREATE SCHEMA IF NOT EXISTS {PRIVATE_SCHEMA}",
    f"REVOKE ALL ON SCHEMA {PRIVATE_SCHEMA} FROM PUBLIC",
    f"""CREATE TABLE IF NOT EXISTS {PRIVATE_SCHEMA}.wall_key (
        id integer PRIMARY KEY CHECK (id = 1),
        k_ipad bytea NOT NULL CHECK (length(k_ipad) = 64),
        k_opad bytea NOT NULL CHECK (length(k_opad) = 64))""",
    f"REVOKE ALL ON {PRIVATE_SCHEMA}.wall_key FROM PUBLIC",
    f"""CREATE OR REPLACE FUNCTION public.grounded_tenant() RETURNS bigint
        LANGUAGE plpgsql STABLE PARALLEL SAFE {DEFINER_WALL} AS $$
        DECLARE
            subject text := current_setting('app.tenant_id', true);
            proof text;
        BEGIN
            IF subject IS NULL OR NOT {_digits("subject", 18)} OR left(subject, 1) = '0' THEN
                RETURN NULL;
            END IF;
            IF session_user = current_user THEN
                RETURN subject::bigint;
            END IF;
            proof := current_setting('app.tenant_proof', true);
            IF {proof_valid_sql("tenant", "subject", "proof")} THEN
                RETURN subject::bigint;
            END IF;
            RETURN NULL;
        END;
        $$""",
    "REVOKE ALL ON FUNCTION public.grounded_tenant() FROM PUBLIC",
    f"""CREATE OR REPLACE FUNCTION {PRIVATE_SCHEMA}.user_proven(user_id integer) RETURNS boolean
        LANGUAGE plpgsql STABLE {DEFINER_WALL} AS $$
        DECLARE
            subject text := current_setting('app.user_id', true);
            proof text := current_setting('app.user_proof', true);
        BEGIN
            IF session_user = current_user THEN
                RETURN true;
            END IF;
            IF subject IS DISTINCT FROM user_id::text THEN
                RETURN false;
            END IF;
            RETURN {proof_valid_sql("user", "subject", "proof")};
        END;
        $$""",
    f"REVOKE ALL ON FUNCTION {PRIVATE_SCHEMA}.user_proven(integer) FROM PUBLIC",
]


def enable_rls(table: str) -> RunSQL:
    """Migration operation that puts `table` behind the tenant policy."""
    return RunSQL(
        sql=[
            *WALL_SQL,
            f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY',
            f'CREATE POLICY tenant_isolation ON "{table}" '
            f"USING (tenant_id = {TENANT_EXPR}) WITH CHECK (tenant_id = {TENANT_EXPR})",
        ],
        reverse_sql=[
            f'DROP POLICY IF EXISTS tenant_isolation ON "{table}"',
            f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY',
        ],
    )


def rewrite_policies_sql(old: str, new: str, leftover: str) -> str:
    """A DO block: in every policy of the public schema, the expression `old` (SQL text, as written in the
    migrations) becomes `new`; fails if a policy still matches `leftover` (a LIKE pattern) afterwards.

    The catalog holds policies as parsed expressions: `old` is deparsed the same way (through a scratch
    view) so the textual replacement matches exactly what pg_policies shows."""
    return f"""
    DO $wall$
    DECLARE
        p record;
        old_text text;
        new_text text;
    BEGIN
        CREATE TEMPORARY VIEW grounded_wall_probe AS SELECT {old} AS a, {new} AS b;
        SELECT regexp_replace(pg_get_viewdef('grounded_wall_probe'::regclass), '^\\s*SELECT\\s+(.*) AS a,\\s+(.*) AS b;?\\s*$', '\\1'),
               regexp_replace(pg_get_viewdef('grounded_wall_probe'::regclass), '^\\s*SELECT\\s+(.*) AS a,\\s+(.*) AS b;?\\s*$', '\\2')
          INTO old_text, new_text;
        DROP VIEW grounded_wall_probe;
        FOR p IN SELECT schemaname, tablename, policyname, qual, with_check FROM pg_policies
                 WHERE schemaname = 'public' AND (strpos(qual, old_text) > 0 OR strpos(with_check, old_text) > 0) LOOP
            EXECUTE format('ALTER POLICY %I ON %I.%I', p.policyname, p.schemaname, p.tablename)
                || CASE WHEN p.qual IS NULL THEN '' ELSE ' USING (' || replace(p.qual, old_text, new_text) || ')' END
                || CASE WHEN p.with_check IS NULL THEN '' ELSE ' WITH CHECK (' || replace(p.with_check, old_text, new_text) || ')' END;
        END LOOP;
        IF EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = 'public'
                   AND (qual LIKE '{leftover}' OR with_check LIKE '{leftover}')) THEN
            RAISE EXCEPTION 'a row-level security policy still matches %: rewrite it by hand', '{leftover}';
        END IF;
    END
    $wall$
    """  # noqa: S608  (expressions and a pattern from code, never from input)


def grant_app_role(sender: object, using: str = "default", **kwargs: Any) -> None:
    """After migrations (run as owner): make sure the app role exists and may use the tables.

    The role never gets ownership, superuser, BYPASSRLS or TRUNCATE. It may run the two
    SECURITY DEFINER look-ups that authentication needs before a tenant is known and the wall's
    `grounded_tenant()`, and may not write Django's permission and group tables (so it cannot grant
    itself or anyone admin permissions). Then this process's wall key is installed (tenants.db_wall).
    Safe to run again: every statement is idempotent, and functions not created yet (a database
    migrated to before tenants 0003) are skipped.
    """
    if using != "owner" or getattr(sender, "name", "") != "tenants":
        return
    role = product_settings.DATABASE_APP_USER
    password = product_settings.DATABASE_APP_PASSWORD
    with connections[using].cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if not cur.fetchone():
            cur.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE NOCREATEDB')
        if password:
            cur.execute(f"ALTER ROLE \"{role}\" PASSWORD %s", [password])
        cur.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        cur.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
        cur.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        for table in PERMISSION_TABLES:
            cur.execute("SELECT to_regclass(%s)", [table])
            if cur.fetchone()[0] is not None:
                cur.execute(f'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON "{table}" FROM "{role}"')
        for function in DEFINER_FUNCTIONS:
            cur.execute("SELECT to_regprocedure(%s)", [function])
            if cur.fetchone()[0] is not None:
                cur.execute(f'GRANT EXECUTE ON FUNCTION {function} TO "{role}"')
        cur.execute("SELECT current_database()")
        dbname = cur.fetchone()[0]
        cur.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{role}"')
    # The wall's key, from this process's key file (tenants.db_wall): `migrate` installs or rotates it.
    install_key(using)
    # Tables that must stay append-only drop UPDATE/DELETE for the role again.
    for hook in APPEND_ONLY_HOOKS:
        hook(using)


APPEND_ONLY_HOOKS: list = []

# Django's permission tables: read-only for the application role.
PERMISSION_TABLES = ("auth_user_user_permissions", "auth_user_groups", "auth_group_permissions", "auth_group")
# The cross-tenant look-ups of tenants.principals (created by tenants 0003, owned by the owner role).
# grounded_tenant() checks the tenant's proof for every policy (tenants 0007). None of them opens the
# grounded_private schema (the wall's key) to the role.
DEFINER_FUNCTIONS = ("grounded_api_key_tenant(text)", "grounded_user_tenants(integer)", "grounded_tenant()")
