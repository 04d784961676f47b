"""Getting people in: invitations (tenants.invitations, /invite/<token>/) and "Forgot password?"
(/password-reset/), on the real database with Django's test email outbox.

The isolation rule holds here as everywhere: nothing an admin names can invite into another tenant or grant
another tenant's departments, a grant never exceeds the inviting admin's, a link works once, for its own
account, until it expires; a reset never re-activates an account or reaches a superuser, and never says
whether an address has an account."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time as real_time
from types import SimpleNamespace

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core import signing
from django.test import Client

from tenants import invitations
from tenants.models import Department, Membership, TenantUser
from tenants.scope import NotAllowed, Scope, activate
from tests.factories import dept_scope, make_membership, make_tenant, whole_tenant

PASSWORD = "kestrel-blue-7219"


@pytest.fixture
def two(db):
    a, b = make_tenant("Acme"), make_tenant("Globex")
    with activate(Scope.system(b.id)):
        Department.objects.create(tenant=b, name="Globex R&D")
    return SimpleNamespace(a=a, b=b)


@pytest.fixture(autouse=True)
def _offline(settings):
    """(Rate-limit counters start empty in each test: tests/api/conftest.py's `_fresh_limits`.)"""
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


def invite(tenant_scope: Scope, email: str, role: str = "reader", departments=(), **kwargs) -> invitations.Invitation:
    with activate(tenant_scope):
        return invitations.invite(tenant_scope, email=email, role=role, department_names=list(departments), **kwargs)


def link_of(message) -> str:
    return re.search(r"https?://[^/\s]+(/\S+)", message.body).group(1)


def membership_of(user, tenant) -> Membership | None:
    with activate(Scope.system(tenant.id)):
        return Membership.objects.filter(user=user, tenant=tenant).first()


def departments_of_member(member: Membership) -> list[Department]:
    with activate(Scope.system(member.tenant_id)):
        return list(Department.objects.filter(tenant_id=member.tenant_id, membership=member).order_by("name"))


# --- invitations: the domain ---------------------------------------------------------------------------


def test_an_invitation_makes_an_inactive_account_homed_in_the_tenant_with_the_grant(two):
    inv = invite(whole_tenant(two.a), "Ada.Lovelace@Example.COM", departments=["Engineering"])
    user = get_user_model().objects.get(pk=inv.user.pk)
    assert user.email == "Ada.Lovelace@example.com" and user.username == f"Ada.Lovelace@{two.a.slug}"
    assert not user.is_active and not user.has_usable_password() and not user.is_staff and not user.is_superuser
    with activate(Scope.system(two.a.id)):
        assert TenantUser.objects.filter(tenant_id=two.a.id, user=user).exists()
    member = membership_of(user, two.a)
    assert member.role == "reader" and not member.all_departments
    assert [(d.tenant_id, d.name) for d in departments_of_member(member)] == [(two.a.id, "Engineering")]
    assert membership_of(user, two.b) is None


def test_another_tenants_department_is_not_found_and_nothing_is_written(two):
    before = get_user_model().objects.count()
    with pytest.raises(NotAllowed) as refused:
        invite(whole_tenant(two.a), "eve@example.com", departments=["Globex R&D"])
    assert refused.value.field == "departments" and "not found" in str(refused.value)
    assert get_user_model().objects.count() == before
    # A name both tenants use resolves to the inviting tenant's department only.
    member = invite(whole_tenant(two.a), "sam@example.com", departments=["Sales"]).membership
    assert {d.tenant_id for d in departments_of_member(member)} == {two.a.id}


def test_a_department_admin_cannot_widen_the_grant(two):
    sales_admin = dept_scope(two.a, "Sales", role="admin")
    for kwargs, field in [({"departments": ["Engineering"]}, "departments"), ({"all_departments": True}, "all_departments"),
                          ({"role": "superuser"}, "role")]:
        with pytest.raises(NotAllowed) as refused:
            invite(sales_admin, "wide@example.com", **kwargs)
        assert refused.value.field == field, kwargs
    assert not get_user_model().objects.filter(email="wide@example.com").exists()
    assert invite(sales_admin, "narrow@example.com", departments=["Sales"]).membership.role == "reader"


def test_only_admins_invite(two):
    for role in ("editor", "reader", "auditor"):
        with pytest.raises(NotAllowed):
            invite(whole_tenant(two.a, role=role), f"{role}@example.com", role="reader")


def test_an_account_of_another_tenant_with_the_same_email_is_never_touched(two):
    globex_user = get_user_model().objects.create_user(username="pat@globex", email="pat@example.com", password=PASSWORD)
    with activate(Scope.system(two.b.id)):
        TenantUser.objects.create(user=globex_user, tenant=two.b)
    make_membership(globex_user, two.b, "reader", all_departments=True)
    inv = invite(whole_tenant(two.a), "pat@example.com")
    assert inv.created and inv.user.pk != globex_user.pk
    globex_user.refresh_from_db()
    assert globex_user.check_password(PASSWORD) and globex_user.is_active
    assert membership_of(globex_user, two.a) is None
    assert invitations.invited_user(inv.token).pk == inv.user.pk


def test_accepting_sets_the_password_activates_and_works_once(two):
    inv = invite(whole_tenant(two.a), "ada@example.com")
    user = invitations.accept(inv.token, PASSWORD)
    assert user.is_active and authenticate(username=inv.user.username, password=PASSWORD).pk == inv.user.pk
    with pytest.raises(invitations.LinkUsed):
        invitations.accept(inv.token, "another-password-991")
    assert authenticate(username=inv.user.username, password=PASSWORD) is not None


def test_a_weak_password_is_refused_by_djangos_validators(two, settings):
    settings.AUTH_PASSWORD_VALIDATORS = [{"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"}]
    inv = invite(whole_tenant(two.a), "ada@example.com")
    with pytest.raises(Exception, match="too short"):
        invitations.accept(inv.token, "short")
    assert not get_user_model().objects.get(pk=inv.user.pk).is_active


def test_reinviting_resends_and_the_older_link_stops_working(two):
    first = invite(whole_tenant(two.a), "ada@example.com", departments=["Sales"])
    second = invite(whole_tenant(two.a), "ada@example.com", departments=["Engineering"], role="editor")
    assert second.resent and not second.created and second.user.pk == first.user.pk
    assert [d.name for d in departments_of_member(membership_of(second.user, two.a))] == ["Engineering"]
    with pytest.raises(invitations.LinkUsed):
        invitations.invited_user(first.token)
    assert invitations.accept(second.token, PASSWORD).is_active
    with pytest.raises(NotAllowed, match="already a member"):
        invite(whole_tenant(two.a), "ada@example.com")


def test_an_expired_link_says_so(two, settings, monkeypatch):
    settings.INVITE_LINK_MAX_AGE_SECONDS = 3600
    inv = invite(whole_tenant(two.a), "ada@example.com")
    monkeypatch.setattr(signing, "time", SimpleNamespace(time=lambda: real_time.time() + 3601))
    with pytest.raises(invitations.LinkExpired):
        invitations.invited_user(inv.token)
    page = Client().get(f"/invite/{inv.token}/")
    assert page.status_code == 410 and "has expired" in page.content.decode()


def test_a_token_cannot_be_turned_into_another_users(two):
    ada = invite(whole_tenant(two.a), "ada@example.com")
    bob = invite(whole_tenant(two.a), "bob@example.com")
    payload, _, signature = ada.token.partition(":")
    forged = signing.dumps({"u": bob.user.pk, "s": "0" * 32}, salt=invitations.SALT)  # right salt, wrong state
    body_swapped = signing.b64_encode(signing.JSONSerializer().dumps({"u": bob.user.pk})).decode() + ":" + signature
    for token in (forged, body_swapped, ada.token + "x", "nonsense"):
        with pytest.raises(invitations.LinkInvalid):
            invitations.accept(token, PASSWORD)
    assert not get_user_model().objects.get(pk=bob.user.pk).is_active
    # A password-reset token is not an invitation token either.
    reset_style = signing.dumps({"u": bob.user.pk}, salt="django.contrib.auth.tokens.PasswordResetTokenGenerator")
    with pytest.raises(invitations.LinkInvalid):
        invitations.invited_user(reset_style)


def test_a_withdrawn_invitation_cannot_be_accepted(two):
    inv = invite(whole_tenant(two.a), "ada@example.com")
    with activate(Scope.system(two.a.id)):
        Membership.objects.filter(tenant_id=two.a.id, pk=inv.membership.pk).delete()
    with pytest.raises(invitations.LinkInvalid):
        invitations.accept(inv.token, PASSWORD)
    assert not get_user_model().objects.get(pk=inv.user.pk).is_active


# --- invitations: the link's page ------------------------------------------------------------------------


def test_the_link_sets_a_password_signs_in_and_opens_the_chat(two, mailoutbox):
    inv = invite(whole_tenant(two.a), "ada@example.com", departments=["Engineering"])
    url = f"/invite/{inv.token}/"
    client = Client()
    page = client.get(url)
    assert page.status_code == 200 and inv.user.username in page.content.decode()
    mismatch = client.post(url, {"new_password1": PASSWORD, "new_password2": PASSWORD + "x"})
    assert mismatch.status_code == 200 and "errors" in mismatch.content.decode()
    done = client.post(url, {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert done.status_code == 302 and done.url == "/"
    chat = client.get("/")
    assert chat.status_code == 200 and "Ask Acme" in chat.content.decode()
    again = Client().get(url)
    assert again.status_code == 410 and "already been used" in again.content.decode()
    assert Client().post("/login/", {"username": inv.user.username, "password": PASSWORD}).status_code == 302


def test_an_invitation_email_names_the_link_and_the_sign_in_name(two, mailoutbox):
    inv = invite(whole_tenant(two.a), "ada@example.com")
    invitations.send_invitation(inv, accept_url=f"http://testserver/invite/{inv.token}/", invited_by="Grace")
    (message,) = mailoutbox
    assert message.to == ["ada@example.com"] and "Acme" in message.subject
    assert link_of(message) == f"/invite/{inv.token}/" and inv.user.username in message.body and "Grace" in message.body


# --- password reset ----------------------------------------------------------------------------------------


def employee(tenant, email="bo@example.com", password=PASSWORD, username="bo"):
    user = get_user_model().objects.create_user(username=f"{username}@{tenant.slug}", email=email, password=password)
    with activate(Scope.system(tenant.id)):
        TenantUser.objects.create(user=user, tenant=tenant)
    make_membership(user, tenant, "reader", all_departments=True)
    return user


def test_forgot_password_emails_a_link_that_sets_a_new_password_once(two, mailoutbox):
    user = employee(two.a)
    client = Client()
    assert 'href="/password-reset/"' in client.get("/login/").content.decode()
    assert 'href="/admin/password-reset/"' in client.get("/admin/login/").content.decode()
    sent = client.post("/password-reset/", {"email": "BO@example.com"})
    assert sent.status_code == 302 and sent.url == "/password-reset/sent/"
    (message,) = mailoutbox
    assert message.to == ["bo@example.com"] and user.username in message.body
    link = link_of(message)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and 'name="new_password1"' in form.content.decode()
    new = "a-new-kestrel-4410"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done.status_code == 302 and done.url == "/"
    assert client.get("/").status_code == 200
    assert authenticate(username=user.username, password=new) is not None
    assert authenticate(username=user.username, password=PASSWORD) is None
    reused = Client().get(link, follow=True)
    assert "Link not valid" in reused.content.decode()


def test_the_reset_page_never_says_whether_an_address_has_an_account(two, mailoutbox):
    employee(two.a)
    known = Client().post("/password-reset/", {"email": "bo@example.com"})
    unknown = Client().post("/password-reset/", {"email": "nobody@example.com"})
    assert (known.status_code, known.url) == (unknown.status_code, unknown.url) == (302, "/password-reset/sent/")
    assert [m.to for m in mailoutbox] == [["bo@example.com"]]


def test_a_reset_never_revives_a_switched_off_account(two, mailoutbox):
    """(A superuser gets no reset email at all: tests/api/test_onboarding_admin.py.)"""
    user = employee(two.a)
    client = Client()
    client.post("/password-reset/", {"email": "bo@example.com"})
    form = client.get(link_of(mailoutbox[-1]), follow=True)
    with activate(Scope.system(two.a.id)):  # the admin switches the account off after the email went out
        get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    refused = client.post(form.redirect_chain[-1][0], {"new_password1": "fresh-pass-9981", "new_password2": "fresh-pass-9981"})
    assert refused.status_code == 200 and "Link not valid" in refused.content.decode()
    user.refresh_from_db()
    assert not user.is_active and user.check_password(PASSWORD)


def test_reset_requests_are_limited_per_address_and_per_email(two, settings, mailoutbox):
    settings.PASSWORD_RESET_REQUESTS_PER_HOUR = 2
    employee(two.a)
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert [client.post("/password-reset/", {"email": f"x{i}@example.com"}).status_code for i in range(3)] == [302, 302, 429]
    # The same address from many clients: the third email is not sent, and the page reads the same.
    answers = [Client(REMOTE_ADDR=f"198.51.100.{i}").post("/password-reset/", {"email": "bo@example.com"}) for i in range(3)]
    assert [(r.status_code, r.url) for r in answers] == [(302, "/password-reset/sent/")] * 3
    assert len(mailoutbox) == 2


@pytest.mark.parametrize(("host", "backend"), [("", "console"), ("smtp.example.com", "smtp")])
def test_emails_print_on_the_console_unless_an_smtp_server_is_set(host, backend):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")} | {"EMAIL_HOST": host, "EMAIL_PORT": "2525"}
    shown = subprocess.run([sys.executable, "-c", "from django.conf import settings as s; "
                            "print(s.EMAIL_BACKEND, s.EMAIL_PORT, s.EMAIL_USE_TLS, s.DEFAULT_FROM_EMAIL)"],
                           env=env | {"DJANGO_SETTINGS_MODULE": "api.project.settings"}, capture_output=True, text=True, check=True)
    assert shown.stdout.split()[:3] == [f"django.core.mail.backends.{backend}.EmailBackend", "2525", "True"]
