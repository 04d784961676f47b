"""Single sign-on through the company's OpenID Connect provider (mozilla-django-oidc), for existing accounts only.

- `enabled()`: single sign-on is on when OIDC_RP_CLIENT_ID is set (Django settings, read at each call).
- `setting(name, *default)`: a mozilla-django-oidc setting. Provider endpoints not given explicitly, and the issuer,
  come from OIDC_OP_DISCOVERY_URL, fetched at the first need and kept per URL (`ProviderUnavailable` if it cannot be
  read). Nothing is fetched while the feature is off, nor for password sign-ins.
- `button(next_url)`: what the sign-in pages show ("Sign in with <OIDC_PROVIDER_NAME>" and its link), None when off.
- `CompanySignInBackend` (AUTHENTICATION_BACKENDS when on) signs in exactly one existing account, and changes nothing:
  - the ID token: mozilla-django-oidc checks its signature with a key of the provider's JWKS and OIDC_RP_SIGN_ALGO only
    ("none", another algorithm or another key are refused), its nonce, and binds the code to the state and a PKCE
    verifier kept in this browser's session; here, in addition, its audience must name our client id, its issuer must
    be the discovered one, and the userinfo's `sub` must be the ID token's;
  - the email (userinfo, else the ID token) must be verified: `email_verified` true whenever the provider sends it;
  - the account is the one whose email equals it, case aside: none is refused (accounts come from invitations, never
    from a sign-in), several are refused as ambiguous, an inactive one (an invitation not accepted yet, or switched
    off) is refused with "accept the invitation first", and a superuser is refused (the operator signs in with a
    password: a company's provider never vouches for the whole installation);
  - no user, tenant, membership or role is ever created or changed, and no other claim is read: what the person may do
    comes from their memberships in our database, exactly as after a password sign-in.
  A refusal is shown on the sign-in page (django.contrib.messages) and logged on `grounded.security`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.conf import product_settings

security_log = logging.getLogger("grounded.security")

# Each endpoint setting and its key in a discovery document.
DISCOVERED = {"OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint", "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
              "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint", "OIDC_OP_JWKS_ENDPOINT": "jwks_uri", "OIDC_OP_ISSUER": "issuer"}
# mozilla-django-oidc's settings that are not ours to configure: PKCE and the nonce on, no account ever created,
# unsigned tokens refused, TLS verified, each call to the provider bounded.
FIXED: dict[str, Any] = {"OIDC_RP_SCOPES": "openid email", "OIDC_USE_PKCE": True, "OIDC_USE_NONCE": True,
                         "OIDC_CREATE_USER": False, "OIDC_ALLOW_UNSECURED_JWT": False, "OIDC_VERIFY_SSL": True,
                         "OIDC_TIMEOUT": 10, "OIDC_STORE_ACCESS_TOKEN": False, "OIDC_STORE_ID_TOKEN": False}
_documents: dict[str, dict[str, Any]] = {}
_documents_lock = threading.Lock()
GENERIC_REFUSAL = ("Single sign-on did not work: the identity provider's answer could not be verified. "
                   "Try again, or sign in with your password.")


class ProviderUnavailable(Exception):  # noqa: N818  (a refusal the page shows, not a fault of ours)
    """The discovery document cannot be read (unreachable, not JSON, an endpoint missing)."""


def enabled() -> bool:
    return bool(product_settings.OIDC_RP_CLIENT_ID)


def discovery_document(url: str) -> dict[str, Any]:
    """The provider's discovery document at `url`, fetched once per process (ProviderUnavailable on failure)."""
    with _documents_lock:
        if url in _documents:
            return _documents[url]
    try:
        response = requests.get(url, timeout=FIXED["OIDC_TIMEOUT"])
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"the identity provider's discovery document {url} cannot be read: {exc}") from None
    if not isinstance(document, dict) or any(not document.get(key) for key in DISCOVERED.values()):
        raise ProviderUnavailable(f"the discovery document {url} lacks an endpoint or the issuer")
    with _documents_lock:
        _documents[url] = document
    return document


