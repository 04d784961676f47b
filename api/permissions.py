"""Role checks. The role comes from the caller's scope (key or membership), never from the request.

reader: search and ask. editor: + manage documents. admin: everything, incl. corpora, keys,
members and runs. auditor: read runs and chain status (and nothing else).
"""

from __future__ import annotations

from rest_framework import permissions

from api.auth import request_scope

ASK = frozenset({"reader", "editor", "admin"})
READ_KB = frozenset({"reader", "editor", "admin"})
EDIT_DOCUMENTS = frozenset({"editor", "admin"})
MANAGE = frozenset({"admin"})
AUDIT = frozenset({"auditor", "admin"})


class RolePermission(permissions.BasePermission):
    """Views declare `roles` (all methods) or `read_roles` / `write_roles` (safe vs unsafe methods)."""

    message = "your role does not allow this"

    def has_permission(self, request, view) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        role = request_scope(request).role
        if request.method in permissions.SAFE_METHODS:
            allowed = getattr(view, "read_roles", None) or getattr(view, "roles", ())
        else:
            allowed = getattr(view, "write_roles", None) or getattr(view, "roles", ())
        return role in allowed
