"""The escalations reported in issue 27, replayed exactly: each is refused and nothing changes.

A department-limited admin (Sales only) of tenant A tries to widen its reach through the admin site;
any tenant admin tries to attach another tenant's user through the API and the admin site; tenant staff
try Django's own user and group admins.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections

from tenants.models import ApiKey, Membership, Tenant, TenantUser
from tenants.scope import Scope, activate
from tests import query_checker
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def _keys(tenant: Tenant) -> list[tuple]:
    with activate(Scope.system(tenant.id)):
        return sorted(ApiKey.objects.filter(tenant=tenant).values_list("id", "role", "all_departments"))


def _membership(member: Membership) -> tuple:
    with activate(Scope.system(member.tenant_id)):
        fresh = Membership.objects.get(pk=member.pk)
        return fresh.role, fresh.all_departments, sorted(fresh.departments.values_list("id", flat=True))


@pytest.fixture
def sales_admin(world, client):
    """A staff user whose admin-site scope is tenant A's Sales department only, signed in."""
    user = make_staff_user("sales-admin", "pw-sales-admin-1")
    member = make_membership(user, world.a, "admin", departments=[world.sales])
    client.force_login(user)
    return member


def test_department_admin_cannot_issue_an_all_departments_key(world, client, sales_admin):
    before = _keys(world.a)
    r = client.post("/admin/tenants/apikey/add/", {"name": "x", "role": "admin", "all_departments": "on"})
    assert r.status_code == 200 and "all_departments" in r.context["adminform"].form.errors
    r = client.post("/admin/tenants/apikey/add/", {"name": "x", "role": "admin", "departments": [world.eng.id]})
    assert r.status_code == 200 and "departments" in r.context["adminform"].form.errors
    assert _keys(world.a) == before
    # What it may grant still works: a Sales key.
    r = client.post("/admin/tenants/apikey/add/", {"name": "ok", "role": "reader", "departments": [world.sales.id]})
    assert r.status_code == 302 and len(_keys(world.a)) == len(before) + 1


def test_department_admin_cannot_widen_its_own_membership(world, client, sales_admin):
    before = _membership(sales_admin)
    url = f"/admin/tenants/membership/{sales_admin.id}/change/"
    for body, field, message in (
            ({"role": "admin", "all_departments": "on", "departments": [world.sales.id]}, "all_departments",
             "you may not grant more departments than you see"),
            ({"role": "admin", "departments": [world.sales.id, world.eng.id]}, "departments", "Select a valid choice")):
        r = client.post(url, body)
        assert r.status_code == 200 and field in r.context["adminform"].form.errors, r.status_code
        assert message in r.content.decode()  # shown on the form, not just refused
    assert _membership(sales_admin) == before


def test_department_admin_cannot_change_tenant_settings(world, client, sales_admin):
    r = client.post(f"/admin/tenants/tenant/{world.a.id}/change/", {"settings": json.dumps({"daily_runs": 1})})
    assert r.status_code == 403
    assert Tenant.objects.get(pk=world.a.id).settings == {}


def test_tenant_wide_admin_changes_its_own_tenants_settings_only(world, client):
    user = make_staff_user("acme-admin", "pw-acme-admin-1")
    make_membership(user, world.a, "admin", all_departments=True)
    client.force_login(user)
    r = client.post(f"/admin/tenants/tenant/{world.a.id}/change/", {"settings": json.dumps({"daily_runs": 50})})
    assert r.status_code == 302, r.content[:500]
    assert Tenant.objects.get(pk=world.a.id).settings == {"daily_runs": 50}
    r = client.post(f"/admin/tenants/tenant/{world.b.id}/change/", {"settings": json.dumps({"daily_runs": 1})})
    assert r.status_code in (302, 404) and Tenant.objects.get(pk=world.b.id).settings == {}


def test_department_admin_cannot_make_all_departments_or_wider_members(world, client, sales_admin):
    target = get_user_model().objects.create_user(username="newcomer")
    with activate(Scope.system(world.a.id)):
        TenantUser.objects.create(user=target, tenant=world.a)
    r = client.post("/admin/tenants/membership/add/", {"user": target.id, "role": "reader", "all_departments": "on"})
    assert r.status_code == 200 and "all_departments" in r.context["adminform"].form.errors
    r = client.post("/admin/tenants/membership/add/", {"user": target.id, "role": "reader", "departments": [world.eng.id]})
    assert r.status_code == 200 and "departments" in r.context["adminform"].form.errors
    with activate(Scope.system(world.a.id)):
        assert not Membership.objects.filter(user=target).exists()
    member = make_membership(target, world.a, "reader", departments=[world.sales])
    r = client.post(f"/admin/tenants/membership/{member.id}/change/", {"role": "reader", "departments": [world.sales.id, world.eng.id]})
    assert r.status_code == 200 and "departments" in r.context["adminform"].form.errors
    assert _membership(member) == ("reader", False, [world.sales.id])


