"""Invitations: a tenant admin brings a person in by email; the person sets a password from the link.

`invite(scope, email=..., role=..., department_names=...)` makes (or, for a person of the same tenant,
reuses) an account homed in the actor's tenant and its membership, and returns the link token;
`send_invitation` emails it. `accept(token, password)` sets the password and activates the account.

Rules (the actor narrows, never widens):
- The tenant is always the actor's (`scope.tenant_id`); departments are named and looked up among those
  the actor sees (another tenant's, or an unseen one, is "not found" alike); role and departments pass
  tenants.access.check_grant, as for any membership. An invited account is never staff or superuser (the
  database refuses those flags to the application role anyway, tenants 0003).
- A person is reused only when their account's home is the actor's tenant, matched by email; an account
  of another tenant with the same email is never touched: the invitation makes a separate account.
  Someone who can already sign in and is a member is refused ("already a member": "Forgot password?").
- A token names one user and the state of its account when it was made (a digest of its password hash,
  active flag and email), signed with SECRET_KEY and timestamped: accepting changes the password, so an
  accepted link never works again, and a re-invitation gives the pending account a new unusable password,
  so the older links stop working. A link older than INVITE_LINK_MAX_AGE_SECONDS is `LinkExpired`.
- Must run inside `activate(scope)` (invite) like tenants.services; `accept` activates the home tenant itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils.crypto import constant_time_compare, salted_hmac

from tenants import access, services
from tenants.accounts import save_password_from_link
from tenants.conf import product_settings
from tenants.models import Department, Membership, Tenant, TenantUser
from tenants.scope import NotAllowed, Scope

SALT = "tenants.invitations"
MAX_EMAIL = 254


class LinkInvalid(Exception):  # noqa: N818  (a refusal the page shows, not a fault)
    """The link is not one of ours, or was withdrawn. The message is for the person holding the link."""


class LinkExpired(LinkInvalid):
    """A genuine link, older than INVITE_LINK_MAX_AGE_SECONDS."""


class LinkUsed(LinkInvalid):
    """A genuine link whose account changed since: accepted already, or replaced by a newer invitation."""


@dataclass(frozen=True)
class Invitation:
    """What `invite` did: the account (`created` when new), its membership, the tenant, the link token,
    and whether an earlier invitation of the same person was still pending (`resent`)."""

    user: User
    membership: Membership
    tenant: Tenant
    token: str
    created: bool
    resent: bool


def can_sign_in(user: User) -> bool:
    return bool(user.is_active and user.has_usable_password())


def departments_named(scope: Scope, names: Sequence[str]) -> list[Department]:
    """The actor's visible departments called `names` (exact names); NotAllowed on `departments` naming the
    first that is not one of them (missing, another tenant's and unseen alike)."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))
    found = {d.name: d for d in access.visible_departments(scope).filter(name__in=wanted)}
    for name in wanted:
        if name not in found:
            raise NotAllowed(f"department {name!r} not found", field="departments")
    return [found[n] for n in wanted]


def normalized_email(email: str) -> str:
    """`email` stripped, its domain lower-cased, checked (NotAllowed on `email`)."""
    email = get_user_model().objects.normalize_email((email or "").strip())
    try:
        validate_email(email)
    except ValidationError:
        raise NotAllowed("enter a valid email address", field="email") from None
    if len(email) > MAX_EMAIL:
        raise NotAllowed(f"at most {MAX_EMAIL} characters", field="email")
    return email


def invite(scope: Scope, *, email: str, role: str, department_names: Sequence[str] = (), all_departments: bool = False,
           actor_user_id: int | None = None) -> Invitation:
    """Invite `email` into the actor's tenant with this role and these departments (module docstring).
    Raises NotAllowed naming the field at fault; writes nothing then."""
    access.check_may_manage_principals(scope)
    email = normalized_email(email)
    departments = departments_named(scope, list(department_names))
    grant = services.MemberGrant(role=role, all_departments=all_departments, departments=departments)
    access.check_grant(scope, role=role, all_departments=all_departments, departments=departments)
    tenant = Tenant.objects.get(pk=scope.tenant_id)
    with transaction.atomic():
        user, created = _account_for(scope, tenant, email)
        member = Membership.objects.filter(tenant_id=scope.tenant_id, user_id=user.pk).first()
        resent = member is not None
        if member is None:
            member = services.add_member_user(scope, user=user, grant=grant)
        elif can_sign_in(user):
            raise NotAllowed("already a member who can sign in (they can use \"Forgot password?\" on the sign-in page)",
                             field="email")
        else:
            member = services.change_member(scope, member, actor_user_id=actor_user_id, role=role,
                                            all_departments=all_departments, departments=departments)
        if not user.is_active or not user.has_usable_password():
            # A fresh unusable password: the links of earlier invitations stop working.
            user.set_unusable_password()
            get_user_model().objects.filter(pk=user.pk).update(password=user.password)
        return Invitation(user=user, membership=member, tenant=tenant, token=make_token(user), created=created, resent=resent)


def _account_for(scope: Scope, tenant: Tenant, email: str) -> tuple[User, bool]:
    """The tenant's own account with this email (if the actor may manage it), else a new inactive one."""
    users = get_user_model().objects
    homes = TenantUser.objects.filter(tenant_id=tenant.pk).values("user_id")
    existing = users.filter(pk__in=homes, email__iexact=email).order_by("pk").first()
    if existing is not None:
        if existing.is_superuser or not access.visible_tenant_users(scope).filter(user_id=existing.pk).exists():
            raise NotAllowed("this person's account is managed by someone with more access than you", field="email")
        return existing, False
    username = _free_login(tenant, email)
    try:
        with transaction.atomic():
            user = users.create(username=username, email=email, password=make_password(None), is_active=False)
    except IntegrityError:  # taken between the look-up and the insert
        raise NotAllowed("could not choose a sign-in name for this address; try again", field="email") from None
    TenantUser.objects.create(user=user, tenant=tenant)
    return user, True


def _free_login(tenant: Tenant, email: str) -> str:
    """A sign-in name `<local part>@<tenant slug>` (tenants.services.login_name), numbered when taken."""
    base = re.sub(r"[^\w.+-]", "", email.split("@", 1)[0])[:60] or "user"
    users = get_user_model().objects
    for n in range(1, 100):
        name = services.login_name(tenant, base if n == 1 else f"{base}.{n}")
        if not users.filter(username=name).exists():
            return name
    raise NotAllowed("could not choose a sign-in name for this address", field="email")


# --- links ----------------------------------------------------------------------------------------------


def _account_state(user: User) -> str:
    value = f"{user.pk}|{user.password}|{user.is_active}|{getattr(user, 'email', '')}"
    return salted_hmac(SALT + ".state", value, algorithm="sha256").hexdigest()[:32]


def make_token(user: User) -> str:
    """The invitation link's token for `user` as the account is now."""
    return signing.dumps({"u": user.pk, "s": _account_state(user)}, salt=SALT)


def invited_user(token: str) -> User:
    """The user a still-valid invitation token names; LinkExpired, LinkUsed or LinkInvalid otherwise."""
    try:
        data = signing.loads(token, salt=SALT, max_age=int(product_settings.INVITE_LINK_MAX_AGE_SECONDS))
    except signing.SignatureExpired:
        raise LinkExpired("This invitation link has expired. Ask your administrator to invite you again.") from None
    except signing.BadSignature:
        raise LinkInvalid("This is not a valid invitation link. Check that you copied all of it.") from None
    user_id, state = (data.get("u"), data.get("s")) if isinstance(data, dict) else (None, None)
    user = get_user_model().objects.filter(pk=user_id).first() if isinstance(user_id, int) else None
    if user is None or not isinstance(state, str):
        raise LinkInvalid("This invitation is no longer valid. Ask your administrator to invite you again.")
    if not constant_time_compare(_account_state(user), state):
        raise LinkUsed("This invitation link has already been used, or a newer invitation replaced it. "
                       "Sign in, or use \"Forgot password?\" on the sign-in page.")
    return user


def accept(token: str, password: str) -> User:
    """Set `password` (Django's password validators) on the invited account and activate it; the user.
    Raises LinkInvalid (and its kinds) for a link that does not work, ValidationError for a weak password."""
    user = invited_user(token)
    password_validation.validate_password(password, user)
    previous = user.password
    user.set_password(password)
    if not save_password_from_link(user, previous_password=previous, activate_account=True):
        raise LinkUsed("This invitation is no longer valid (used, replaced or withdrawn). Ask your administrator.")
    user.is_active = True
    return user


def send_invitation(invitation: Invitation, *, accept_url: str, invited_by: str = "") -> None:
    """Email the invitation (Django's email backend: the console by default, SMTP with EMAIL_HOST).
    Errors of the backend (smtplib's, OSError) reach the caller: the invitation stays and can be resent."""
    days = max(1, round(int(product_settings.INVITE_LINK_MAX_AGE_SECONDS) / 86400))
    context = {"tenant": invitation.tenant.name, "username": invitation.user.get_username(), "accept_url": accept_url,
               "invited_by": invited_by, "role": invitation.membership.get_role_display(), "days": days}
    subject = f"You are invited to {invitation.tenant.name}'s knowledge base"
    send_mail(subject, render_to_string("onboarding/invitation_email.txt", context), None,
              [invitation.user.email])
