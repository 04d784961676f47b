"""A tenant's settings are validated by their one schema wherever they are written: the admin's tenant
form shows a bad value as a form error naming its key, and the service the API would call refuses it
as a 400 on `settings` naming the key (api.errors); nothing is stored."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIRequestFactory

from api.errors import exception_handler
from tenants import services
from tenants.models import Tenant
from tenants.scope import NotAllowed
from tests.factories import make_membership, make_staff_user, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


@pytest.fixture
def tenant_admin(world, client):
    user = make_staff_user("acme-admin", "pw-acme-admin-1")
    make_membership(user, world.a, "admin", all_departments=True)
    client.force_login(user)
    return client


def test_the_admin_form_names_the_bad_key_and_stores_nothing(world, tenant_admin):
    url = f"/admin/tenants/tenant/{world.a.id}/change/"
    r = tenant_admin.post(url, {"settings": json.dumps({"daily_runs": 5, "budgets": {"max_k": "many"}})})
    assert r.status_code == 200
    errors = r.context["adminform"].form.errors["settings"]
    assert errors == ["budgets.max_k: must be a whole number from 1 to 50"]
    assert "budgets.max_k" in r.content.decode()  # shown on the form
    assert Tenant.objects.get(pk=world.a.id).settings == {}
    r = tenant_admin.post(url, {"settings": json.dumps({"daily_runs": 5, "budgets": {"max_k": 20}})})
    assert r.status_code == 302
    assert Tenant.objects.get(pk=world.a.id).settings == {"daily_runs": 5, "budgets": {"max_k": 20}}  # stored as typed


def test_the_service_refuses_a_bad_value_as_a_400_naming_the_key(world):
    with pytest.raises(NotAllowed) as refused:
        services.update_tenant_settings(whole_tenant(world.a), {"strict_citations": "no"})
    assert refused.value.field == "settings"
    response = exception_handler(refused.value, {"request": APIRequestFactory().post("/api/v1/")})
    assert response.status_code == 400
    assert response.data["error"]["fields"] == {"settings": ["strict_citations: must be true or false"]}
    assert Tenant.objects.get(pk=world.a.id).settings == {}
