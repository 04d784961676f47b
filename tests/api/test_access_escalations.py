"""The escalations reported in issue 27, replayed exactly: each is refused and nothing changes.

A department-limited admin (Sales only) of tenant A tries to widen its reach through the admin site;
any tenant admin tries to attach another tenant's user through the API.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from tenants.models import ApiKey, Membership, Tenant, TenantUser
from tenants.scope import Scope, activate
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
