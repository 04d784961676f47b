"""Writes to a tenant's principals and settings, each checked by tenants.access first. The API and
the admin site call these, so a key or member made either way obeys the same rules.

Every function takes the acting `scope` (built from the authenticated caller) and must run inside
`activate(scope)`. They raise `NotAllowed` (a grant beyond the actor, with the field at fault) or
`NotVisible` (a row outside the actor's reach), never a partial write: each is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction

from tenants import access, tenant_settings
from tenants.models import ApiKey, Department, Membership, Tenant, TenantUser
from tenants.scope import NotAllowed, Scope

USERNAME_MAX = 150


def issue_key(scope: Scope, *, name: str, role: str, all_departments: bool = False,
              departments: list[Department] | None = None) -> tuple[ApiKey, str]:
    """A new key of the actor's tenant and its raw value (shown once)."""
    departments = list(departments or [])
    access.check_grant(scope, role=role, all_departments=all_departments, departments=departments)
    tenant = Tenant.objects.get(pk=scope.tenant_id)
    with transaction.atomic():
        return ApiKey.issue(tenant=tenant, name=name, role=role, all_departments=all_departments, departments=departments)


def revoke_key(scope: Scope, key: ApiKey, *, actor_key_id: int | None = None, confirm_self_revoke: bool = False) -> None:
    """Revoke a visible key (the row stays: run traces name it).

    `actor_key_id` is the key the request is made with (None for a signed-in user). A key revoking
    itself locks its caller out at once, so it must say so: without `confirm_self_revoke` it is
    NotAllowed on the field `confirm_self_revoke` (the API's 400) and nothing changes."""
    access.check_may_change_principal(scope, key)
    if actor_key_id is not None and key.pk == actor_key_id and not confirm_self_revoke:
        raise NotAllowed("this is the key making the request: revoking it locks you out at once; "
                         "send confirm_self_revoke: true to revoke it anyway", field="confirm_self_revoke")
    if key.is_active:
        key.revoke()


def login_name(tenant: Tenant, name: str) -> str:
    """The sign-in name of a user a tenant admin creates: `<name>@<tenant slug>`. Users belong to the
    tenant that made them, so the same name in two tenants is two accounts, and whether a name exists
    in another tenant never shows."""
    return f"{name}@{tenant.slug}"


def display_name(user: AbstractBaseUser, tenant_slug: str) -> str:
    """A member's name as its tenant sees it: without the tenant's own login suffix."""
    suffix = f"@{tenant_slug}"
    username = user.get_username()
    return username[: -len(suffix)] if username.endswith(suffix) else username


@dataclass(frozen=True)
class MemberGrant:
    role: str
    all_departments: bool
    departments: list[Department]


def _tenant_user(scope: Scope, tenant: Tenant, name: str, email: str):
    """The tenant's own user called `name` (its login, or login_name), else a new one without a password."""
    users = get_user_model().objects
    found = users.filter(pk__in=TenantUser.objects.filter(tenant_id=tenant.pk).values("user_id"),
                         username__in=[name, login_name(tenant, name)]).first()
    if found is not None:
        return found
    login = login_name(tenant, name)
    try:
        UnicodeUsernameValidator()(login)
    except DjangoValidationError:
        raise NotAllowed("letters, digits and @/./+/-/_ only", field="username") from None
    if len(login) > USERNAME_MAX:
        raise NotAllowed(f"at most {USERNAME_MAX - len(tenant.slug) - 1} characters", field="username")
    try:
        with transaction.atomic():
            # Without a password from the start: changing it later needs the home row first (tenants 0006).
            user = users.create(username=login, email=email, password=make_password(None))
    except IntegrityError:  # an operator made this exact login elsewhere: never attach it here
        raise NotAllowed("this name is not available; choose another", field="username") from None
    TenantUser.objects.create(user=user, tenant=tenant)
    return user


def add_member(scope: Scope, *, username: str, email: str = "", grant: MemberGrant) -> Membership:
    """Make the tenant's user `username` (created if the tenant has none of that name) a member."""
    access.check_grant(scope, role=grant.role, all_departments=grant.all_departments, departments=grant.departments)
    tenant = Tenant.objects.get(pk=scope.tenant_id)
    with transaction.atomic():
        return _make_member(scope, _tenant_user(scope, tenant, username.strip(), email), grant, field="username")


def add_member_user(scope: Scope, *, user: AbstractBaseUser, grant: MemberGrant) -> Membership:
    """Make an existing user the actor may pick (access.visible_users) a member (the admin site's form)."""
    access.check_grant(scope, role=grant.role, all_departments=grant.all_departments, departments=grant.departments)
    if not access.visible_users(scope).filter(pk=user.pk).exists():
        raise NotAllowed("user not found", field="user")
    with transaction.atomic():
        return _make_member(scope, user, grant, field="user")


def _make_member(scope: Scope, user, grant: MemberGrant, *, field: str) -> Membership:
    """The membership of `user` in the actor's tenant with an already checked `grant`; refused (on
    `field`) when the user is a member already."""
    if Membership.objects.filter(tenant_id=scope.tenant_id, user=user).exists():
        raise NotAllowed("already a member", field=field)
    member = Membership.objects.create(tenant_id=scope.tenant_id, user=user, role=grant.role, all_departments=grant.all_departments)
    member.departments.set(grant.departments)
    return member


def change_member(scope: Scope, member: Membership, *, actor_user_id: int | None, role: str | None = None,
                  all_departments: bool | None = None, departments: list[Department] | None = None) -> Membership:
    """Change a visible membership's role or departments (None: unchanged). The result must be a grant
    the actor could make; an admin cannot take away its own admin role."""
    access.check_may_change_principal(scope, member)
    new_role = member.role if role is None else role
    new_all = member.all_departments if all_departments is None else all_departments
    new_departments = list(member.departments.all()) if departments is None else departments
    access.check_grant(scope, role=new_role, all_departments=new_all, departments=new_departments)
    if member.user_id == actor_user_id and new_role != member.role:
        raise NotAllowed("you cannot change your own role", field="role")
    with transaction.atomic():
        member.role, member.all_departments = new_role, new_all
        member.save(update_fields=["role", "all_departments"])
        if departments is not None:
            member.departments.set(new_departments)
    return member


def remove_member(scope: Scope, member: Membership, *, actor_user_id: int | None) -> None:
    """Remove a visible membership (the user account stays, for the audit trail)."""
    access.check_may_change_principal(scope, member)
    if member.user_id == actor_user_id:
        raise NotAllowed("you cannot remove yourself", field="id")
    member.delete()


def update_tenant_settings(scope: Scope, settings: dict) -> Tenant:
    """Replace the tenant's settings (tenant-wide admins only), validated by their schema
    (tenants.tenant_settings.parse): NotAllowed on the field `settings` naming the bad key (the API's 400)."""
    access.check_may_change_tenant_settings(scope)
    if not isinstance(settings, dict):
        raise NotAllowed("must be a JSON object", field="settings")
    try:
        tenant_settings.parse(settings)
    except tenant_settings.TenantSettingsError as exc:
        raise NotAllowed(str(exc), field="settings") from None
    tenant = Tenant.objects.get(pk=scope.tenant_id)
    tenant.settings = settings
    tenant.save(update_fields=["settings"])
    return tenant
