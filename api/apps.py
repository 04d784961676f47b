from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"

    def ready(self) -> None:
        # Imported in ready(), as Django requires: the admin and these modules import models, which exist only once
        # apps are loaded.
        from django.contrib import admin

        from api import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from api.admin_login import LockoutAuthenticationForm

        admin.site.login_form = LockoutAuthenticationForm
