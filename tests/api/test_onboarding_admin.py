"""The admin site's side of onboarding: "Invite people" (tenants.admin_invitations), the members list by
name, "Resend invitation"; and the end-to-end path invite -> email -> link -> password -> chat.

Staff users are made through the owner connection, as in production, so these tests are transactional."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.models import Department, Membership, TenantUser
from tenants.scope import Scope, across_tenants, activate
from tests.factories import department, make_membership, make_staff_user, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])
PASSWORD = "kestrel-blue-7219"
INVITE = "/admin/tenants/membership/invite/"


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


@pytest.fixture
def tenants():
    a, b = make_tenant("Acme"), make_tenant("Globex")
    with activate(Scope.system(b.id)):
        Department.objects.create(tenant=b, name="Globex R&D")
    return a, b


def staff_client(tenant, role: str, departments=None, name="boss") -> Client:
    user = make_staff_user(f"{name}-{tenant.slug}", PASSWORD, first_name="Grace", last_name="Hopper")
    make_membership(user, tenant, role, all_departments=departments is None, departments=departments or ())
    client = Client()
    client.force_login(user)
    return client


def link_of(message) -> str:
    return re.search(r"https?://[^/\s]+(/\S+)", message.body).group(1)


def test_an_admin_invites_and_the_employee_lands_in_the_chat(tenants, mailoutbox):
    a, _ = tenants
    admin = staff_client(a, "admin")
    changelist = admin.get("/admin/tenants/membership/").content.decode()
    assert f'href="{INVITE}"' in changelist
    form = admin.get(INVITE)
    assert form.status_code == 200 and 'value="Engineering"' in form.content.decode()
    sent = admin.post(INVITE, {"email": "ada@example.com", "role": "reader", "departments": ["Engineering"]}, follow=True)
    page = sent.content.decode()
    assert sent.redirect_chain[-1][0] == "/admin/tenants/membership/" and "Invitation sent to ada@example.com" in page
    assert "printed on the server&#x27;s console" not in page  # the tests' outbox backend, not the console
    (message,) = mailoutbox
    assert message.to == ["ada@example.com"] and "Grace Hopper" in message.body and f"ada@{a.slug}" in message.body

    employee = Client()
    link = link_of(message)
    assert employee.get(link).status_code == 200
    landed = employee.post(link, {"new_password1": PASSWORD, "new_password2": PASSWORD}, follow=True)
    assert landed.redirect_chain == [("/", 302)] and landed.status_code == 200 and "Ask Acme" in landed.content.decode()
    employee.post("/logout/")
    assert employee.post("/login/", {"username": f"ada@{a.slug}", "password": PASSWORD}).url == "/"
    assert Client().get(link).status_code == 410

    listed = admin.get("/admin/tenants/membership/").content.decode()
    assert "ada@example.com" in listed and "can sign in" in listed


def test_the_invite_form_offers_and_accepts_only_what_the_admin_may_grant(tenants, mailoutbox):
    a, b = tenants
    sales_admin = staff_client(a, "admin", departments=[department(a, "Sales")])
    html = sales_admin.get(INVITE).content.decode()
    assert 'value="Sales"' in html and 'value="Engineering"' not in html and "Globex R&amp;D" not in html
    assert 'name="all_departments"' not in html
    forged = [
        {"email": "x1@example.com", "role": "reader", "departments": ["Globex R&D"]},  # another tenant's department
        {"email": "x2@example.com", "role": "reader", "departments": ["Engineering"]},  # a department it does not see
        {"email": "x3@example.com", "role": "owner", "departments": ["Sales"]},  # no such role
        {"email": "x4@example.com", "role": "admin", "departments": ["Sales", "Globex R&D"]},  # one of them foreign
    ]
    for body in forged:
        answer = sales_admin.post(INVITE, body)
        assert answer.status_code == 200 and "errorlist" in answer.content.decode(), body
    assert not get_user_model().objects.filter(email__startswith="x").exists()
    # "All departments" is not offered to a department admin: posted anyway, it is ignored.
    narrowed = sales_admin.post(INVITE, {"email": "z@example.com", "role": "reader", "all_departments": "on"})
    assert narrowed.status_code == 302
    z = Membership.objects.using("owner").get(tenant_id=a.id, user__email="z@example.com")
    assert not z.all_departments and not Department.objects.using("owner").filter(tenant_id=a.id, membership=z).exists()
    # A forged tenant field is ignored: the invitation goes into the admin's own tenant.
    ok = sales_admin.post(INVITE, {"email": "y@example.com", "role": "reader", "departments": ["Sales"], "tenant": b.id})
    assert ok.status_code == 302
    y = get_user_model().objects.get(email="y@example.com")
    with across_tenants("the test looks for the invited account in every tenant"):
        assert list(TenantUser.objects.using("owner").filter(user=y).values_list("tenant_id", flat=True)) == [a.id]
        assert list(Membership.objects.using("owner").filter(user=y).values_list("tenant_id", flat=True)) == [a.id]
    assert len(mailoutbox) == 2


def test_editors_cannot_invite(tenants):
    a, _ = tenants
    assert staff_client(a, "editor").get(INVITE).status_code == 403


def test_members_are_listed_by_name_and_departments_by_name(tenants):
    a, _ = tenants
    admin = staff_client(a, "admin")
    ada = get_user_model().objects.create_user(username=f"ada@{a.slug}", email="ada@example.com", first_name="Ada",
                                               last_name="Lovelace")
    make_membership(ada, a, "reader", departments=[department(a, "Engineering")])
    listed = admin.get("/admin/tenants/membership/").content.decode()
    assert "Ada Lovelace" in listed and "ada@example.com" in listed and "Engineering" in listed
    assert f"{a.slug}/Engineering" not in listed
    add = admin.get("/admin/tenants/membership/add/").content.decode()
    assert "Ada Lovelace &lt;ada@example.com&gt;" in add
    assert ">Engineering<" in add and f"{a.slug}/Engineering" not in add


def test_resend_invitation_sends_a_new_link_and_the_old_one_stops_working(tenants, mailoutbox):
    a, _ = tenants
    admin = staff_client(a, "admin")
    admin.post(INVITE, {"email": "ada@example.com", "role": "reader", "departments": ["Sales"]})
    member = Membership.objects.using("owner").get(tenant_id=a.id, user__email="ada@example.com")
    admin.post("/admin/tenants/membership/", {"action": "resend_invitation", "_selected_action": [member.pk]})
    first, second = mailoutbox
    assert Client().get(link_of(first)).status_code == 410
    assert Client().get(link_of(second)).status_code == 200


def test_a_superuser_gets_no_reset_email(tenants, mailoutbox):
    make_staff_user("root", PASSWORD, superuser=True, email="root@example.com")
    answer = Client().post("/password-reset/", {"email": "root@example.com"})
    assert answer.status_code == 302 and mailoutbox == []


def test_an_email_that_cannot_be_sent_keeps_the_invitation_and_says_so(tenants, settings):
    a, _ = tenants
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, False, 2
    answer = staff_client(a, "admin").post(INVITE, {"email": "ada@example.com", "role": "reader"}, follow=True)
    assert "its email could not be sent" in answer.content.decode()
    assert Membership.objects.using("owner").filter(tenant_id=a.id, user__email="ada@example.com").exists()


def test_a_superuser_picks_the_tenant_then_invites_into_it(tenants, mailoutbox):
    a, b = tenants
    operator = Client()
    operator.force_login(make_staff_user("operator", PASSWORD, superuser=True))
    choice = operator.get(INVITE).content.decode()
    assert f'href="?tenant={a.slug}"' in choice and f'href="?tenant={b.slug}"' in choice
    form = operator.get(f"{INVITE}?tenant={b.slug}").content.decode()
    assert 'value="Globex R&amp;D"' in form and 'name="all_departments"' in form
    sent = operator.post(f"{INVITE}?tenant={b.slug}", {"email": "kim@example.com", "role": "auditor", "departments": ["Globex R&D"]})
    assert sent.status_code == 302 and len(mailoutbox) == 1
    with across_tenants("the test looks for the invited account in every tenant"):
        kim = Membership.objects.using("owner").get(user__email="kim@example.com")
    assert (kim.tenant_id, kim.role) == (b.id, "auditor")
