"""Row-level security on the tenants app's own tables, the auth_user privilege guard, and authentication
under it (tenants.principals). Probes are raw SQL on the application role's connection ("default"), so
the ORM and its scoped managers are not in the way: only PostgreSQL stands between tenants."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections, transaction
from rest_framework.test import APIClient

from tenants.db_wall import tenant_statements, user_statements
from tenants.models import ApiKey, Tenant, TenantUser
from tenants.principals import TenantChoiceRequired, authenticate_key, choose_tenant, tenants_of_user, user_scope
from tenants.scope import Scope, activate
from tests.factories import department, departments_of, make_corpus, make_membership, make_staff_user, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.scratch_database import migrate_to, scratch_alias  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

GUARD_MESSAGE = "user privilege flags change only through the owner connection"


@dataclass
class Side:
    """One tenant's principals: a key and a member, each linked to a department, and a home user."""

    tenant: Tenant
    department_id: int
    key_id: int
    raw_key: str
    member_id: int
    user_id: int

    @property
    def tenant_id(self) -> int:
        return self.tenant.id


def _side(name: str) -> Side:
    tenant = make_tenant(name)
    sales = department(tenant, "Sales")
    key, raw = ApiKey.issue(tenant=tenant, name=f"{name} key", role="editor", departments=[sales])
    user = get_user_model().objects.create_user(username=f"{name.lower()}-user", password="pw-123456789")
    member = make_membership(user, tenant, "reader", departments=[sales])
    with activate(Scope.system(tenant.id)):
        TenantUser.objects.create(user=user, tenant=tenant)
    return Side(tenant, sales.id, key.id, raw, member.id, user.id)


@pytest.fixture
def sides() -> tuple[Side, Side]:
    return _side("Acme"), _side("Globex")


def sql(statement: str, params: list | None = None, *, tenant: int | None) -> tuple[int, list[tuple]]:
    """Run `statement` as the application role with `tenant` set the application's way (with its proof;
    none for None) for this statement only (a savepoint): returns (rowcount, rows)."""
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute(tenant_statements(tenant))
        cur.execute(statement, params or [])
        rows = cur.fetchall() if cur.description else []
        count = cur.rowcount
        cur.execute(tenant_statements(None))
    return count, rows


def refused(statement: str, params: list | None = None, *, tenant: int | None) -> str:
    """The database error `statement` raises as the application role (the probe fails if it runs)."""
    with pytest.raises(DatabaseError) as caught:
        sql(statement, params, tenant=tenant)
    return str(caught.value)


# What identifies a side's rows in each table, and an UPDATE that would hurt.
def _owned(side: Side) -> dict[str, tuple[str, list]]:
    return {
        "tenants_department": ("tenant_id = %s", [side.tenant_id]),
        "tenants_apikey": ("tenant_id = %s", [side.tenant_id]),
        "tenants_membership": ("tenant_id = %s", [side.tenant_id]),
        "tenants_tenantuser": ("tenant_id = %s", [side.tenant_id]),
        "tenants_apikey_departments": ("apikey_id = %s", [side.key_id]),
        "tenants_membership_departments": ("membership_id = %s", [side.member_id]),
    }


def _updates(attacker: Side) -> dict[str, tuple[str, list]]:
    return {
        "tenants_department": ("name = name || ' (renamed)'", []),
        "tenants_apikey": ("role = 'admin', all_departments = true, revoked_at = NULL", []),
        "tenants_membership": ("role = 'admin', all_departments = true", []),
        "tenants_tenantuser": ("tenant_id = %s", [attacker.tenant_id]),
        "tenants_apikey_departments": ("department_id = %s", [attacker.department_id]),
        "tenants_membership_departments": ("department_id = %s", [attacker.department_id]),
    }


def _count(table: str, side: Side, tenant: int | None) -> int:
    where, params = _owned(side)[table]
    return sql(f"SELECT count(*) FROM {table} WHERE {where}", params, tenant=tenant)[1][0][0]


