"""Operator actions: changes the application role is not allowed to make, done on purpose through the
owner connection ("owner" alias, which bypasses row-level security and the auth_user privilege-flag
guard of tenants 0003) and logged on `grounded.operator`, one INFO line per action.

Only management commands run by an operator call these; never a request handler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from tenants.models import ApiKey, Membership, Role, Tenant, TenantUser

OWNER = "owner"
log = logging.getLogger("grounded.operator")


@dataclass(frozen=True)
class TenantAdmin:
    """What `make_tenant_admin` set up; `raw_key` is shown once and never stored."""

    username: str
    tenant: Tenant
    raw_key: str
    revoked_keys: int


def make_tenant_admin(*, tenant: Tenant, username: str, password: str, key_role: str = Role.READER) -> TenantAdmin:
    """Create or reset `username` as a staff user administering all of `tenant` (home tenant = `tenant`
    when the account is new), revoke their earlier create_tenant_admin key and issue a new one."""
    key_name = f"{username} (created by create_tenant_admin)"
    with transaction.atomic(using=OWNER):
        user, _ = get_user_model().objects.db_manager(OWNER).get_or_create(username=username)
        user.is_staff = True
        user.set_password(password)
        user.save(using=OWNER)
        TenantUser.objects.using(OWNER).get_or_create(user=user, defaults={"tenant": tenant})
        membership, _ = Membership.objects.using(OWNER).get_or_create(user=user, tenant=tenant)
        membership.role = Role.ADMIN
        membership.all_departments = True
        membership.save(using=OWNER)
        revoked = (ApiKey.objects.using(OWNER).filter(tenant=tenant, name=key_name, revoked_at__isnull=True)
                   .update(revoked_at=timezone.now()))
        _, raw = ApiKey.issue(tenant=tenant, name=key_name, role=key_role, all_departments=True, using=OWNER)
    log.info("make_tenant_admin: user %r is staff and admin of tenant %r (all departments); %d old key(s) revoked, "
             "a new %s key issued", username, tenant.slug, revoked, key_role)
    return TenantAdmin(username=username, tenant=tenant, raw_key=raw, revoked_keys=revoked)
