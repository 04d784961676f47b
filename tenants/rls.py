"""PostgreSQL row-level security: the second wall behind the scoped managers.

Tenant-owned tables get ENABLE + FORCE ROW LEVEL SECURITY and one policy comparing the row's
tenant_id with the transaction-local setting `app.tenant_id` (set by tenants.scope.activate).
An unset tenant matches nothing, so a forgotten scope fails closed.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connections
from django.db.migrations.operations import RunSQL

TENANT_EXPR = "NULLIF(current_setting('app.tenant_id', true), '')::bigint"


def enable_rls(table: str) -> RunSQL:
    """Migration operation that puts `table` behind the tenant policy."""
    return RunSQL(
        sql=[
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


def grant_app_role(sender, using: str = "default", **kwargs) -> None:
    """After migrations (run as owner): make sure the app role exists and may use the tables.

    The role never gets ownership, superuser, BYPASSRLS or TRUNCATE.
    """
    if using != "owner" or getattr(sender, "name", "") != "tenants":
        return
    role = settings.DATABASE_APP_USER
    password = settings.DATABASE_APP_PASSWORD
    with connections[using].cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if not cur.fetchone():
            cur.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE NOCREATEDB')
        if password:
            cur.execute(f"ALTER ROLE \"{role}\" PASSWORD %s", [password])
        cur.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        cur.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
        cur.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        cur.execute("SELECT current_database()")
        dbname = cur.fetchone()[0]
        cur.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{role}"')
    # Tables that must stay append-only drop UPDATE/DELETE for the role again.
    for hook in APPEND_ONLY_HOOKS:
        hook(using)


APPEND_ONLY_HOOKS: list = []
