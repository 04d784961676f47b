from django.contrib import admin
from django.urls import include, path

from kb.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("api.urls")),
]

# API paths answer 404/500 in the API's JSON error format.
handler404 = "api.errors.handler404"
handler500 = "api.errors.handler500"