@pytest.mark.tenantless_sql("adversarial: SQL that omits the tenant must still see only the RLS tenant's rows")
def test_other_tenants_principals_are_invisible_and_unchangeable(sides):
    a, b = sides
    for table, (where, params) in _owned(b).items():
        assert _count(table, a, a.tenant_id) >= 1, f"{table}: A's own rows must be visible (the probe is meaningful)"
        assert _count(table, b, a.tenant_id) == 0, f"{table}: B's rows visible to A"
        assert sql(f"SELECT * FROM {table}", tenant=a.tenant_id)[1] == sql(f"SELECT * FROM {table} WHERE {_owned(a)[table][0]}",
                                                                          _owned(a)[table][1], tenant=a.tenant_id)[1]
        set_clause, set_params = _updates(a)[table]
        updated, _ = sql(f"UPDATE {table} SET {set_clause} WHERE {where}", set_params + params, tenant=a.tenant_id)
        deleted, _ = sql(f"DELETE FROM {table} WHERE {where}", params, tenant=a.tenant_id)
        assert (updated, deleted) == (0, 0), f"{table}: A changed B's rows"
        assert _count(table, b, b.tenant_id) >= 1, f"{table}: B's rows are gone"
    role, everything = sql("SELECT role, all_departments FROM tenants_apikey WHERE id = %s", [b.key_id], tenant=b.tenant_id)[1][0]
    assert (role, everything) == ("editor", False)
    # B's secret hash is not readable to A even by its public id.
    assert sql("SELECT secret_hash FROM tenants_apikey WHERE public_id = %s", [b.raw_key.split("_")[1]], tenant=a.tenant_id)[1] == []


@pytest.mark.tenantless_sql("adversarial: SQL without a tenant sees and changes nothing")
def test_nothing_is_visible_without_a_tenant(sides):
    for table in _owned(sides[0]):
        assert sql(f"SELECT count(*) FROM {table}", tenant=None)[1] == [(0,)], table
    assert sql("UPDATE tenants_apikey SET role = 'admin'", tenant=None)[0] == 0


def test_rows_for_another_tenant_cannot_be_inserted(sides):
    a, b = sides
    user_id = get_user_model().objects.create_user(username="newcomer").id
    for statement, params in [
        ("INSERT INTO tenants_department (tenant_id, name) VALUES (%s, 'smuggled')", [b.tenant_id]),
        ("INSERT INTO tenants_apikey (tenant_id, name, public_id, secret_hash, role, all_departments, created_at) "
         "VALUES (%s, 'smuggled', 'deadbeefdeadbeef', 'x', 'admin', true, now())", [b.tenant_id]),
        ("INSERT INTO tenants_membership (tenant_id, user_id, role, all_departments) VALUES (%s, %s, 'admin', true)",
         [b.tenant_id, user_id]),
        ("INSERT INTO tenants_tenantuser (tenant_id, user_id) VALUES (%s, %s)", [b.tenant_id, user_id]),
    ]:
        assert "row-level security" in refused(statement, params, tenant=a.tenant_id), statement


@pytest.mark.tenantless_sql("reads the links by their parent's id to check the tenant the database gave them")
def test_links_carry_their_parents_tenant_and_a_user_keeps_one_home(sides):
    """Tenants 0008: Django's `.set()` filled each link's tenant (the column's default, the proven tenant), and
    with the homes keyed by (tenant_id, user_id) a second tenant still cannot give another tenant's user a home
    there (the auth_user guard would then let it change that user's password)."""
    a, b = sides
    for table, column, parent in [("tenants_apikey_departments", "apikey_id", a.key_id),
                                  ("tenants_membership_departments", "membership_id", a.member_id)]:
        rows = sql(f"SELECT tenant_id, department_id FROM {table} WHERE {column} = %s", [parent], tenant=a.tenant_id)[1]
        assert rows == [(a.tenant_id, a.department_id)], table
    assert "tenants_tenantuser_one_home" in refused(
        "INSERT INTO tenants_tenantuser (tenant_id, user_id) VALUES (%s, %s)", [b.tenant_id, a.user_id], tenant=b.tenant_id)


