"""A `tenant_id` term on the queries Django makes by itself for tenant-owned models (issue 50: a
distributed database routes a statement to one shard only when it filters the distribution column).
django-multitenant's pattern: the tenant comes from the instance at hand, else from the tenant the
code acts for (`tenants.scope.acting_tenant`, set by `activate`).

- `TenantModel`, the abstract base of every model with a `tenant` field, makes `TenantAwareManager`
  its base manager (Django's own reads: foreign-key descriptors, refresh_from_db, the deletion
  Collector's related look-ups), filters save()'s `UPDATE ... WHERE id = %s` by the instance's
  tenant, and runs delete() acting for the instance's tenant.
- `install_batch_terms()` (tenants.apps.ready) adds the acting tenant to the Collector's
  `DELETE ... WHERE id IN (...)` and `UPDATE ... WHERE id IN (...)` batches, as django-multitenant does.

Only a term is added: which rows a caller may read is still the scoped manager's and RLS's business
(`Model.objects` of tenant-scoped models keeps refusing reads without a scope). Outside any tenant
(maintenance code), nothing is added; the test-time checker then requires `across_tenants(reason)`.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from django.db import models
from django.db.models.expressions import Col
from django.db.models.lookups import Exact
from django.db.models.sql.constants import GET_ITERATOR_CHUNK_SIZE, NO_RESULTS
from django.db.models.sql.subqueries import DeleteQuery, UpdateQuery

from tenants.scope import acting_for, acting_tenant

BASE_MANAGER = "tenant_base"


@functools.cache
def is_tenant_model(model: type[models.Model]) -> bool:
    """Whether `model`'s table is a tenant table: it has a concrete `tenant` field."""
    return any(field.name == "tenant" for field in model._meta.concrete_fields)


def instance_tenant(instance: object) -> int | None:
    """The tenant of a model instance: its tenant_id, or its own id for a Tenant; None for others."""
    if instance is None:
        return None
    tenant_id = getattr(instance, "tenant_id", None)
    if tenant_id is None and type(instance).__name__ == "Tenant" and type(instance).__module__ == "tenants.models":
        tenant_id = getattr(instance, "pk", None)
    return int(tenant_id) if tenant_id else None


class TenantAwareManager(models.Manager):
    """Adds `tenant_id = <tenant>` to every queryset: the tenant of the instance the query is made for
    (the `instance` hint of a foreign-key descriptor or refresh_from_db), else the acting tenant;
    nothing outside both."""

    def get_queryset(self) -> models.QuerySet:
        queryset = super().get_queryset()
        # Not a related manager's own `instance`: prefetch_related runs it for the instances of every
        # tenant at once. A descriptor's or refresh_from_db's `instance` hint is the one row at hand.
        tenant_id = instance_tenant(getattr(self, "_hints", {}).get("instance")) or acting_tenant()
        return queryset.filter(tenant_id=tenant_id) if tenant_id else queryset


class TenantModel(models.Model):
    """Abstract base of the models that have a `tenant` field (each declares it and its own `objects`)."""

    tenant_base = TenantAwareManager()

    class Meta:
        abstract = True
        base_manager_name = BASE_MANAGER

    def _do_update(self, base_qs: Any, *args: Any, **kwargs: Any) -> Any:
        """save()'s `UPDATE ... WHERE id = %s`, also by the instance's tenant."""
        tenant_id = getattr(self, "tenant_id", None)
        if tenant_id:
            base_qs = base_qs.filter(tenant_id=tenant_id)
        return super()._do_update(base_qs, *args, **kwargs)

    def delete(self, using=None, keep_parents=False):
        with acting_for(getattr(self, "tenant_id", None) or acting_tenant()):
            return super().delete(using=using, keep_parents=keep_parents)


def _delete_batch(self: DeleteQuery, pk_list, using):
    """DeleteQuery.delete_batch with the acting tenant's term on a tenant table (Django 5.2's body)."""
    tenant_id = acting_tenant()
    if not tenant_id or not is_tenant_model(self.model):
        return _ORIGINAL["delete_batch"](self, pk_list, using)
    num_deleted = 0
    field = self.get_meta().pk
    for offset in range(0, len(pk_list), GET_ITERATOR_CHUNK_SIZE):
        self.clear_where()
        self.add_q(models.Q(**{f"{field.attname}__in": pk_list[offset: offset + GET_ITERATOR_CHUNK_SIZE],
                               "tenant_id": tenant_id}))
        num_deleted += self.do_query(self.get_meta().db_table, self.where, using=using)
    return num_deleted


def _update_batch(self: UpdateQuery, pk_list, values, using):
    """UpdateQuery.update_batch (the Collector's SET NULL) with the acting tenant's term on a tenant table."""
    tenant_id = acting_tenant()
    if not tenant_id or not is_tenant_model(self.model):
        return _ORIGINAL["update_batch"](self, pk_list, values, using)
    self.add_update_values(values)
    for offset in range(0, len(pk_list), GET_ITERATOR_CHUNK_SIZE):
        self.clear_where()
        self.add_q(models.Q(pk__in=pk_list[offset: offset + GET_ITERATOR_CHUNK_SIZE], tenant_id=tenant_id))
        self.get_compiler(using).execute_sql(NO_RESULTS)
    return None


def _join_on_tenant(field: models.ForeignKey):
    """`get_extra_restriction` for a foreign key between two tenant models: every JOIN through it (either
    direction: select_related, filters across it, reverse relations) also says `target.tenant_id =
    source.tenant_id` (django-multitenant's TenantForeignKey does the same)."""
    source_tenant = cast(models.Field, field.model._meta.get_field("tenant"))
    target_tenant = cast(models.Field, field.related_model._meta.get_field("tenant"))

    def get_extra_restriction(alias, related_alias):
        if alias is None or related_alias is None:  # Query.trim_start's pushdown: no join to add to
            return None
        return Exact(Col(alias, target_tenant), Col(related_alias, source_tenant))

    return get_extra_restriction


def install_join_terms(all_models) -> None:
    """Join every foreign key from a tenant model to another on the tenant too. Set on the field objects,
    not by a field class: nothing changes in the schema or the migrations' state."""
    for model in all_models:
        if not is_tenant_model(model):
            continue
        for field in model._meta.local_fields:
            if isinstance(field, models.ForeignKey) and field.name != "tenant" and is_tenant_model(field.related_model):
                field.get_extra_restriction = _join_on_tenant(field)  # type: ignore[method-assign]


_ORIGINAL: dict = {}


def install_batch_terms() -> None:
    """Give the deletion Collector's batch statements their tenant term (idempotent)."""
    if _ORIGINAL:
        return
    _ORIGINAL["delete_batch"] = DeleteQuery.delete_batch
    _ORIGINAL["update_batch"] = UpdateQuery.update_batch
    DeleteQuery.delete_batch = _delete_batch  # type: ignore[method-assign]
    UpdateQuery.update_batch = _update_batch  # type: ignore[method-assign]