def setting(name: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting: FIXED ones; the declared product settings (an empty provider endpoint, and the
    issuer, from the discovery document); mozilla-django-oidc's own default for any other name (never a Django setting:
    none may switch off a check; after a sign-in without `next`, LOGIN_REDIRECT_URL's default "/" is the chat)."""
    if name in FIXED:
        return FIXED[name]
    declared = name in dir(product_settings)
    if name in DISCOVERED:
        value = getattr(product_settings, name) if declared else ""
        if value:
            return value
        url = product_settings.OIDC_OP_DISCOVERY_URL
        if url:
            return discovery_document(url)[DISCOVERED[name]]
        if name == "OIDC_OP_ISSUER":
            return ""  # explicit endpoints without discovery: no issuer to compare
        raise ProviderUnavailable(f"{name} is not set and there is no OIDC_OP_DISCOVERY_URL")
    if declared:
        return getattr(product_settings, name)
    return default[0] if default else None


def button(next_url: str = "") -> dict[str, str] | None:
    """The single sign-on button of a sign-in page ({"name", "url"}), None when the feature is off."""
    if not enabled():
        return None
    url = reverse("oidc_authentication_init") + (f"?{urlencode({'next': next_url})}" if next_url else "")
    return {"name": product_settings.OIDC_PROVIDER_NAME or "single sign-on", "url": url}


def refuse(request: HttpRequest | None, message: str, detail: str) -> None:
    """Show `message` on the next page and log the refusal (`detail`: for the log only)."""
    security_log.warning("single sign-on refused: %s", detail, extra={"event": "sso_refused"})
    if request is not None:
        messages.error(request, message, fail_silently=True)


def is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


class CompanySignInBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, restricted to existing, active, unambiguous, non-superuser accounts (module
    docstring). Reads the provider's settings only when a sign-in through the provider happens."""

    def __init__(self) -> None:
        # Not the base class's: it would resolve the endpoints (discovery) for every authenticate() and every request.
        self.UserModel = get_user_model()

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return setting(attr, *args)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        """Only the callback's call (it passes the session's nonce and PKCE verifier), never a password form's."""
        if request is None or not enabled() or "nonce" not in kwargs or set(kwargs) - {"nonce", "code_verifier"}:
            return None
        try:
            self.OIDC_RP_CLIENT_ID = setting("OIDC_RP_CLIENT_ID")
            self.OIDC_RP_CLIENT_SECRET = setting("OIDC_RP_CLIENT_SECRET")
            self.OIDC_RP_SIGN_ALGO = setting("OIDC_RP_SIGN_ALGO", "RS256")
            self.OIDC_RP_IDP_SIGN_KEY = None
            self.OIDC_OP_TOKEN_ENDPOINT = setting("OIDC_OP_TOKEN_ENDPOINT")
            self.OIDC_OP_USER_ENDPOINT = setting("OIDC_OP_USER_ENDPOINT")
            self.OIDC_OP_JWKS_ENDPOINT = setting("OIDC_OP_JWKS_ENDPOINT")
            return super().authenticate(request, **kwargs)
        except ProviderUnavailable as exc:
            refuse(request, "Single sign-on is not available right now: the identity provider cannot be reached.", str(exc))
        except (SuspiciousOperation, jwt.PyJWTError, requests.RequestException, ValueError, KeyError, TypeError) as exc:
            refuse(request, GENERIC_REFUSAL, f"{type(exc).__name__}: {exc}")
        return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The base class's checks (signature, algorithm, nonce), then the audience and the issuer."""
        if not isinstance(token, str) or not token:
            raise SuspiciousOperation("no ID token in the provider's answer")
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation(f"the token's audience {audiences!r} does not name this client")
        issuer = setting("OIDC_OP_ISSUER")
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation(f"the token's issuer {payload.get('iss')!r} is not {issuer!r}")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User | None:
        """The one existing account the verified email names (module docstring); None, with a refusal, otherwise."""
        claims = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(claims, dict) or claims.get("sub") != payload.get("sub"):
            refuse(self.request, GENERIC_REFUSAL, "the userinfo's sub is not the ID token's")
            return None
        email = str(claims.get("email") or payload.get("email") or "").strip()
        verified = claims["email_verified"] if "email_verified" in claims else payload.get("email_verified")
        if not email:
            refuse(self.request, "Your identity provider did not tell us your email address, so no account can be chosen. "
                   "Ask your administrator.", "no email claim")
            return None
        if verified is not None and not is_true(verified):
            refuse(self.request, f"Your identity provider has not verified the email address {email}: single sign-on needs "
                   "a verified address.", f"email {email!r} not verified")
            return None
        users = list(self.UserModel._default_manager.filter(email__iexact=email).order_by("pk")[:2])
        if not users:
            refuse(self.request, f"No account here uses the email address {email}. Ask your administrator for an invitation.",
                   f"no account for {email!r}")
            return None
        if len(users) > 1:
            refuse(self.request, f"Several accounts here use the email address {email}, so single sign-on cannot choose one. "
                   "Sign in with your user name and password.", f"several accounts for {email!r}")
            return None
        user = users[0]
        if user.is_superuser:
            refuse(self.request, "This account signs in with its password only.", f"superuser {user.pk} refused")
            return None
        if not user.is_active:
            refuse(self.request, "Your account is not active yet: accept your invitation first (the link in its email), "
                   "or ask your administrator.", f"inactive account {user.pk}")
            return None
        security_log.info("single sign-on: user %s signed in by verified email", user.pk, extra={"event": "sso_sign_in"})
        return user

    def get_user(self, user_id: int) -> User | None:
        """As for a password sign-in: an account switched off since is signed out (the base class would keep it)."""
        return ModelBackend.get_user(self, user_id)
