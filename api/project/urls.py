"""The project's URL map (ROOT_URLCONF): the HTTP edge owns it, so it lives in the top layer."""

from django.contrib import admin
from django.urls import include, path, re_path

from api import chat, errors
from api import urls as api_urls
from api.mcp_http import McpEndpoint
from api.project.health import healthz

urlpatterns = [
    path("", chat.chat_page, name="chat"),
    path("login/", chat.login_view, name="login"),
    path("logout/", chat.logout_view, name="logout"),
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
