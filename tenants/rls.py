"""PostgreSQL row-level security: the second wall behind the scoped managers.

Tenant-owned tables get ENABLE + FORCE ROW LEVEL SECURITY and one policy comparing the row's
tenant_id with the transaction-local setting `app.tenant_id` (set by tenants.scope.activate).
An unset tenant matches nothing, so a forgotten scope fails closed. The tenants app's own tables and
link tables are in tenants/migrations/0003_row_level_security.py; the guard on auth_user (no privilege
flags, sign-in details only of the current tenant's own users) in 0003 and 0006_guard_user_accounts.py.
"""

from __future__ import annotations

from typing import Any

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


def grant_app_role(sender: object, using: str = "default", **kwargs: Any) -> None:
    """After migrations (run as owner): make sure the app role exists and may use the tables.

    The role never gets ownership, superuser, BYPASSRLS or TRUNCATE. It may run the two
    SECURITY DEFINER look-ups that authentication needs before a tenant is known, and may not write
    Django's permission and group tables (so it cannot grant itself or anyone admin permissions).
    Safe to run again: every statement is idempotent, and functions not created yet (a database
    migrated to before tenants 0003) are skipped.
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
    # Tables that must stay append-only drop UPDATE/DELETE for the role again.
    for hook in APPEND_ONLY_HOOKS:
        hook(using)


APPEND_ONLY_HOOKS: list = []

# Django's permission tables: read-only for the application role.
PERMISSION_TABLES = ("auth_user_user_permissions", "auth_user_groups", "auth_group_permissions", "auth_group")
# The cross-tenant look-ups of tenants.principals (created by tenants 0003, owned by the owner role).
DEFINER_FUNCTIONS = ("grounded_api_key_tenant(text)", "grounded_user_tenants(integer)")
