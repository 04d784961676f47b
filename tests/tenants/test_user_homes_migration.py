"""tenants 0004: users that existed before TenantUser get their home tenant, when they have only one."""

from __future__ import annotations

import pytest

from tests.kb.scratch_database import migrate_to, scratch_alias  # noqa: F401  (fixture)


@pytest.mark.tenantless_sql("reads every tenant's rows as the owner to check what a migration wrote")
def test_0004_gives_single_tenant_users_their_home_and_leaves_the_others(scratch_alias):  # noqa: F811
    alias = scratch_alias
    apps = migrate_to(alias, ("tenants", "0003_row_level_security"))
    Tenant, Membership, User, TenantUser = (apps.get_model(*m.split(".")) for m in (
        "tenants.Tenant", "tenants.Membership", "auth.User", "tenants.TenantUser"))
    acme, globex = (Tenant.objects.using(alias).create(name=n, slug=n.lower()) for n in ("Acme", "Globex"))
    ada, bob, cy, dee = (User.objects.using(alias).create(username=n) for n in ("ada", "bob", "cy", "dee"))
    Membership.objects.using(alias).create(user=ada, tenant=acme)
    Membership.objects.using(alias).create(user=bob, tenant=acme)
    Membership.objects.using(alias).create(user=bob, tenant=globex)  # a consultant: no home is guessed
    TenantUser.objects.using(alias).create(user=cy, tenant=globex)  # already has one: kept
    Membership.objects.using(alias).create(user=cy, tenant=acme)
    apps = migrate_to(alias, ("tenants", "0004_backfill_tenant_users"))
    homes = dict(apps.get_model("tenants", "TenantUser").objects.using(alias).values_list("user__username", "tenant__slug"))
    assert homes == {"ada": "acme", "cy": "globex"}  # dee has no membership, bob has two
