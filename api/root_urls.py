"""The project's URL map (ROOT_URLCONF): the HTTP edge owns it, so it lives in the top layer."""

from django.contrib import admin
from django.urls import include, path

from api import errors
from api import urls as api_urls
from kb.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_urls)),
]

# API paths answer 404/500 in the API's JSON error format.
handler404 = errors.handler404
handler500 = errors.handler500
