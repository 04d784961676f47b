"""What the agents app's read-only audit admins share: who may read them, a safe CSV cell, principals
named for people (lists and exports alike), and the read-only base (no add, change, delete or actions:
runs and feedback are append-only)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.access import AUDITORS
from agents.review import principal_names
from tenants.admin_base import TenantScopedAdmin, admin_scope


def csv_cell(value) -> str:
    """CSV cell safe to open in a spreadsheet (no formula injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def name_principals(request, rows: Iterable[Any]) -> None:
    """Set `principal_name` on each row (a run or a feedback: anything with `tenant_id` and `principal`):
    the principal with its key's name and user's username (agents.review.principal_names), or the
    principal itself when it names nobody found. A tenant's staff read their own tenant's names only."""
    rows = list(rows)
    scope = admin_scope(request)
    by_tenant: dict[int, set[str]] = {}
    for row in rows:
        by_tenant.setdefault(row.tenant_id, set()).add(row.principal)
    names: dict[tuple[int, str], str] = {}
    for tenant_id, principals in by_tenant.items():
        if scope is not None and tenant_id != scope.tenant_id:
            continue
        for principal, name in principal_names(tenant_id, principals, using="default" if scope else "owner").items():
            names[tenant_id, principal] = name
    for row in rows:
        row.principal_name = names.get((row.tenant_id, row.principal), row.principal)


class ReadOnlyAuditAdmin(TenantScopedAdmin):
    """Readable by auditors and admins of the tenant; nothing can be added, changed or deleted."""

    actions = None
    view_roles = AUDITORS
    edit_roles = frozenset()
    list_per_page = 50

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
