import pytest

from tenants.models import ApiKey, Department, hash_secret
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db


def test_only_the_hash_is_stored_and_the_raw_key_authenticates():
    tenant = make_tenant("Keys")
    sales = Department.objects.get(tenant=tenant, name="Sales")
    key, raw = ApiKey.issue(tenant=tenant, name="ci", role="editor", departments=[sales])
    stored = ApiKey.objects.get(pk=key.pk)
    secret = raw[len("gk_"):].partition("_")[2]
    assert secret not in (stored.secret_hash, stored.public_id, str(stored))
    assert stored.secret_hash == hash_secret(secret)
    found = ApiKey.authenticate(raw)
    assert found is not None and found.pk == key.pk and found.last_used_at is not None
    scope = found.scope()
    assert scope.tenant_id == tenant.id and scope.department_ids == {sales.id} and scope.role == "editor"
    assert scope.principal == f"key:{key.public_id}"


@pytest.mark.parametrize("mangle", [lambda r: r[:-1] + ("A" if r[-1] != "A" else "B"), lambda r: r + "x",
                                    lambda r: "gk_nothing_here", lambda r: "", lambda r: r.replace("gk_", "")])
def test_wrong_keys_are_rejected(mangle):
    _, raw = ApiKey.issue(tenant=make_tenant(), name="k")
    assert ApiKey.authenticate(mangle(raw)) is None


def test_revoked_key_no_longer_authenticates():
    key, raw = ApiKey.issue(tenant=make_tenant(), name="k")
    key.revoke()
    assert ApiKey.authenticate(raw) is None