@pytest.mark.tenantless_sql("adversarial: raw link inserts that leave the tenant to the database's default")
def test_a_key_or_member_cannot_be_linked_to_another_tenants_department(sides):
    a, b = sides
    for table, column, parent in [("tenants_apikey_departments", "apikey_id", a.key_id),
                                  ("tenants_membership_departments", "membership_id", a.member_id)]:
        refused(f"INSERT INTO {table} ({column}, department_id) VALUES (%s, %s)", [parent, b.department_id], tenant=a.tenant_id)
        # ... not by re-pointing an existing link either (WITH CHECK), and not from B's side to A's key.
        refused(f"UPDATE {table} SET department_id = %s WHERE {column} = %s", [b.department_id, parent], tenant=a.tenant_id)
        refused(f"INSERT INTO {table} ({column}, department_id) VALUES (%s, %s)", [parent, b.department_id], tenant=b.tenant_id)
    # Through the ORM too: the database refuses, whatever the form or serializer checked.
    b_dept = department(b.tenant, "Sales")
    with pytest.raises(DatabaseError), activate(Scope.system(a.tenant_id)):
        ApiKey.objects.get(pk=a.key_id).departments.add(b_dept)
    with pytest.raises(DatabaseError):
        ApiKey.issue(tenant=a.tenant, name="mixed", departments=[b_dept])


def test_tenants_are_readable_but_only_the_current_one_changes(sides):
    a, b = sides
    assert sql("SELECT count(*) FROM tenants_tenant WHERE id IN (%s, %s)", [a.tenant_id, b.tenant_id], tenant=a.tenant_id)[1] == [(2,)]
    assert sql("""UPDATE tenants_tenant SET settings = '{"daily_runs": 1}' WHERE id = %s""", [b.tenant_id], tenant=a.tenant_id)[0] == 0
    assert sql("UPDATE tenants_tenant SET name = name || ' (renamed)' WHERE id = %s", [b.tenant_id], tenant=None)[0] == 0
    assert sql("DELETE FROM tenants_tenant WHERE id = %s", [b.tenant_id], tenant=a.tenant_id)[0] == 0
    assert sql("SELECT settings::text FROM tenants_tenant WHERE id = %s", [b.tenant_id], tenant=b.tenant_id)[1] == [("{}",)]
    assert sql("""UPDATE tenants_tenant SET settings = '{"daily_runs": 5}' WHERE id = %s""", [a.tenant_id], tenant=a.tenant_id)[0] == 1
    # Moving one's own tenant row onto another id is refused by WITH CHECK.
    refused("UPDATE tenants_tenant SET id = %s WHERE id = %s", [10**9, a.tenant_id], tenant=a.tenant_id)


def test_the_application_role_cannot_raise_user_privileges(sides):
    a, _ = sides
    user_id = a.user_id
    for statement in ("UPDATE auth_user SET is_superuser = true WHERE id = %s", "UPDATE auth_user SET is_staff = true WHERE id = %s"):
        assert GUARD_MESSAGE in refused(statement, [user_id], tenant=a.tenant_id)
    assert GUARD_MESSAGE in refused(
        "INSERT INTO auth_user (username, password, is_superuser, is_staff, is_active, first_name, last_name, email, date_joined) "
        "VALUES ('mallory', '', false, true, true, '', '', '', now())", tenant=None)
    with pytest.raises(DatabaseError, match=GUARD_MESSAGE), transaction.atomic(using="default"):
        get_user_model().objects.create_superuser(username="root-by-app", password="x" * 12, email="r@x.test")
    # Other columns still change (sign-in records last_login), and unchanged flags are no change.
    assert sql("UPDATE auth_user SET last_login = now(), is_staff = false WHERE id = %s", [user_id], tenant=None)[0] == 1
    # Django's permission tables are read-only to the role.
    for statement in ("INSERT INTO auth_group (name) VALUES ('admins')", "DELETE FROM auth_user_user_permissions",
                      "DELETE FROM auth_user_groups", "DELETE FROM auth_group_permissions"):
        assert "permission denied" in refused(statement, tenant=None), statement