def test_api_member_add_never_attaches_another_tenants_user(world):
    gina = get_user_model().objects.create_user(username="gina", email="gina@globex.test")
    with activate(Scope.system(world.b.id)):
        TenantUser.objects.create(user=gina, tenant=world.b)
    make_membership(gina, world.b, "reader", all_departments=True)
    admin = world.client("a-admin")
    taken = admin.post("/api/v1/members/", {"username": "gina", "role": "admin"}, format="json")
    fresh = admin.post("/api/v1/members/", {"username": "nobody-here", "role": "admin"}, format="json")
    assert taken.status_code == fresh.status_code == 201
    body = taken.json()
    assert set(body) == set(fresh.json())
    assert "globex" not in json.dumps(body) and body["email"] == "" and body["username"] == "gina"
    assert body["login"] == f"gina@{world.a.slug}" != gina.username
    with activate(Scope.system(world.a.id)):
        attached = Membership.objects.get(pk=body["id"])
        assert attached.user_id != gina.pk
    with activate(Scope.system(world.b.id)):
        assert list(Membership.objects.filter(user=gina).values_list("tenant_id", flat=True)) == [world.b.id]
    # Removed and added again, the name finds tenant A's own user, not Globex's.
    assert admin.delete(f"/api/v1/members/{body['id']}/").status_code == 204
    again = admin.post("/api/v1/members/", {"username": "gina", "role": "reader"}, format="json")
    assert again.status_code == 201 and again.json()["login"] == body["login"]
    with activate(Scope.system(world.a.id)):
        assert Membership.objects.get(pk=again.json()["id"]).user_id == attached.user_id


def test_api_department_admin_cannot_widen_members_or_keys(world):
    c = world.client("a-sales-admin")
    r = c.post("/api/v1/members/", {"username": "sam", "role": "reader", "departments": [world.sales.id]}, format="json")
    assert r.status_code == 201
    mid = r.json()["id"]
    for body, field in (({"all_departments": True}, "all_departments"), ({"departments": [world.sales.id, world.eng.id]}, "departments")):
        r = c.patch(f"/api/v1/members/{mid}/", body, format="json")
        assert r.status_code == 400 and field in r.json()["error"]["fields"], r.content
    with activate(Scope.system(world.a.id)):
        member = Membership.objects.get(pk=mid)
    assert _membership(member) == ("reader", False, [world.sales.id])


def _memberships_of(user) -> list[tuple]:
    """Every membership of `user`, in any tenant (read through the owner connection)."""
    with query_checker.allowed("test oracle: a user's memberships in every tenant"):
        return sorted(Membership.objects.using("owner").filter(user=user).values_list("tenant_id", "role", "all_departments"))


def test_admin_site_never_attaches_another_tenants_user(world, client):
    """Issue 27's third escalation through the admin site: a tenant-wide admin of A posts the membership
    forms with the id of a user of tenant B, and of an operator's account (no home): a form error on the
    add form, the user left as it was on the change form (a membership is not moved to another user)."""
    gina = get_user_model().objects.create_user(username="gina", email="gina@globex.test")
    with activate(Scope.system(world.b.id)):
        TenantUser.objects.create(user=gina, tenant=world.b)
    make_membership(gina, world.b, "reader", all_departments=True)
    operator = make_staff_user("operator", superuser=True)
    own = get_user_model().objects.create_user(username="own-user")
    with activate(Scope.system(world.a.id)):
        TenantUser.objects.create(user=own, tenant=world.a)
    member = make_membership(own, world.a, "reader", departments=[world.sales])
    user = make_staff_user("acme-admin", "pw-acme-admin-1")
    make_membership(user, world.a, "admin", all_departments=True)
    client.force_login(user)
    before = {u.username: _memberships_of(u) for u in (gina, operator, own)}
    for foreign in (gina, operator):
        r = client.post("/admin/tenants/membership/add/", {"user": foreign.id, "role": "reader", "all_departments": "on"})
        assert r.status_code == 200 and "user" in r.context["adminform"].form.errors, r.status_code
        body = r.content.decode()
        assert foreign.username not in body and "globex" not in body
        r = client.post(f"/admin/tenants/membership/{member.id}/change/",
                        {"user": foreign.id, "role": "reader", "departments": [world.sales.id]})
        assert r.status_code in (200, 302), r.status_code
        with activate(Scope.system(world.a.id)):
            assert Membership.objects.get(pk=member.id).user_id == own.id
    assert {u.username: _memberships_of(u) for u in (gina, operator, own)} == before
    # The form still adds the tenant's own users.
    newcomer = get_user_model().objects.create_user(username="newcomer")
    with activate(Scope.system(world.a.id)):
        TenantUser.objects.create(user=newcomer, tenant=world.a)
    r = client.post("/admin/tenants/membership/add/", {"user": newcomer.id, "role": "reader", "all_departments": "on"})
    assert r.status_code == 302 and _memberships_of(newcomer) == [(world.a.id, "reader", True)]


