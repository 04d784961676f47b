"""Tenant administration: departments (read), API keys and members (admins only).

Thin: reads come from tenants.access, writes from tenants.services (which check every grant
against the caller, the same functions the admin site uses); access errors become 404 / 403 / 400
in api.errors.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api import serializers as s
from api.permissions import ASK, MANAGE
from api.views.base import ScopedAPIView
from tenants import services
from tenants.access import access_api_key, access_membership, visible_api_keys, visible_departments, visible_memberships
from tenants.scope import activate


class DepartmentList(ScopedAPIView):
    """The departments the caller sees (to narrow searches, scope keys and members)."""

    roles = ASK | MANAGE

    @extend_schema(responses=s.DepartmentSerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            return self.paginated(visible_departments(self.scope), s.DepartmentSerializer)


class ApiKeyList(ScopedAPIView):
    """List the keys the caller may manage (tenants.access.visible_api_keys; never their secrets); create one
    (the raw key is in this response only). A key never gets more than its creator has."""

    roles = MANAGE

    @extend_schema(responses=s.ApiKeySerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            return self.paginated(visible_api_keys(self.scope).prefetch_related("departments"), s.ApiKeySerializer)

    @extend_schema(request=s.ApiKeySerializer, responses={201: s.ApiKeyCreatedSerializer})
    def post(self, request: Request) -> Response:
        with activate(self.scope):
            data = self.valid_body(s.ApiKeySerializer, context={"scope": self.scope})
            key, raw = services.issue_key(self.scope, name=data["name"], role=data.get("role", "reader"),
                                          all_departments=data.get("all_departments", False), departments=data.get("departments"))
            out = s.ApiKeyCreatedSerializer(key).data
        out["key"] = raw
        response = Response(out, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response


class ApiKeyDetail(ScopedAPIView):
    """One key; DELETE revokes it (the row stays for the audit trail). The key making the request
    revokes itself only with `{"confirm_self_revoke": true}` (else 400 on that field)."""

    roles = MANAGE

    @extend_schema(responses=s.ApiKeySerializer)
    def get(self, request: Request, key_id: int) -> Response:
        return self.read_one(lambda scope: s.ApiKeySerializer(access_api_key(scope, key_id)).data)

    @extend_schema(request=s.ApiKeyRevokeSerializer, responses={204: None})
    def delete(self, request: Request, key_id: int) -> Response:
        confirm = self.valid_body(s.ApiKeyRevokeSerializer)["confirm_self_revoke"]
        actor = getattr(request.user, "api_key", None)  # the Principal of a key caller; None for a session user
        return self.delete_one(lambda scope: services.revoke_key(
            scope, access_api_key(scope, key_id), actor_key_id=actor.pk if actor is not None else None,
            confirm_self_revoke=confirm))


class MemberList(ScopedAPIView):
    """Members the caller may manage (tenants.access.visible_memberships). Admins add one by name: the
    tenant's own user of that name, or a new one (without a password); never another tenant's user."""

    roles = MANAGE

    @extend_schema(responses=s.MembershipSerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            qs = visible_memberships(self.scope).select_related("user", "tenant").prefetch_related("departments")
            return self.paginated(qs, s.MembershipSerializer)

    @extend_schema(request=s.MembershipSerializer, responses={201: s.MembershipSerializer})
    def post(self, request: Request) -> Response:
        with activate(self.scope):
            data = self.valid_body(s.MembershipSerializer, context={"scope": self.scope})
            grant = services.MemberGrant(role=data.get("role", "reader"), all_departments=data.get("all_departments", False),
                                         departments=data.get("departments", []))
            member = services.add_member(self.scope, username=data["user"]["username"], email=data["user"].get("email", ""),
                                         grant=grant)
            return Response(s.MembershipSerializer(member).data, status=status.HTTP_201_CREATED)


class MemberDetail(ScopedAPIView):
    """One membership: change role/departments, or remove it (the user account stays)."""

    roles = MANAGE

    @extend_schema(responses=s.MembershipSerializer)
    def get(self, request: Request, member_id: int) -> Response:
        return self.read_one(lambda scope: s.MembershipSerializer(access_membership(scope, member_id)).data)

    @extend_schema(request=s.MembershipSerializer, responses=s.MembershipSerializer)
    def patch(self, request: Request, member_id: int) -> Response:
        with activate(self.scope):
            member = access_membership(self.scope, member_id)
            data = self.valid_body(s.MembershipSerializer, member, partial=True, context={"scope": self.scope})
            member = services.change_member(self.scope, member, actor_user_id=_user_id(request), role=data.get("role"),
                                            all_departments=data.get("all_departments"), departments=data.get("departments"))
            return Response(s.MembershipSerializer(member).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, member_id: int) -> Response:
        return self.delete_one(lambda scope: services.remove_member(scope, access_membership(scope, member_id),
                                                                    actor_user_id=_user_id(request)))


def _user_id(request) -> int | None:
    """The signed-in user's id (session callers); None for API keys."""
    user = getattr(request.user, "user", None) or request.user
    return getattr(user, "id", None) if getattr(user, "is_authenticated", False) and not hasattr(user, "scope") else None
