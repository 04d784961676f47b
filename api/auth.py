"""Authentication: API keys in the `Authorization: Bearer gk_...` or `X-API-Key` header, and session
users, who name their tenant with `X-Tenant: <slug>` when they belong to several.

The authenticated principal carries its Scope; views never build one from request data. Finding the
key's or user's tenant and reading their row under it is tenants.principals' job.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from api import ratelimit
from tenants import limits
from tenants.models import ApiKey
from tenants.principals import TenantChoiceRequired, authenticate_key, choose_tenant, user_scope
from tenants.scope import Scope

TENANT_HEADER = "X-Tenant"


@dataclass(frozen=True)
class Principal:
    """What request.user is for API-key callers (and wraps users with a membership)."""

    scope: Scope
    api_key: ApiKey | None = None
    user: object | None = None

    is_authenticated = True
    is_active = True

    @property
    def pk(self) -> str:
        return self.scope.principal


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    @classmethod
    def raw_key(cls, request: HttpRequest) -> str:
        """The key the request presents: `X-API-Key`, else `Authorization: Bearer <key>`; '' without one."""
        raw = request.headers.get("X-API-Key", "")
        header = request.headers.get("Authorization", "")
        if not raw and header.startswith(cls.keyword + " "):
            raw = header[len(cls.keyword) + 1:].strip()
        return raw

    def authenticate(self, request: Request) -> tuple[Principal, ApiKey] | None:
        raw = self.raw_key(request)
        if not raw:
            return None
        address = ratelimit.client_address(request)
        locked = limits.auth_failures_exceeded(address)
        if locked is not None:
            raise exceptions.Throttled(wait=locked.retry_after, detail="too many failed API-key attempts from this address")
        found = authenticate_key(raw)
        if found is None:
            limits.record_auth_failure(address)
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        key, scope = found
        return Principal(scope=scope, api_key=key), key

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


def scope_for_user(user: AbstractBaseUser | AnonymousUser, tenant_slug: str | None = None) -> Scope | None:
    """The scope of a logged-in user in the tenant they named (`tenant_slug`), or in their only one.

    None when they have no membership. A user of several tenants who names none, or names one that is
    not theirs (whether or not it exists), gets a 400 naming the X-Tenant header; never a default.
    """
    try:
        choice = choose_tenant(user, tenant_slug or None)
    except TenantChoiceRequired as exc:
        if not exc.choices:
            return None
        raise exceptions.ValidationError({TENANT_HEADER: [f"{exc}: send the {TENANT_HEADER} header with a tenant slug"]}) from None
    return user_scope(user, choice.tenant_id)


# Per request, dropped with the request (a typed cache instead of an attribute set on Request).
_SCOPES: weakref.WeakKeyDictionary[Request, Scope] = weakref.WeakKeyDictionary()


def request_scope(request: Request) -> Scope:
    """The caller's scope, from the authenticated principal only (worked out once per request)."""
    cached = _SCOPES.get(request)
    if cached is not None:
        return cached
    user = request.user
    scope = None
    if isinstance(user, Principal):
        scope = user.scope
    elif getattr(user, "is_authenticated", False):
        scope = scope_for_user(user, request.headers.get(TENANT_HEADER))
    if scope is None:
        raise exceptions.NotAuthenticated("no tenant membership for this caller")
    _SCOPES[request] = scope
    return scope
