import io
import logging

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from tenants.models import Membership, TenantUser
from tenants.principals import authenticate_key
from tenants.scope import Scope, activate
from tests.factories import make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# The command writes through the owner connection and commits: the app role sees it only when the
# test does not hold its own transaction open.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def test_creates_a_tenant_admin_and_a_working_key_and_rerun_rotates_them(caplog):
    tenant = make_tenant("Demo Co")
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="grounded.operator"):
        call_command("create_tenant_admin", tenant=tenant.slug, username="boss", password="s3cret-pass", stdout=out)
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.name == "grounded.operator"] == ["make_tenant_admin"]
    assert authenticate(username="boss", password="s3cret-pass") is not None
    user = get_user_model().objects.get(username="boss")
    assert user.is_staff and not user.is_superuser
    with activate(Scope.system(tenant.id)):
        membership = Membership.objects.get(user=user, tenant=tenant)
        assert TenantUser.objects.get(user=user).tenant_id == tenant.id
    assert membership.role == "admin" and membership.all_departments
    lines = out.getvalue().splitlines()
    assert lines[0] == f"tenant admin for {tenant.slug!r}: username 'boss'  password 's3cret-pass'"
    raw = lines[1].split("shown once): ")[1].strip()
    assert authenticate_key(raw)[0].tenant_id == tenant.id
    call_command("create_tenant_admin", tenant=tenant.slug, username="boss", stdout=io.StringIO())
    assert authenticate_key(raw) is None  # the previous key was revoked
    assert authenticate(username="boss", password="s3cret-pass") is None


def test_one_key_per_role_asked_each_labelled_and_working_and_rerun_revokes_them_all():
    tenant = make_tenant("Demo Co")
    out = io.StringIO()
    call_command("create_tenant_admin", "--tenant", tenant.slug, "--username", "boss", "--key-role", "admin",
                 "--key-role", "reader", stdout=out)
    lines = out.getvalue().splitlines()[1:]
    assert [line.split(" (")[0] for line in lines] == ["API key, role admin", "API key, role reader"]
    assert "upload" in lines[0] and "no uploads" in lines[1]
    raws = [line.split("shown once): ")[1].strip() for line in lines]
    assert [authenticate_key(raw)[1].role for raw in raws] == ["admin", "reader"]
    call_command("create_tenant_admin", tenant=tenant.slug, username="boss", stdout=io.StringIO())
    assert [authenticate_key(raw) for raw in raws] == [None, None]


def test_unknown_tenant_names_the_option():
    with pytest.raises(CommandError, match="--tenant"):
        call_command("create_tenant_admin", tenant="nope", stdout=io.StringIO())