ACCOUNT_MESSAGE = "a user's sign-in details change only in the user's home tenant"
# UPDATEs of a user's sign-in details, each of which would let the writer take over or lock out the account.
ACCOUNT_UPDATES = ("UPDATE auth_user SET password = 'md5$x$attacker' WHERE id = %s",
                   "UPDATE auth_user SET is_active = NOT is_active WHERE id = %s",
                   "UPDATE auth_user SET username = username || '-taken' WHERE id = %s",
                   "UPDATE auth_user SET email = 'attacker@evil.test' WHERE id = %s",
                   "UPDATE auth_user SET id = id + 1000000 WHERE id = %s",
                   "DELETE FROM auth_user WHERE id = %s")


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # operators' accounts are made as owner
def test_the_application_role_changes_sign_in_details_only_of_its_tenants_own_users(sides):
    a, b = sides
    staff_b = make_staff_user("globex-staff")
    root = make_staff_user("root", superuser=True)
    root_at_home = make_staff_user("root-at-home", superuser=True)
    homeless = get_user_model().objects.create_user(username="homeless")
    with transaction.atomic(using="owner"):
        TenantUser.objects.using("owner").create(user_id=staff_b.id, tenant_id=b.tenant_id)
        TenantUser.objects.using("owner").create(user_id=root_at_home.id, tenant_id=a.tenant_id)
    stored = _accounts()
    # Another tenant's user and staff, an operator's account, a superuser even at home, a user of no tenant;
    # and the tenant's own user while no tenant is set.
    for user_id, tenant in ((b.user_id, a.tenant_id), (staff_b.id, a.tenant_id), (root.id, a.tenant_id),
                            (root_at_home.id, a.tenant_id), (homeless.id, a.tenant_id), (a.user_id, None)):
        for statement in ACCOUNT_UPDATES:
            assert ACCOUNT_MESSAGE in refused(statement, [user_id], tenant=tenant), (statement, user_id, tenant)
    assert _accounts() == stored
    # Sign-in records last_login for anyone before a tenant is known; names are not sign-in details.
    for user_id in (b.user_id, root.id, a.user_id):
        assert sql("UPDATE auth_user SET last_login = now() WHERE id = %s", [user_id], tenant=None)[0] == 1
    # In its home tenant, a user's details change (a tenant admin's own users), the sign-in name included.
    for statement in ACCOUNT_UPDATES[:4]:
        assert sql(statement, [a.user_id], tenant=a.tenant_id)[0] == 1, statement
    assert sql("UPDATE auth_user SET password = 'md5$x$attacker' WHERE id = %s", [staff_b.id], tenant=b.tenant_id)[0] == 1


def _accounts() -> list[tuple]:
    """Every user's sign-in details as stored (owner connection)."""
    with connections["owner"].cursor() as cur:
        cur.execute("SELECT id, username, password, email, is_active, is_staff, is_superuser FROM auth_user ORDER BY id")
        return cur.fetchall()


def test_the_owner_connection_may_set_privilege_flags():
    """Operators (tenants.operator) act through the owner role, which the guard lets through."""
    user_model = get_user_model()
    with transaction.atomic(using="owner"):
        user = user_model.objects.db_manager("owner").create_user(username="operator-made", is_staff=True)
        user.is_superuser = True
        user.save(using="owner")
    assert user_model.objects.using("owner").get(pk=user.pk).is_superuser


def test_definer_functions_are_narrow_and_only_the_app_role_runs_them(sides):
    a, b = sides
    a_public = a.raw_key.split("_")[1]
    with connections["default"].cursor() as cur:
        cur.execute("SELECT grounded_api_key_tenant(%s), grounded_api_key_tenant('nope')", [a_public])
        assert cur.fetchone() == (a.tenant_id, None)
        cur.execute("SELECT tenant_id, role FROM grounded_user_tenants(%s)", [b.user_id])
        assert cur.fetchall() == []  # only for the user the application vouches for
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute(user_statements(b.user_id))
        cur.execute("SELECT tenant_id, role FROM grounded_user_tenants(%s)", [b.user_id])
        assert cur.fetchall() == [(b.tenant_id, "reader")]
        cur.execute("SELECT proname, prosecdef, proconfig, proacl::text FROM pg_proc "
                    "WHERE proname IN ('grounded_api_key_tenant', 'grounded_user_tenants') ORDER BY 1")
        functions = cur.fetchall()
    assert [f[0] for f in functions] == ["grounded_api_key_tenant", "grounded_user_tenants"]
    for _, definer, config, acl in functions:
        assert definer and "search_path=pg_catalog, public" in config
        assert "grounded_app=X/" in acl and not acl.startswith("{=X") and ",=X/" not in acl  # no EXECUTE for PUBLIC
    with activate(Scope.system(a.tenant_id)):
        ApiKey.objects.get(pk=a.key_id).revoke()
    with connections["default"].cursor() as cur:
        cur.execute("SELECT grounded_api_key_tenant(%s)", [a_public])
        assert cur.fetchone() == (None,)


