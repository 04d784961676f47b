"""Authentication: API keys in the `Authorization: Bearer gk_...` or `X-API-Key` header.

The authenticated principal carries its Scope; views never build one from request data.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions

from api import ratelimit
from tenants.models import ApiKey, Membership
from tenants.scope import Scope


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

    def authenticate(self, request):
        raw = request.headers.get("X-API-Key", "")
        header = request.headers.get("Authorization", "")
        if not raw and header.startswith(self.keyword + " "):
            raw = header[len(self.keyword) + 1:].strip()
        if not raw:
            return None
        address = ratelimit.client_address(request)
        locked = ratelimit.auth_failures_exceeded(address)
        if locked is not None:
            raise exceptions.Throttled(wait=locked.retry_after, detail="too many failed API-key attempts from this address")
        key = ApiKey.authenticate(raw)
        if key is None:
            ratelimit.record_auth_failure(address)
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        return Principal(scope=key.scope(), api_key=key), key

    def authenticate_header(self, request) -> str:
        return self.keyword


def scope_for_user(user, tenant_slug: str | None = None) -> Scope | None:
    """The scope of a logged-in user: their membership (in `tenant_slug` if they have several)."""
    qs = Membership.objects.filter(user=user).select_related("tenant")
    if tenant_slug:
        qs = qs.filter(tenant__slug=tenant_slug)
    membership = qs.order_by("id").first()
    return membership.scope() if membership else None


def request_scope(request) -> Scope:
    """The caller's scope, from the authenticated principal only."""
    user = request.user
    if isinstance(user, Principal):
        return user.scope
    if getattr(user, "is_authenticated", False):
        scope = scope_for_user(user, request.headers.get("X-Tenant"))
        if scope is not None:
            return scope
    raise exceptions.NotAuthenticated("no tenant membership for this caller")
