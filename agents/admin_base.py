"""What the agents app's read-only audit admins share: who may read them, a safe CSV cell, and the
read-only base (no add, change, delete or actions: runs and feedback are append-only)."""

from __future__ import annotations

from agents.access import AUDITORS
from tenants.admin_base import TenantScopedAdmin


def csv_cell(value) -> str:
    """CSV cell safe to open in a spreadsheet (no formula injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


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
