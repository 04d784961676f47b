"""Row-level security for the tenants app itself, and what the application role may do to users.

- Departments, API keys, memberships and users' home rows: the tenant policy (tenants.rls.enable_rls).
- The key/membership <-> department link tables have no tenant column: a link is visible, and may be
  written, only when both its parent row and its department are visible, i.e. belong to the current
  tenant (the EXISTS subqueries are themselves filtered by RLS). A key or member can never be linked
  to another tenant's department.
- Tenants: anyone may read them (sign-in needs names and slugs) and create them (operators do), but
  only the current tenant's own row may be changed or deleted.
- Two SECURITY DEFINER functions answer the only questions asked before a tenant is known: which
  tenant an API key's public id belongs to, and which tenants a user is a member of.
- auth_user: the application role can neither create a staff/superuser account nor change those
  flags; that is done through the owner connection (tenants.operator).
"""
from django.db import migrations

from tenants.rls import TENANT_EXPR, enable_rls

TENANT_TABLES = ["tenants_department", "tenants_apikey", "tenants_membership", "tenants_tenantuser"]

# (link table, parent table, parent column)
LINK_TABLES = [
    ("tenants_apikey_departments", "tenants_apikey", "apikey_id"),
    ("tenants_membership_departments", "tenants_membership", "membership_id"),
]


def link_policy(table: str, parent: str, column: str) -> migrations.RunSQL:
    visible = (f'EXISTS (SELECT 1 FROM "{parent}" p WHERE p.id = "{table}".{column}) '
               f'AND EXISTS (SELECT 1 FROM "tenants_department" d WHERE d.id = "{table}".department_id)')
    return migrations.RunSQL(
        sql=[
            f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY',
            f'CREATE POLICY tenant_isolation ON "{table}" USING ({visible}) WITH CHECK ({visible})',
        ],
        reverse_sql=[
            f'DROP POLICY IF EXISTS tenant_isolation ON "{table}"',
            f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY',
        ],
    )


CURRENT_TENANT_ROW = f"id = {TENANT_EXPR}"

TENANT_POLICIES = migrations.RunSQL(
    sql=[
        'ALTER TABLE "tenants_tenant" ENABLE ROW LEVEL SECURITY',
        'ALTER TABLE "tenants_tenant" FORCE ROW LEVEL SECURITY',
        # Open: names and slugs are needed at sign-in, before a tenant is chosen.
        'CREATE POLICY tenant_read ON "tenants_tenant" FOR SELECT USING (true)',
        # Open: tenants are created by operators (and by tests) before anything is activated.
        'CREATE POLICY tenant_create ON "tenants_tenant" FOR INSERT WITH CHECK (true)',
        # Only the current tenant's own row.
        f'CREATE POLICY tenant_update ON "tenants_tenant" FOR UPDATE '
        f"USING ({CURRENT_TENANT_ROW}) WITH CHECK ({CURRENT_TENANT_ROW})",
        f'CREATE POLICY tenant_delete ON "tenants_tenant" FOR DELETE USING ({CURRENT_TENANT_ROW})',
    ],
    reverse_sql=[
        'DROP POLICY IF EXISTS tenant_delete ON "tenants_tenant"',
        'DROP POLICY IF EXISTS tenant_update ON "tenants_tenant"',
        'DROP POLICY IF EXISTS tenant_create ON "tenants_tenant"',
        'DROP POLICY IF EXISTS tenant_read ON "tenants_tenant"',
        'ALTER TABLE "tenants_tenant" NO FORCE ROW LEVEL SECURITY',
        'ALTER TABLE "tenants_tenant" DISABLE ROW LEVEL SECURITY',
    ],
)

# Both run as their owner (the migrating role, which bypasses RLS). row_security = off makes a
# misconfigured owner that does not bypass RLS fail loudly instead of finding no key.
DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, public SET row_security = off"

DEFINER_FUNCTIONS = migrations.RunSQL(
    sql=[
        f"""
        CREATE OR REPLACE FUNCTION grounded_api_key_tenant(public_id text) RETURNS bigint
        LANGUAGE sql STABLE {DEFINER} AS $$
            SELECT k.tenant_id FROM tenants_apikey k WHERE k.public_id = $1 AND k.revoked_at IS NULL
        $$
        """,
        "REVOKE ALL ON FUNCTION grounded_api_key_tenant(text) FROM PUBLIC",
        f"""
        CREATE OR REPLACE FUNCTION grounded_user_tenants(user_id integer)
        RETURNS TABLE(tenant_id bigint, slug text, name text, role text)
        LANGUAGE sql STABLE {DEFINER} AS $$
            SELECT t.id, t.slug::text, t.name::text, m.role::text
            FROM tenants_membership m JOIN tenants_tenant t ON t.id = m.tenant_id
            WHERE m.user_id = $1
            ORDER BY t.slug
        $$
        """,
        "REVOKE ALL ON FUNCTION grounded_user_tenants(integer) FROM PUBLIC",
    ],
    reverse_sql=[
        "DROP FUNCTION IF EXISTS grounded_user_tenants(integer)",
        "DROP FUNCTION IF EXISTS grounded_api_key_tenant(text)",
    ],
)

# SECURITY INVOKER on purpose: current_user is the role doing the write.
USER_FLAGS_GUARD = migrations.RunSQL(
    sql=[
        """
        CREATE OR REPLACE FUNCTION grounded_guard_user_flags() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolbypassrls)) THEN
                RETURN NEW;
            END IF;
            IF (TG_OP = 'INSERT' AND (NEW.is_superuser OR NEW.is_staff))
               OR (TG_OP = 'UPDATE' AND (NEW.is_superuser IS DISTINCT FROM OLD.is_superuser
                                         OR NEW.is_staff IS DISTINCT FROM OLD.is_staff)) THEN
                RAISE EXCEPTION 'user privilege flags change only through the owner connection'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END;
        $$
        """,
        "REVOKE ALL ON FUNCTION grounded_guard_user_flags() FROM PUBLIC",
        'CREATE TRIGGER auth_user_privilege_flags BEFORE INSERT OR UPDATE ON "auth_user" '
        "FOR EACH ROW EXECUTE FUNCTION grounded_guard_user_flags()",
    ],
    reverse_sql=[
        'DROP TRIGGER IF EXISTS auth_user_privilege_flags ON "auth_user"',
        "DROP FUNCTION IF EXISTS grounded_guard_user_flags()",
    ],
)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("tenants", "0002_tenant_user"),
    ]

    operations = (
        [enable_rls(t) for t in TENANT_TABLES]
        + [link_policy(*link) for link in LINK_TABLES]
        + [TENANT_POLICIES, DEFINER_FUNCTIONS, USER_FLAGS_GUARD]
    )
