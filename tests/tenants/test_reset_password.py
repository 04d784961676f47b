"""`manage.py reset_password` (what `scripts/run` prints for the demo's employee): a fresh random password
for one member of a tenant, printed once, that signs in to the chat page through the real login view and
reaches the member's own departments only; refused for a non-member and a superuser, and nobody else's
password changes."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.models import TenantUser
from tenants.scope import Scope, activate
from tests.factories import department, make_corpus, make_membership, make_staff_user, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# The command writes through the owner connection and commits: transactional tests.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

PRINTED = re.compile(r"^reader of '(?P<slug>[^']+)' \((?P<departments>[^)]*)\) for the chat at /: "
                     r"username '(?P<username>[^']+)'  password '(?P<password>[^']+)'$")


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    """Sign-in lockout counters in the cache fallback, empty."""
    settings.RATE_LIMIT_REDIS_URL = ""
    cache.clear()


def _employee(tenant, username: str, dept: str):
    """A reader of one department whose home is `tenant`, without a usable password (as agents.demo makes them)."""
    user = get_user_model().objects.create_user(username=username, password=None)
    with activate(Scope.system(tenant.id)):
        TenantUser.objects.create(user=user, tenant=tenant)
    make_membership(user, tenant, "reader", departments=[department(tenant, dept)])
    return user


def _reset(tenant, username: str) -> str:
    out = io.StringIO()
    call_command("reset_password", "--tenant", tenant.slug, "--username", username, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    found = PRINTED.match(lines[0])
    assert found is not None, lines[0]
    assert (found["slug"], found["username"]) == (tenant.slug, username)
    return found["password"]


def test_the_printed_password_signs_in_to_the_chat_within_her_departments_and_rotates():
    tenant = make_tenant("Kestrel")
    make_corpus(tenant, "Engineering handbook", department=department(tenant, "Engineering"))
    make_corpus(tenant, "Sales handbook", department=department(tenant, "Sales"))
    _employee(tenant, "ada", "Engineering")
    admin_out = io.StringIO()
    call_command("create_tenant_admin", tenant=tenant.slug, username="admin", stdout=admin_out)
    admin_password = admin_out.getvalue().split("password '")[1].split("'")[0]

    out = io.StringIO()
    call_command("reset_password", tenant=tenant.slug, username="ada", stdout=out)
    printed = PRINTED.match(out.getvalue().strip())
    assert printed is not None and printed["departments"] == "Engineering"
    assert "admin" not in out.getvalue() and admin_password not in out.getvalue()
    password = printed["password"]
    assert len(password) >= 16
    stored = get_user_model().objects.using("owner").get(username="ada").password
    assert password not in stored and stored.startswith("md5$")  # hashed by set_password (the tests' hasher)

    client = Client()
    signed_in = client.post("/login/", {"username": "ada", "password": password, "next": "/"})
    assert signed_in.status_code == 302 and signed_in.url == "/"
    page = client.get("/")
    assert page.status_code == 200 and "Ask Kestrel" in page.content.decode()
    corpora = client.get("/api/v1/corpora/").json()["results"]
    assert [c["name"] for c in corpora] == ["Engineering handbook"]  # her department's, not Sales'

    again = _reset(tenant, "ada")
    assert again != password
    assert authenticate(username="ada", password=password) is None
    assert authenticate(username="ada", password=again) is not None
    assert authenticate(username="admin", password=admin_password) is not None  # only ada changed


def test_refuses_a_non_member_a_member_elsewhere_and_a_superuser():
    tenant, other = make_tenant("Kestrel"), make_tenant("Other")
    _employee(other, "sam", "Sales")
    get_user_model().objects.create_user(username="stranger", password="pw-stranger-123")
    root = make_staff_user("root", "pw-root-123456", superuser=True)
    make_membership(root, tenant, "admin", all_departments=True)
    for username in ("sam", "stranger", "nobody", "root"):
        out = io.StringIO()
        with pytest.raises(CommandError, match="--username"):
            call_command("reset_password", tenant=tenant.slug, username=username, stdout=out)
        assert out.getvalue() == "", username
    assert authenticate(username="root", password="pw-root-123456") is not None
    assert authenticate(username="stranger", password="pw-stranger-123") is not None
    with pytest.raises(CommandError, match="--tenant"):
        call_command("reset_password", tenant="nope", username="sam", stdout=io.StringIO())