# --- authentication under RLS -------------------------------------------------------------------


def test_a_key_authenticates_with_its_departments(sides):
    a, _ = sides
    found = authenticate_key(a.raw_key)
    assert found is not None
    key, scope = found
    assert key.pk == a.key_id and key.tenant.id == a.tenant_id and key.last_used_at is not None
    assert scope == Scope(tenant_id=a.tenant_id, department_ids=frozenset({a.department_id}), role="editor",
                          principal=f"key:{key.public_id}")


def test_revoked_wrong_and_malformed_keys_do_not_authenticate(sides):
    a, b = sides
    public, secret = a.raw_key[3:].split("_", 1)
    other_secret = b.raw_key[3:].split("_", 1)[1]
    for raw in (f"gk_{public}_{other_secret}", a.raw_key + "x", f"gk_{public}_", "gk_x", "", f"gk_{public}_{secret}" * 10,
                a.raw_key.replace("gk_", "")):
        assert authenticate_key(raw) is None, raw
    with activate(Scope.system(a.tenant_id)):
        ApiKey.objects.get(pk=a.key_id).revoke()
    assert authenticate_key(a.raw_key) is None
    assert authenticate_key(b.raw_key) is not None


@pytest.fixture
def consultant(sides):
    """A user with memberships in A (reader, Sales) and B (admin, all departments), and a third tenant C
    they are not in."""
    a, b = sides
    user = get_user_model().objects.create_user(username="consultant", password="pw-123456789")
    make_membership(user, a.tenant, "reader", departments=departments_of(a.tenant)[:1])
    make_membership(user, b.tenant, "admin", all_departments=True)
    c = make_tenant("Initech")
    make_corpus(a.tenant, "acme shared")
    make_corpus(b.tenant, "globex shared")
    return user, c


def test_user_tenants_and_scopes(sides, consultant):
    a, b = sides
    user, c = consultant
    choices = tenants_of_user(user)
    assert {(ch.tenant_id, ch.role) for ch in choices} == {(a.tenant_id, "reader"), (b.tenant_id, "admin")}
    assert user_scope(user, a.tenant_id).department_ids == frozenset({a.department_id})
    assert user_scope(user, b.tenant_id).all_departments and user_scope(user, b.tenant_id).role == "admin"
    assert user_scope(user, c.id) is None
    slug_b = b.tenant.slug
    assert choose_tenant(user, slug_b).tenant_id == b.tenant_id
    with pytest.raises(TenantChoiceRequired, match="several tenants"):
        choose_tenant(user, None)
    with pytest.raises(TenantChoiceRequired) as foreign:
        choose_tenant(user, c.slug)
    with pytest.raises(TenantChoiceRequired) as missing:
        choose_tenant(user, "no-such-tenant")
    assert str(foreign.value).replace(c.slug, "?") == str(missing.value).replace("no-such-tenant", "?")
    loner = get_user_model().objects.create_user(username="loner")
    with pytest.raises(TenantChoiceRequired, match="not a member of any tenant"):
        choose_tenant(loner, None)
    solo = get_user_model().objects.create_user(username="solo")
    make_membership(solo, c, "reader", all_departments=True)
    assert choose_tenant(solo, None).slug == c.slug


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    """Empty rate-limit and failed-attempt windows (the cache fallback) for every test."""
    from django.core.cache import cache

    settings.RATE_LIMIT_REDIS_URL = ""
    cache.clear()


def _corpora(client: APIClient, **headers) -> tuple[int, dict]:
    r = client.get("/api/v1/corpora/", **headers)
    return r.status_code, r.json()


