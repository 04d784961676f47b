"""Operator actions: changes the application role is not allowed to make, done on purpose through the
owner connection ("owner" alias, which bypasses row-level security and the auth_user privilege-flag
guard of tenants 0003) and logged on `grounded.operator`, one INFO line per action.

Only management commands run by an operator call these; never a request handler.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone

from tenants.models import ApiKey, Department, Membership, Role, Tenant, TenantUser
from tenants.scope import across_tenants

OWNER = "owner"
log = logging.getLogger("grounded.operator")
_KEY_NAME_SUFFIX = "(created by create_tenant_admin)"


@dataclass(frozen=True)
class TenantAdmin:
    """What `make_tenant_admin` set up; `raw_keys` (role -> raw key, in the order asked) are shown once
    and never stored."""

    username: str
    tenant: Tenant
    raw_keys: dict[str, str]
    revoked_keys: int

    @property
    def raw_key(self) -> str:
        """The first key issued."""
        return next(iter(self.raw_keys.values()))


def make_tenant_admin(*, tenant: Tenant, username: str, password: str,
                      key_roles: Sequence[str] = (Role.READER,)) -> TenantAdmin:
    """Create or reset `username` as a staff user administering all of `tenant` (home tenant = `tenant`
    when the account is new), revoke every earlier create_tenant_admin key of theirs and issue one new
    all-departments key per role in `key_roles` (named `<username> <role> key (created by
    create_tenant_admin)`)."""
    roles = list(dict.fromkeys(key_roles))
    if not roles or any(role not in Role.values for role in roles):
        raise ValueError(f"key_roles: each must be one of {', '.join(Role.values)}")
    with transaction.atomic(using=OWNER):
        user, _ = get_user_model().objects.db_manager(OWNER).get_or_create(username=username)
        user.is_staff = True
        user.set_password(password)
        user.save(using=OWNER)
        with across_tenants("operator: an existing account's home may be another tenant"):
            TenantUser.objects.using(OWNER).get_or_create(user=user, defaults={"tenant": tenant})
        membership, _ = Membership.objects.using(OWNER).get_or_create(user=user, tenant=tenant)
        membership.role = Role.ADMIN
        membership.all_departments = True
        membership.save(using=OWNER)
        # Usernames hold no spaces, so "<username> " prefixes this user's keys only (old names included:
        # "<username> (created by create_tenant_admin)").
        revoked = (ApiKey.objects.using(OWNER)
                   .filter(tenant=tenant, name__startswith=f"{username} ", name__endswith=_KEY_NAME_SUFFIX,
                           revoked_at__isnull=True)
                   .update(revoked_at=timezone.now()))
        raw_keys = {}
        for role in roles:
            _, raw_keys[role] = ApiKey.issue(tenant=tenant, name=f"{username} {role} key {_KEY_NAME_SUFFIX}", role=role,
                                             all_departments=True, using=OWNER)
    log.info("make_tenant_admin: user %r is staff and admin of tenant %r (all departments); %d old key(s) revoked, "
             "new key(s) issued with role(s) %s", username, tenant.slug, revoked, ", ".join(roles))
    return TenantAdmin(username=username, tenant=tenant, raw_keys=raw_keys, revoked_keys=revoked)


class NotAMember(ValueError):
    """`reset_member_password` was asked about a user it may not touch (the message says why)."""


def reset_member_password(*, tenant: Tenant, username: str, password: str) -> Membership:
    """Set the password of `username`, a member of `tenant` (stored hashed by `set_password`), and
    return the membership (with its departments loaded). Only that one user changes.

    Raises NotAMember when no user of that name is a member of `tenant`, and for a superuser (whose
    password is the operator's own business: `manage.py changepassword`); the answer for an unknown
    name and a non-member is the same."""
    with transaction.atomic(using=OWNER):
        membership = (Membership.objects.using(OWNER).select_related("user", "tenant")
                      .prefetch_related(Prefetch("departments", queryset=Department.objects.filter(tenant=tenant)))
                      .filter(tenant=tenant, user__username=username).first())
        if membership is None:
            raise NotAMember(f"no member {username!r} in tenant {tenant.slug!r}")
        user = membership.user
        if user.is_superuser:
            raise NotAMember(f"{username!r} is a superuser: use `manage.py changepassword` for them")
        user.set_password(password)
        user.save(using=OWNER, update_fields=["password"])
    log.info("reset_member_password: new password for member %r of tenant %r", username, tenant.slug)
    return membership
