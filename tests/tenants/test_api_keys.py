import pytest

from tenants.models import ApiKey, hash_secret
from tenants.principals import authenticate_key
from tenants.scope import Scope, ScopeRequired, activate
from tests.factories import department, make_tenant

pytestmark = pytest.mark.django_db


def test_only_the_hash_is_stored_and_the_raw_key_authenticates():
    tenant = make_tenant("Keys")
    sales = department(tenant, "Sales")
    key, raw = ApiKey.issue(tenant=tenant, name="ci", role="editor", departments=[sales])
    with activate(Scope.system(tenant.id)):
        stored = ApiKey.objects.get(pk=key.pk)
    secret = raw[len("gk_"):].partition("_")[2]
    assert secret not in (stored.secret_hash, stored.public_id, str(stored))
    assert stored.secret_hash == hash_secret(secret)
    found, scope = authenticate_key(raw)
    assert found.pk == key.pk and found.last_used_at is not None
    assert scope.tenant_id == tenant.id and scope.department_ids == {sales.id} and scope.role == "editor"
    assert scope.principal == f"key:{key.public_id}"


@pytest.mark.parametrize("mangle", [lambda r: r[:-1] + ("A" if r[-1] != "A" else "B"), lambda r: r + "x",
                                    lambda r: "gk_nothing_here", lambda r: "", lambda r: r.replace("gk_", "")])
def test_wrong_keys_are_rejected(mangle):
    _, raw = ApiKey.issue(tenant=make_tenant(), name="k")
    assert authenticate_key(mangle(raw)) is None


def test_revoked_key_no_longer_authenticates():
    tenant = make_tenant()
    key, raw = ApiKey.issue(tenant=tenant, name="k")
    with activate(Scope.system(tenant.id)):
        key.revoke()
    assert authenticate_key(raw) is None


def test_issue_refuses_to_write_into_another_tenant_than_the_active_one():
    a, b = make_tenant(), make_tenant()
    with activate(Scope.system(a.id)), pytest.raises(ScopeRequired):
        ApiKey.issue(tenant=b, name="smuggled")
    with activate(Scope.system(a.id)):
        key, _ = ApiKey.issue(tenant=a, name="own")
    assert key.tenant_id == a.id
