"""The database wall: row-level security accepts a tenant only with a proof the application role cannot forge.

Before this, every tenant policy compared tenant_id with `app.tenant_id`, a setting any SQL run as the
application role may set to the tenant it wants. Now:

- The schema `grounded_private` (owned by the owner role, no rights for anyone else) keeps the wall key's
  HMAC pads; `migrate`'s post-migrate hook installs them from the application's key file (tenants.db_wall).
- `grounded_tenant()` (SECURITY DEFINER) returns `app.tenant_id` only when `app.tenant_proof` is this
  tenant's unexpired HMAC under that key, else NULL; every policy that read `app.tenant_id` is rewritten
  to call it (found in the catalog, so the policies of every app are covered; a policy still reading
  the setting afterwards fails the migration). Databases built from scratch get it from
  `tenants.rls.enable_rls` directly.
- `grounded_user_tenants(user_id)` answers only for the user named by `app.user_id` with a valid
  `app.user_proof` (the signed-in user); for anyone else, nothing.
- 0006's guard on auth_user compares the user's home with `grounded_tenant()`.

Logged in as the owner role, the plain settings are accepted (migrations such as kb 0005 set the tenant
that way; that role can switch row-level security off anyway).
"""
import importlib

from django.db import migrations

from tenants.rls import LEGACY_TENANT_EXPR, TENANT_EXPR, WALL_SQL, rewrite_policies_sql

GUARD_0006 = importlib.import_module("tenants.migrations.0006_guard_user_accounts").GUARD.sql[2]
USER_TENANTS_0003 = importlib.import_module("tenants.migrations.0003_row_level_security").DEFINER_FUNCTIONS.sql[2]


USER_TENANTS = """
    CREATE OR REPLACE FUNCTION grounded_user_tenants(user_id integer)
    RETURNS TABLE(tenant_id bigint, slug text, name text, role text)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public SET row_security = off AS $$
        SELECT t.id, t.slug::text, t.name::text, m.role::text
        FROM tenants_membership m JOIN tenants_tenant t ON t.id = m.tenant_id
        WHERE m.user_id = $1 AND grounded_private.user_proven($1)
        ORDER BY t.slug
    $$
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0006_guard_user_accounts")]

    operations = [
        # Kept on the way back: policies built by tenants.rls.enable_rls from scratch call grounded_tenant().
        migrations.RunSQL(WALL_SQL, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(
            rewrite_policies_sql(LEGACY_TENANT_EXPR, TENANT_EXPR, "%app.tenant_id%"),
            reverse_sql=rewrite_policies_sql(TENANT_EXPR, LEGACY_TENANT_EXPR, "%grounded_tenant()%"),
        ),
        migrations.RunSQL(GUARD_0006, reverse_sql=GUARD_0006.replace(TENANT_EXPR, LEGACY_TENANT_EXPR)),
        migrations.RunSQL(USER_TENANTS, reverse_sql=USER_TENANTS_0003),
    ]
