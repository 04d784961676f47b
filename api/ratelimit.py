"""The REST API's per-caller rate limit as a DRF throttle, and the two things an edge reads from a
request for the limits: the client's address and the caller's identity.

The limits themselves live below the edge: tenants.limits (requests per caller per minute, failed
API-key attempts and sign-ins per address, failed sign-ins per account) over tenants.counters (the
counter storage and its one Redis-down fallback); the tenant's daily run budget is spent by
agents.services.ask itself (agents.budgets), and api.errors maps its refusals to 429 / 503.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest
from rest_framework import throttling
from rest_framework.request import Request

from tenants.limits import consume_request
from tenants.scope import Scope

if TYPE_CHECKING:  # rest_framework.views loads the authentication classes, which import this module
    from rest_framework.views import APIView


def client_address(request: HttpRequest) -> str:
    """The caller's IP as DRF's throttles see it: REMOTE_ADDR, or the X-Forwarded-For entry
    NUM_PROXIES trusted proxies back (the header is never trusted beyond them)."""
    # get_ident reads only request.META, which a Django HttpRequest has too (the admin's sign-in form); the stubs want a DRF Request.
    return throttling.BaseThrottle().get_ident(request) or "unknown"  # type: ignore[arg-type]


def caller_id(request: Request) -> str:
    """The identity a per-caller limit counts: the key's public id or the signed-in user."""
    user = request.user
    scope = getattr(user, "scope", None)  # an API key's principal (api.auth.Principal) carries its scope
    if isinstance(scope, Scope):
        return scope.principal
    return f"user:{getattr(user, 'pk', 'anon')}"


class PerKeyRateThrottle(throttling.BaseThrottle):
    """RATE_LIMIT_PER_MINUTE requests per caller per minute (tenants.limits.consume_request); 429 + Retry-After beyond."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return True
        decision = consume_request(caller_id(request))
        self._wait = decision.retry_after
        return decision.allowed

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)
