"""A user's own password, written where the database allows it.

As the application role, a user's password, username, email and active flag change only inside the
user's home tenant, and never a superuser's (the auth_user guard, tenants 0006). Two writes come from the
user itself before any tenant is activated: the password hash Django upgrades at sign-in (a new hasher,
more iterations) and a password changed on the admin site after giving the old one. Both go through
`save_own_password`: inside the home tenant when the user has one, else (a superuser, or an account an
operator made without a home) through the owner connection, logged on `grounded.accounts`.

`SignInBackend` is Django's username-and-password backend with that one difference (settings
AUTHENTICATION_BACKENDS); `django.contrib.auth`'s own would write the upgraded hash outside any tenant
and fail the sign-in.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import verify_password
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest

from tenants.models import TenantUser
from tenants.operator import OWNER
from tenants.principals import tenants_of_user
from tenants.scope import Scope, activate

log = logging.getLogger("grounded.accounts")


def home_tenant_id(user: AbstractBaseUser) -> int | None:
    """The tenant `user` belongs to (TenantUser), looked for among the tenants it is a member of; None
    without one (or when it is no longer a member of its home)."""
    for choice in tenants_of_user(user):
        with activate(Scope.system(choice.tenant_id, principal="authentication")):
            if TenantUser.objects.filter(user_id=user.pk, tenant_id=choice.tenant_id).exists():
                return choice.tenant_id
    return None


def save_own_password(user: AbstractBaseUser) -> None:
    """Store the password hash already set on `user` (`set_password`). Only for the user's own account,
    after it proved its current password (signing in, or the old password of a change form)."""
    users = get_user_model()._default_manager
    home = None if getattr(user, "is_superuser", False) else home_tenant_id(user)
    if home is not None:
        with activate(Scope.system(home, principal=f"user:{user.pk}")):
            users.filter(pk=user.pk).update(password=user.password)
        return
    with transaction.atomic(using=OWNER):
        users.db_manager(OWNER).filter(pk=user.pk).update(password=user.password)
    log.info("user %s (no home tenant, or a superuser): own password stored through the owner connection", user.pk)


def save_password_from_link(user: AbstractBaseUser, *, previous_password: str, activate_account: bool) -> bool:
    """Store the password hash already set on `user` for a user who proved it reads its email (an
    invitation or a password-reset link, tenants.invitations): inside its home tenant, as the application
    role, and only if the stored hash is still `previous_password` (the one the link was made for), so
    two uses of one link store one password. `activate_account`: also mark the account active (an
    invitation; a reset never re-activates an account an admin switched off). False when nothing was
    stored: a superuser, an account without a home tenant (its passwords are the operator's business,
    `manage.py changepassword`), or a link already used."""
    users = get_user_model()._default_manager
    home = None if getattr(user, "is_superuser", False) else home_tenant_id(user)
    if home is None:
        return False
    changes: dict[str, Any] = {"password": user.password}
    if activate_account:
        changes["is_active"] = True
    with activate(Scope.system(home, principal=f"user:{user.pk}")):
        stored = users.filter(pk=user.pk, password=previous_password, is_superuser=False).update(**changes)
    return stored == 1


class SignInBackend(ModelBackend):
    """Django's ModelBackend, except that a password hash due for an upgrade is stored by
    `save_own_password` (ModelBackend's would write it outside any tenant, which the database refuses)."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> User | None:
        user_model = get_user_model()
        if username is None:
            username = kwargs.get(user_model.USERNAME_FIELD)
        if username is None or password is None:
            return None
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            user_model().set_password(password)  # as long as a wrong password of a real name (Django #20760)
            return None
        correct, must_update = verify_password(password, user.password)
        if correct and must_update:
            user.set_password(password)
            save_own_password(user)
        return user if correct and self.user_can_authenticate(user) else None

    async def aauthenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                            **kwargs: Any) -> User | None:
        return await sync_to_async(self.authenticate)(request, username, password, **kwargs)
