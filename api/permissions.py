"""Role checks. The role comes from the caller's scope (key or membership), never from the request.

reader: search and ask. editor: + manage documents. admin: everything, incl. corpora, keys,
members and runs. auditor: read runs and chain status (and nothing else).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from rest_framework import permissions
from rest_framework.request import Request

from api.auth import request_scope

if TYPE_CHECKING:  # rest_framework.views loads the authentication classes, which import this module
    from rest_framework.views import APIView

ASK = frozenset({"reader", "editor", "admin"})
READ_KB = frozenset({"reader", "editor", "admin"})
EDIT_DOCUMENTS = frozenset({"editor", "admin"})
MANAGE = frozenset({"admin"})
AUDIT = frozenset({"auditor", "admin"})

_ROLE_ORDER = ("reader", "editor", "auditor", "admin")


def role_denied_message(role: str, allowed: Collection[str]) -> str:
    """The 403 message: which roles the request needs and which one the caller has (it starts with
    RolePermission.message, which clients and tests match on)."""
    needed = " or ".join(r for r in _ROLE_ORDER if r in allowed) or "a role no caller has"
    return f"{RolePermission.message}: it needs role {needed}; your role is {role}"


class RolePermission(permissions.BasePermission):
    """Views declare `roles` (all methods) or `read_roles` / `write_roles` (safe vs unsafe methods).

    A refusal is a 403 whose message names the roles that would be allowed and the caller's own.
    """

    message = "your role does not allow this"

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        role = request_scope(request).role
        allowed: Collection[str]
        if request.method in permissions.SAFE_METHODS:
            allowed = getattr(view, "read_roles", None) or getattr(view, "roles", None) or ()
        else:
            allowed = getattr(view, "write_roles", None) or getattr(view, "roles", None) or ()
        if role in allowed:
            return True
        # DRF instantiates permissions per request, so setting the message here is not shared state.
        self.message = role_denied_message(role, allowed)
        return False
