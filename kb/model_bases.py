"""Abstract models the knowledge base's tables share (each concrete model keeps its own table).

- `TenantRow`: a row owned by a tenant (deleted with it), read only through the tenant-scoped manager
  (`Model.objects.for_scope(scope)`; tenants.scope.TenantScopedManager).
- `BackgroundJob`: the lifecycle every background job row records, an ingest job
  (kb.models.IngestJob) as a source sync (kb.sources.models.SourceSync): its error and when it was
  queued, started, last beat and finished.

The fields were declared alike in each model before; declaring them here once changes no schema
(`manage.py makemigrations --check` finds nothing to do).
"""

from __future__ import annotations

from django.db import models

from tenants.models import Tenant
from tenants.scope import TenantScopedManager
from tenants.tenant_models import TenantModel


class TenantRow(TenantModel):
    """Abstract base of a tenant-owned row: its tenant (first field) and the tenant-scoped manager."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    objects = TenantScopedManager()

    class Meta:
        abstract = True


class BackgroundJob(TenantRow):
    """Abstract base of a job row; the concrete job adds its subject, status and counters."""

    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
