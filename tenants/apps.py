from django.apps import AppConfig, apps
from django.db.models.signals import post_migrate

from tenants.conf import product


class TenantsConfig(AppConfig):
    name = "tenants"

    def ready(self) -> None:
        # Imported in ready(), as Django requires: these modules import models, which exist only once apps are loaded.
        from tenants import access  # noqa: F401  (registers the visibility rules of tenants' models)
        from tenants.rls import grant_app_role
        from tenants.tenant_models import install_batch_terms, install_join_terms

        post_migrate.connect(grant_app_role, dispatch_uid="tenants.grant_app_role")
        install_batch_terms()  # the deletion Collector's batch statements carry the acting tenant
        install_join_terms(apps.get_models())  # joins between tenant tables are on the tenant too
        # Every product setting the settings module defines is of its declared type, and none is undeclared.
        product.check()