AUTH_TABLES = ("auth_user", "auth_group", "auth_user_groups", "auth_user_user_permissions", "auth_group_permissions")


def _auth_rows() -> dict[str, list]:
    """Django's users, groups and permission links as stored (owner connection), sign-in times aside."""
    out = {}
    with connections["owner"].cursor() as cur:
        for table in AUTH_TABLES:
            cur.execute(f"SELECT to_jsonb(t) - 'last_login' FROM \"{table}\" t ORDER BY id")
            out[table] = [row for (row,) in cur.fetchall()]
    return out


STAFF = [("reader", None), ("editor", None), ("auditor", None), ("admin", "Sales"), ("admin", None)]


@pytest.mark.parametrize(("role", "department"), STAFF, ids=["reader", "editor", "auditor", "department admin", "tenant admin"])
def test_tenant_staff_have_no_access_to_djangos_users_and_groups(world, client, role, department):
    """Django's user and group admins are for operators: every tenant staff user gets 403 on their list,
    add, change, delete, history, password and bulk-delete pages, for its own account, its tenant's users,
    another tenant's, a superuser's and a group, and nothing changes."""
    staff = make_staff_user(f"staff-{role}", "pw-staff-12345")
    make_membership(staff, world.a, role, all_departments=department is None,
                    departments=[world.sales] if department else [])
    own = get_user_model().objects.create_user(username="own-user", email="own@acme.test")
    gina = get_user_model().objects.create_user(username="gina", email="gina@globex.test")
    for user, tenant in ((own, world.a), (gina, world.b)):
        with activate(Scope.system(tenant.id)):
            TenantUser.objects.create(user=user, tenant=tenant)
    root = make_staff_user("root", superuser=True)
    group = Group.objects.using("owner").create(name="operators")
    client.force_login(staff)
    before = _auth_rows()
    user_form = {"username": "renamed", "email": "x@evil.test", "is_active": "on", "is_staff": "on", "is_superuser": "on",
                 "password1": "pw-new-123456789", "password2": "pw-new-123456789", "usable_password": "true",
                 "date_joined_0": "2020-01-01", "date_joined_1": "00:00:00"}
    requests = [("get", "/admin/auth/user/", {}), ("get", "/admin/auth/group/", {}),
                ("get", "/admin/auth/user/add/", {}), ("post", "/admin/auth/user/add/", user_form),
                ("get", "/admin/auth/group/add/", {}), ("post", "/admin/auth/group/add/", {"name": "staff-made"}),
                ("post", "/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                               "_selected_action": [staff.id, own.id, gina.id, root.id]}),
                ("post", "/admin/auth/group/", {"action": "delete_selected", "post": "yes", "_selected_action": [group.id]})]
    for user in (staff, own, gina, root):
        base = f"/admin/auth/user/{user.id}/"
        requests += [("get", f"{base}change/", {}), ("post", f"{base}change/", user_form), ("get", f"{base}history/", {}),
                     ("get", f"{base}delete/", {}), ("post", f"{base}delete/", {"post": "yes"}),
                     ("get", f"{base}password/", {}), ("post", f"{base}password/", user_form)]
    base = f"/admin/auth/group/{group.id}/"
    requests += [("get", f"{base}change/", {}), ("post", f"{base}change/", {"name": "renamed"}),
                 ("get", f"{base}delete/", {}), ("post", f"{base}delete/", {"post": "yes"})]
    statuses = {f"{method.upper()} {url}": getattr(client, method)(url, body).status_code for method, url, body in requests}
    assert {k: v for k, v in statuses.items() if v != 403} == {}
    assert client.get("/admin/auth/").status_code == 404
    assert "/admin/auth/" not in client.get("/admin/").content.decode()
    assert _auth_rows() == before
