"""API keys, members and departments: admin-only management, raw key shown once, foreign ids 404."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tenants import services
from tenants.access import access_api_key
from tenants.models import ApiKey, Membership
from tenants.principals import authenticate_key
from tenants.scope import NotAllowed, Scope, activate
from tests.factories import make_membership

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def test_create_key_shows_raw_once_and_it_works_until_revoked(world):
    admin = world.client("a-admin")
    r = admin.post("/api/v1/keys/", {"name": "bot", "role": "reader", "departments": [world.sales.id]}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    raw, key_id = body["key"], body["id"]
    assert raw.startswith(body["prefix"]) and body["department_ids"] == [world.sales.id] and r["Cache-Control"] == "no-store"
    listed = admin.get("/api/v1/keys/").json()["results"]
    assert all("key" not in k for k in listed) and raw not in str(listed)
    assert "key" not in admin.get(f"/api/v1/keys/{key_id}/").json()
    bot = world.client(None)
    bot.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert {c["name"] for c in bot.get("/api/v1/corpora/").json()["results"]} == {"shared", "sales-only"}
    assert admin.delete(f"/api/v1/keys/{key_id}/").status_code == 204
    assert bot.get("/api/v1/corpora/").status_code == 401
    assert admin.get(f"/api/v1/keys/{key_id}/").json()["active"] is False


def _own_id(raw: str) -> int:
    found = authenticate_key(raw)
    assert found is not None
    return found[0].id


def test_a_key_revoking_itself_needs_confirm_self_revoke_and_nothing_changes_without_it(world):
    """Issue 52: an admin key following docs/api.md revoked itself without a word. Now the key making
    the request is refused (400 naming confirm_self_revoke) unless the body confirms it."""
    admin, own = world.client("a-admin"), _own_id(world.keys["a-admin"])
    for body in (None, {"confirm_self_revoke": False}):
        r = admin.delete(f"/api/v1/keys/{own}/", body, format="json")
        assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["confirm_self_revoke"], r.content
        assert "confirm_self_revoke: true" in r.json()["error"]["fields"]["confirm_self_revoke"][0]
    bad = admin.delete(f"/api/v1/keys/{own}/", {"confirm_self_revoke": "perhaps"}, format="json")
    assert bad.status_code == 400 and "confirm_self_revoke" in bad.json()["error"]["fields"]
    assert admin.get("/api/v1/corpora/").status_code == 200  # still works
    assert admin.get(f"/api/v1/keys/{own}/").json()["active"] is True


def test_a_key_revokes_itself_when_it_confirms_and_others_without_confirming(world):
    admin, own = world.client("a-admin"), _own_id(world.keys["a-admin"])
    other = _own_id(world.keys["a-reader"])
    assert admin.delete(f"/api/v1/keys/{other}/").status_code == 204  # another key: no confirmation asked
    r = admin.delete(f"/api/v1/keys/{own}/", {"confirm_self_revoke": True}, format="json")
    assert r.status_code == 204, r.content
    assert admin.get("/api/v1/corpora/").status_code == 401  # revoked at once
    with activate(Scope.system(world.a.id)):
        assert not ApiKey.objects.get(pk=own).is_active and not ApiKey.objects.get(pk=other).is_active


def test_revoke_key_service_refuses_the_actors_own_key_without_confirmation(world):
    """The rule lives in tenants.services.revoke_key (the admin site's session users pass no actor key)."""
    own = _own_id(world.keys["a-admin"])
    scope = Scope(tenant_id=world.a.id, all_departments=True, role="admin", principal="key:test")
    with activate(scope):
        key = access_api_key(scope, own)
        with pytest.raises(NotAllowed) as refused:
            services.revoke_key(scope, key, actor_key_id=own)
        assert refused.value.field == "confirm_self_revoke" and key.is_active
        services.revoke_key(scope, key)  # no actor key (a signed-in user): no confirmation needed
        assert not access_api_key(scope, own).is_active


@pytest.mark.parametrize("body,field", [
    ({"role": "reader"}, "name"),
    ({"name": "k", "role": "god"}, "role"),
    ({"name": "k", "departments": [99999999]}, "departments"),
    ({"name": "k", "departments": "sales"}, "departments"),
])
def test_key_bad_input(world, body, field):
    r = world.client("a-admin").post("/api/v1/keys/", body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.content


def test_department_admin_cannot_grant_more_than_it_sees(world):
    c = world.client("a-sales-admin")
    r = c.post("/api/v1/keys/", {"name": "k", "all_departments": True}, format="json")
    assert r.status_code == 400 and "all_departments" in r.json()["error"]["fields"]
    r = c.post("/api/v1/keys/", {"name": "k", "departments": [world.eng.id]}, format="json")
    assert r.status_code == 400 and "departments" in r.json()["error"]["fields"]


@pytest.mark.parametrize("who", ["a-reader", "a-editor", "a-auditor"])
def test_keys_and_members_are_admin_only(world, who):
    c = world.client(who)
    with activate(Scope.system(world.a.id)):
        key = ApiKey.objects.filter(tenant=world.a).first()
    for method, url in [("get", "/api/v1/keys/"), ("post", "/api/v1/keys/"), ("get", f"/api/v1/keys/{key.id}/"),
                        ("delete", f"/api/v1/keys/{key.id}/"), ("get", "/api/v1/members/"), ("post", "/api/v1/members/")]:
        assert getattr(c, method)(url, format="json").status_code == 403, (method, url)


def test_foreign_key_and_member_ids_are_404(world):
    with activate(Scope.system(world.b.id)):
        b_key = ApiKey.objects.filter(tenant=world.b).first()
    user = get_user_model().objects.create(username="globex-user")
    b_member = make_membership(user, world.b, "reader")
    c = world.client("a-admin")
    assert c.get(f"/api/v1/keys/{b_key.id}/").status_code == 404
    assert c.delete(f"/api/v1/keys/{b_key.id}/").status_code == 404
    for method in ("get", "patch", "delete"):
        assert getattr(c, method)(f"/api/v1/members/{b_member.id}/", {"role": "admin"}, format="json").status_code == 404
    with activate(Scope.system(world.b.id)):
        b_key.refresh_from_db()
        assert b_key.is_active
        assert Membership.objects.get(pk=b_member.pk).role == "reader"
    assert "globex-user" not in c.get("/api/v1/members/").content.decode()


def test_members_add_update_remove(world):
    c = world.client("a-admin")
    r = c.post("/api/v1/members/", {"username": "alice", "email": "alice@acme.test", "role": "editor",
                                    "departments": [world.sales.id]}, format="json")
    assert r.status_code == 201, r.content
    mid = r.json()["id"]
    assert r.json()["department_ids"] == [world.sales.id]
    # A tenant admin's new user is the tenant's own account, signing in as <name>@<tenant slug> (tenants.services).
    assert not get_user_model().objects.get(username=f"alice@{world.a.slug}").has_usable_password()
    dup = c.post("/api/v1/members/", {"username": "alice", "role": "reader"}, format="json")
    assert dup.status_code == 400 and "username" in dup.json()["error"]["fields"]
    r = c.patch(f"/api/v1/members/{mid}/", {"role": "auditor", "departments": []}, format="json")
    assert r.status_code == 200 and r.json()["role"] == "auditor" and r.json()["department_ids"] == []
    bad = c.patch(f"/api/v1/members/{mid}/", {"role": "owner"}, format="json")
    assert bad.status_code == 400 and "role" in bad.json()["error"]["fields"]
    assert c.get("/api/v1/members/").json()["results"][0]["username"] == "alice"
    assert c.delete(f"/api/v1/members/{mid}/").status_code == 204
    assert c.get(f"/api/v1/members/{mid}/").status_code == 404


def test_session_user_uses_membership_scope_and_x_tenant(world, client):
    user = get_user_model().objects.create_user(username="bob", password="pw-123456789")
    make_membership(user, world.a, "reader", all_departments=True)
    m_b = make_membership(user, world.b, "admin", all_departments=True)
    client.force_login(user)
    # Two tenants and no X-Tenant: a 400 naming the header, never "the first membership".
    r = client.get("/api/v1/corpora/")
    assert r.status_code == 400 and "X-Tenant" in r.json()["error"]["fields"]
    r = client.get("/api/v1/corpora/", HTTP_X_TENANT=world.a.slug)
    assert {c["name"] for c in r.json()["results"]} == {"shared", "sales-only", "eng-only"}
    assert client.get("/api/v1/members/", HTTP_X_TENANT=world.a.slug).status_code == 403
    r = client.get("/api/v1/members/", HTTP_X_TENANT=world.b.slug)
    assert r.status_code == 200 and r.json()["results"][0]["id"] == m_b.id
    # Changing your own admin role away or removing yourself is refused.
    r = client.patch(f"/api/v1/members/{m_b.id}/", {"role": "reader"}, content_type="application/json", HTTP_X_TENANT=world.b.slug)
    assert r.status_code == 400


def test_departments_list(world):
    r = world.client("a-sales-reader").get("/api/v1/departments/")
    assert [d["name"] for d in r.json()["results"]] == ["Sales"]
    r = world.client("a-reader").get("/api/v1/departments/")
    assert {d["name"] for d in r.json()["results"]} == {"Sales", "Engineering"}
    assert world.client("a-auditor").get("/api/v1/departments/").status_code == 403
    assert world.client(None).get("/api/v1/departments/").status_code == 401


def test_schema_and_docs_are_served_without_a_cdn(client):
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200 and "/api/v1/ask/stream/" in schema.json()["paths"]
    assert "ApiKey" in schema.json()["components"]["securitySchemes"]
    docs = client.get("/api/v1/docs/").content.decode()
    assert "swagger-ui" in docs and "cdn.jsdelivr" not in docs


def test_unknown_api_path_uses_the_error_format(world):
    r = world.client("a-reader").get("/api/v1/nope/")
    assert r.status_code == 404 and r.json() == {"error": {"code": "not_found", "message": "no such endpoint", "fields": {}}}


@pytest.mark.parametrize("body,field", [({"role": "reader"}, "username"), ({"username": "has space", "role": "reader"}, "username"),
                                        ({"username": "ok", "role": "root"}, "role"), ({"username": "ok", "email": "nope"}, "email"),
                                        ({"username": "ok", "departments": [99999999]}, "departments")])
def test_member_bad_input(world, body, field):
    r = world.client("a-admin").post("/api/v1/members/", body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()
