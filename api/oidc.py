"""The single sign-on pages: `/oidc/authenticate/` (to the provider) and `/oidc/callback/` (back from it).

mozilla-django-oidc's views, with these differences: both answer 404 while single sign-on is off (no
OIDC_RP_CLIENT_ID; tenants.oidc.enabled), the provider's endpoints come from tenants.oidc.setting (discovery), a
provider that cannot be reached or a sign-in begun in another browser sends the person back to the sign-in page
with a message instead of an error page, and a refused sign-in begun from the admin returns to the admin's
sign-in page. A callback whose state is not this session's is refused with 400 (mozilla-django-oidc's
SuspiciousOperation). After a sign-in: `next` (checked by mozilla-django-oidc against this host), else the chat.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from tenants import oidc

CHAT_LOGIN_URL = "/login/"
ADMIN_LOGIN_URL = "/admin/login/"


def back_to_sign_in(request: HttpRequest, message: str | None = None) -> HttpResponse:
    """The sign-in page the person came from (the admin's when `next` is under /admin/), with `message`."""
    if message:
        messages.error(request, message, fail_silently=True)
    next_url = request.session.get("oidc_login_next") or ""
    if next_url.startswith("/admin/"):
        return HttpResponseRedirect(f"{ADMIN_LOGIN_URL}?{urlencode({'next': next_url})}")
    return HttpResponseRedirect(CHAT_LOGIN_URL + (f"?{urlencode({'next': next_url})}" if next_url else ""))


class SignInStart(OIDCAuthenticationRequestView):
    """To the provider's authorization endpoint, with a fresh state, nonce and PKCE challenge in the session."""

    def __init__(self, **kwargs: Any) -> None:
        # Not the base class's: it reads the endpoints (discovery) before get() can answer 404 or a message.
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc.setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc.enabled():
            raise Http404("single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc.setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except oidc.ProviderUnavailable as exc:
            oidc.refuse(None, "", str(exc))
            return back_to_sign_in(request, "Single sign-on is not available right now: the identity provider cannot be reached.")
        self.OIDC_RP_CLIENT_ID = oidc.setting("OIDC_RP_CLIENT_ID")
        return super().get(request)


class SignInCallback(OIDCAuthenticationCallbackView):
    """The provider's redirect back: the code exchanged and checked by tenants.oidc.CompanySignInBackend."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc.setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc.enabled():
            raise Http404("single sign-on is not configured")
        if "code" in request.GET and "oidc_states" not in request.session:
            return back_to_sign_in(request, "This sign-in was started in another browser or has expired: start it again.")
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        if self.request.GET.get("error"):
            messages.error(self.request, "The identity provider did not sign you in "
                           f"({(self.request.GET.get('error_description') or self.request.GET['error'])[:200]}).", fail_silently=True)
        return back_to_sign_in(self.request)


start = SignInStart.as_view()
callback = SignInCallback.as_view()
