import io

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command

from tenants.models import ApiKey, Membership
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db


def test_creates_a_tenant_admin_and_a_working_key_and_rerun_rotates_them():
    tenant = make_tenant("Demo Co")
    out = io.StringIO()
    call_command("create_tenant_admin", tenant=tenant.slug, username="boss", password="s3cret-pass", stdout=out)
    assert authenticate(username="boss", password="s3cret-pass") is not None
    membership = Membership.objects.get(user__username="boss", tenant=tenant)
    assert membership.role == "admin" and membership.all_departments and membership.user.is_staff
    raw = out.getvalue().split("shown once): ")[1].strip()
    assert ApiKey.authenticate(raw).tenant_id == tenant.id
    call_command("create_tenant_admin", tenant=tenant.slug, username="boss", stdout=io.StringIO())
    assert ApiKey.authenticate(raw) is None  # the previous key was revoked
    assert authenticate(username="boss", password="s3cret-pass") is None


def test_unknown_tenant_names_the_option():
    with pytest.raises(CommandError, match="--tenant"):
        call_command("create_tenant_admin", tenant="nope", stdout=io.StringIO())
