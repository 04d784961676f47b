"""The application role changes a user's sign-in details only inside the user's home tenant.

0003's guard on auth_user stopped the application role from making staff or superusers; it could still
re-point any account: set another tenant's user's (or a superuser's) password, email or username,
deactivate it, or delete it. This guard keeps 0003's rule and adds one: as the application role, an
UPDATE that changes a user's id, username, password, email or is_active, and any DELETE, needs the user
to have its home (tenants_tenantuser) in the current tenant (`app.tenant_id`), and is refused for a
superuser whatever its home. Other columns (last_login at sign-in, names) stay writable, and INSERT is
only bound by 0003's rule (a tenant admin's new user gets its home in the same transaction).

The lookup of the home runs as the application role (SECURITY INVOKER), so row-level security on
tenants_tenantuser applies: no tenant set, no home found. Writes a user makes to its own account before a
tenant is known (a sign-in's password hash upgrade, a password change) go through tenants.accounts.
"""
import importlib

from django.db import migrations

from tenants.rls import TENANT_EXPR

FLAGS_GUARD_0003 = importlib.import_module("tenants.migrations.0003_row_level_security").USER_FLAGS_GUARD

GUARD = migrations.RunSQL(
    sql=[
        'DROP TRIGGER IF EXISTS auth_user_privilege_flags ON "auth_user"',
        "DROP FUNCTION IF EXISTS grounded_guard_user_flags()",
        f"""
        CREATE OR REPLACE FUNCTION grounded_guard_user_accounts() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolbypassrls)) THEN
                RETURN COALESCE(NEW, OLD);
            END IF;
            IF (TG_OP = 'INSERT' AND (NEW.is_superuser OR NEW.is_staff))
               OR (TG_OP = 'UPDATE' AND (NEW.is_superuser IS DISTINCT FROM OLD.is_superuser
                                         OR NEW.is_staff IS DISTINCT FROM OLD.is_staff)) THEN
                RAISE EXCEPTION 'user privilege flags change only through the owner connection'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF TG_OP = 'DELETE'
               OR (TG_OP = 'UPDATE' AND ROW(NEW.id, NEW.username, NEW.password, NEW.email, NEW.is_active)
                                        IS DISTINCT FROM ROW(OLD.id, OLD.username, OLD.password, OLD.email, OLD.is_active)) THEN
                IF OLD.is_superuser OR NOT EXISTS (
                       SELECT 1 FROM tenants_tenantuser home WHERE home.user_id = OLD.id AND home.tenant_id = {TENANT_EXPR}) THEN
                    RAISE EXCEPTION 'a user''s sign-in details change only in the user''s home tenant'
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
            END IF;
            RETURN COALESCE(NEW, OLD);
        END;
        $$
        """,
        "REVOKE ALL ON FUNCTION grounded_guard_user_accounts() FROM PUBLIC",
        'CREATE TRIGGER auth_user_guard BEFORE INSERT OR UPDATE OR DELETE ON "auth_user" '
        "FOR EACH ROW EXECUTE FUNCTION grounded_guard_user_accounts()",
    ],
    reverse_sql=[
        'DROP TRIGGER IF EXISTS auth_user_guard ON "auth_user"',
        "DROP FUNCTION IF EXISTS grounded_guard_user_accounts()",
        *FLAGS_GUARD_0003.sql,
    ],
)


class Migration(migrations.Migration):
    dependencies = [("tenants", "0005_api_key_verbose_name")]

    operations = [GUARD]
