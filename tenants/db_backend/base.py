"""Django's PostgreSQL backend, for tables whose database key is (tenant_id, id) while Django's is `id`.

Tenant-owned tables are keyed by (tenant_id, id) in the database (tenants.tenant_keys) and by `id` in Django.
Django's PostgreSQL backend groups an aggregate query by a model's primary key alone, relying on every other
column depending on it; PostgreSQL accepts that only for the table's real primary key, so for a model with a
`tenant` column Django groups by every selected column instead. Other models (tenants, users) keep the
shorter GROUP BY. The embedded server's ENGINE (kb.embedded.django_backend) builds on this one.
"""

from __future__ import annotations

from django.db import models
from django.db.backends.postgresql import base, features


def keyed_by_tenant(model: type[models.Model]) -> bool:
    """The model's table is keyed by (tenant_id, <its pk>) in the database: it has a concrete `tenant_id` column."""
    return any(field.column == "tenant_id" for field in model._meta.concrete_fields)


class DatabaseFeatures(features.DatabaseFeatures):
    def allows_group_by_selected_pks_on_model(self, model: type[models.Model]) -> bool:
        return super().allows_group_by_selected_pks_on_model(model) and not keyed_by_tenant(model)


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
