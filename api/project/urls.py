"""The project's URL map (ROOT_URLCONF): the HTTP edge owns it, so it lives in the top layer."""

from django.contrib import admin
from django.urls import include, path, re_path

from api import chat, errors, oidc, onboarding
from api import urls as api_urls
from api.mcp_http import McpEndpoint
from api.project.health import healthz

urlpatterns = [
    path("", chat.chat_page, name="chat"),
    path("login/", chat.login_view, name="login"),
    path("logout/", chat.logout_view, name="logout"),
    # Getting in: an invitation's link, and "Forgot password?" (api/onboarding.py).
    path("invite/<str:token>/", onboarding.accept_invite, name="accept_invite"),
    path("password-reset/", onboarding.ResetRequestView.as_view(), name="password_reset"),
    path("password-reset/sent/", onboarding.ResetDoneView.as_view(), name="password_reset_done"),
    path("password-reset/<uidb64>/<token>/", onboarding.ResetConfirmView.as_view(), name="password_reset_confirm"),
    # The admin's sign-in page links "Forgotten your password?" to the URL of this name when there is one.
    path("admin/password-reset/", onboarding.ResetRequestView.as_view(), name="admin_password_reset"),
    # Single sign-on through the company's identity provider (api/oidc.py): 404 unless OIDC_RP_CLIENT_ID is set.
    path("oidc/authenticate/", oidc.start, name="oidc_authentication_init"),
    path("oidc/callback/", oidc.callback, name="oidc_authentication_callback"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_urls)),
    path("mcp", McpEndpoint.as_view(), name="mcp"),  # MCP streamable HTTP (stateless, JSON), API keys only
    # Last: any other /api/ URL is the JSON 404, in DEBUG too (Django's debug 404 lists every pattern).
    re_path(r"^api/(?P<unmatched>.*)$", errors.api_not_found, name="api-not-found"),
]

# Outside the API, 404/500 pages are Django's; under /api/ they answer in the API's JSON error format.
handler404 = errors.handler404
handler500 = errors.handler500