def test_session_user_of_several_tenants_must_name_one(sides, consultant):
    a, b = sides
    user, c = consultant
    client = APIClient()
    client.force_login(user)
    status, body = _corpora(client)
    assert status == 400 and "X-Tenant" in body["error"]["fields"], body
    status, body = _corpora(client, HTTP_X_TENANT=b.tenant.slug)
    assert status == 200 and [r["name"] for r in body["results"]] == ["globex shared"]
    status, body = _corpora(client, HTTP_X_TENANT=a.tenant.slug)
    assert status == 200 and [r["name"] for r in body["results"]] == ["acme shared"]
    foreign = _corpora(client, HTTP_X_TENANT=c.slug)
    missing = _corpora(client, HTTP_X_TENANT="no-such-tenant")
    assert foreign[0] == missing[0] == 400 and "X-Tenant" in foreign[1]["error"]["fields"]
    assert str(foreign[1]).replace(c.slug, "?") == str(missing[1]).replace("no-such-tenant", "?")


def test_session_user_of_one_tenant_needs_no_header(sides):
    a, _ = sides
    user = get_user_model().objects.get(pk=a.user_id)
    make_corpus(a.tenant, "acme shared")
    client = APIClient()
    client.force_login(user)
    status, body = _corpora(client)
    assert status == 200 and [r["name"] for r in body["results"]] == ["acme shared"]


def test_api_key_authenticates_through_the_api(sides):
    a, b = sides
    make_corpus(a.tenant, "acme shared")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {a.raw_key}")
    status, body = _corpora(client)
    assert status == 200 and [r["name"] for r in body["results"]] == ["acme shared"]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {a.raw_key[:-1]}x")
    assert client.get("/api/v1/corpora/").status_code == 401


# --- the migration reverses cleanly ------------------------------------------------------------------


def _rls_objects(alias: str) -> tuple[list, list, list]:
    with connections[alias].cursor() as cur:
        cur.execute("SELECT relname FROM pg_class WHERE relname LIKE 'tenants_%%' AND relrowsecurity ORDER BY 1")
        tables = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT proname FROM pg_proc WHERE proname LIKE 'grounded_%%' ORDER BY 1")
        functions = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'auth_user'::regclass AND NOT tgisinternal")
        triggers = [r[0] for r in cur.fetchall()]
    return tables, functions, triggers


def test_migration_0003_reverses_and_reapplies(scratch_alias):  # noqa: F811
    migrate_to(scratch_alias, ("tenants", "0003_row_level_security"))
    tables, functions, triggers = _rls_objects(scratch_alias)
    assert tables == ["tenants_apikey", "tenants_apikey_departments", "tenants_department", "tenants_membership",
                      "tenants_membership_departments", "tenants_tenant", "tenants_tenantuser"]
    assert functions == ["grounded_api_key_tenant", "grounded_guard_user_flags", "grounded_tenant", "grounded_user_tenants"]
    assert triggers == ["auth_user_privilege_flags"]
    migrate_to(scratch_alias, ("tenants", "0002_tenant_user"))
    # The wall's function stays (tenants.rls.WALL_SQL: every enable_rls creates it if missing, none drops it).
    assert _rls_objects(scratch_alias) == ([], ["grounded_tenant"], [])
    migrate_to(scratch_alias, ("tenants", "0003_row_level_security"))
    assert _rls_objects(scratch_alias) == (tables, functions, triggers)


def test_migration_0006_reverses_and_reapplies(scratch_alias):  # noqa: F811
    migrate_to(scratch_alias, ("tenants", "0006_guard_user_accounts"))
    tables, functions, triggers = _rls_objects(scratch_alias)
    assert functions == ["grounded_api_key_tenant", "grounded_guard_user_accounts", "grounded_tenant", "grounded_user_tenants"]
    assert triggers == ["auth_user_guard"]
    migrate_to(scratch_alias, ("tenants", "0005_api_key_verbose_name"))
    assert _rls_objects(scratch_alias) == (tables, ["grounded_api_key_tenant", "grounded_guard_user_flags", "grounded_tenant",
                                                    "grounded_user_tenants"],
                                           ["auth_user_privilege_flags"])
    migrate_to(scratch_alias, ("tenants", "0006_guard_user_accounts"))
    assert _rls_objects(scratch_alias) == (tables, functions, triggers)
