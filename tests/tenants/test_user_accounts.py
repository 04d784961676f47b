"""A user's sign-in details under the auth_user guard (tenants 0006): signing in, a password hash upgrade,
changing one's own password on the admin site, and operators editing users and groups; each works, and
writes through the application role only inside the user's home tenant (tenants.accounts)."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group
from django.db import DatabaseError, transaction

from tenants.models import Tenant, TenantUser
from tenants.operator import make_tenant_admin
from tenants.scope import Scope, activate
from tests import query_checker
from tests.factories import make_membership, make_staff_user, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# Operators' accounts are made through the owner connection and committed: transactional tests.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

ACCOUNT_MESSAGE = "a user's sign-in details change only in the user's home tenant"
MD5 = "django.contrib.auth.hashers.MD5PasswordHasher"


class OneRoundPBKDF2(PBKDF2PasswordHasher):
    """A preferred hasher other than the tests' MD5, so that signing in upgrades an MD5 hash (fast)."""

    algorithm = "pbkdf2_one"
    iterations = 1


def _stored(user) -> dict:
    return get_user_model().objects.using("owner").values("password", "email", "username", "is_active").get(pk=user.pk)


def _tenant_user(tenant, username: str, password: str):
    """A reader of `tenant` whose home it is."""
    user = get_user_model().objects.create_user(username=username, password=password)
    with activate(Scope.system(tenant.id)):
        TenantUser.objects.create(user=user, tenant=tenant)
    make_membership(user, tenant, "reader", all_departments=True)
    return user


def test_sign_in_upgrades_a_password_hash_in_the_home_tenant_or_through_the_owner(settings, caplog, client):
    tenant = make_tenant("Acme")
    alice = _tenant_user(tenant, "alice", "pw-alice-12345")
    root = make_staff_user("root", "pw-root-123456", superuser=True)
    settings.PASSWORD_HASHERS = [f"{__name__}.OneRoundPBKDF2", MD5]
    # Django's own backend would store the upgrade outside any tenant: the database refuses it.
    with pytest.raises(DatabaseError, match=ACCOUNT_MESSAGE), transaction.atomic():
        ModelBackend().authenticate(None, username="alice", password="pw-alice-12345")
    assert _stored(alice)["password"].startswith("md5$")
    assert authenticate(username="alice", password="wrong-password") is None
    assert _stored(alice)["password"].startswith("md5$")
    with caplog.at_level(logging.INFO, logger="grounded.accounts"):
        assert authenticate(username="alice", password="pw-alice-12345") == alice  # in Acme, its home
        assert not [r for r in caplog.records if r.name == "grounded.accounts"]
        assert authenticate(username="root", password="pw-root-123456") == root  # no home: the owner connection
        assert [r.getMessage() for r in caplog.records if r.name == "grounded.accounts"] == [
            f"user {root.pk} (no home tenant, or a superuser): own password stored through the owner connection"]
    assert _stored(alice)["password"].startswith("pbkdf2_one$") and _stored(root)["password"].startswith("pbkdf2_one$")
    # The upgraded hashes still sign in, and a sign-in records last_login.
    assert client.login(username="alice", password="pw-alice-12345") and client.login(username="root", password="pw-root-123456")
    assert get_user_model().objects.get(pk=alice.pk).last_login is not None


@pytest.mark.parametrize("who", ["tenant admin", "staff without a home", "superuser"])
def test_staff_change_their_own_password_on_the_admin_site(client, who):
    tenant = make_tenant("Acme")
    if who == "tenant admin":  # staff whose home is the tenant (create_tenant_admin)
        make_tenant_admin(tenant=Tenant.objects.using("owner").get(pk=tenant.pk), username="boss", password="pw-old-123456")
        user = get_user_model().objects.get(username="boss")
    else:
        user = make_staff_user("boss", "pw-old-123456", superuser=who == "superuser")
        make_membership(user, tenant, "admin", all_departments=True)
    client.force_login(user)
    r = client.post("/admin/password_change/", {"old_password": "pw-old-123456", "new_password1": "pw-new-98765-x",
                                                "new_password2": "pw-new-98765-x"})
    assert r.status_code == 302 and r["Location"] == "/admin/password_change/done/", r.status_code
    assert authenticate(username="boss", password="pw-new-98765-x") is not None
    assert authenticate(username="boss", password="pw-old-123456") is None
    assert client.get("/admin/").status_code == 200  # still signed in (the session follows the new hash)


def test_operators_edit_users_and_groups_through_the_owner_connection(client):
    """Superusers use Django's user and group admins as before the guard, through the owner connection:
    a tenant's user's email and password change, a user and a group are added (the application role
    may not write groups at all), a user is deleted."""
    tenant = make_tenant("Acme")
    alice = _tenant_user(tenant, "alice", "pw-alice-12345")
    client.force_login(make_staff_user("root", superuser=True))
    r = client.post(f"/admin/auth/user/{alice.pk}/change/", {
        "username": "alice", "email": "alice@acme.test", "is_active": "on", "date_joined_0": "2024-01-02",
        "date_joined_1": "03:04:05"})
    assert r.status_code == 302, r.context["adminform"].form.errors if r.context else r.status_code
    assert _stored(alice)["email"] == "alice@acme.test"
    r = client.post(f"/admin/auth/user/{alice.pk}/password/", {"password1": "pw-reset-24680-y", "password2": "pw-reset-24680-y",
                                                                "usable_password": "true"})
    assert r.status_code == 302, r.status_code
    assert authenticate(username="alice", password="pw-reset-24680-y") == alice
    r = client.post("/admin/auth/user/add/", {"username": "newbie", "password1": "pw-newbie-13579", "password2": "pw-newbie-13579",
                                              "usable_password": "true"})
    assert r.status_code == 302 and get_user_model().objects.using("owner").filter(username="newbie").exists()
    assert client.post("/admin/auth/group/add/", {"name": "ops"}).status_code == 302
    assert Group.objects.using("owner").filter(name="ops").exists()
    assert client.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not get_user_model().objects.using("owner").filter(pk=alice.pk).exists()
    with query_checker.allowed("test oracle: the account's home in any tenant"):
        assert not TenantUser.objects.using("owner").filter(user_id=alice.pk).exists()  # its home and membership went with it


def test_an_operator_cannot_delete_the_account_it_is_signed_in_with(client):
    root = make_staff_user("root", superuser=True)
    client.force_login(root)
    assert client.get(f"/admin/auth/user/{root.pk}/delete/").status_code == 403
    assert client.post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}).status_code == 403
    assert get_user_model().objects.using("owner").filter(pk=root.pk).exists()
