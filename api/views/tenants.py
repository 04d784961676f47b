"""Tenant administration: departments (read), API keys and members (admins only)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from api import serializers as s
from api.access import access_api_key, access_membership, visible_api_keys, visible_memberships
from api.permissions import ASK, MANAGE
from api.views.base import ScopedAPIView
from tenants.models import ApiKey, Department, Membership


class DepartmentList(ScopedAPIView):
    """The departments the caller sees (to narrow searches, scope keys and members)."""

    roles = ASK | MANAGE

    @extend_schema(responses=s.DepartmentSerializer(many=True))
    def get(self, request):
        qs = Department.objects.filter(tenant_id=self.scope.tenant_id)
        if not self.scope.all_departments:
            qs = qs.filter(id__in=self.scope.department_ids)
        return self.paginated(qs, s.DepartmentSerializer)


class ApiKeyList(ScopedAPIView):
    """List the keys the caller may manage (api.access.visible_api_keys; never their secrets); create one
    (the raw key is in this response only)."""

    roles = MANAGE

    @extend_schema(responses=s.ApiKeySerializer(many=True))
    def get(self, request):
        qs = visible_api_keys(self.scope).prefetch_related("departments")
        return self.paginated(qs, s.ApiKeySerializer)

    @extend_schema(request=s.ApiKeySerializer, responses={201: s.ApiKeyCreatedSerializer})
    def post(self, request):
        ser = s.ApiKeySerializer(data=request.data, context={"scope": self.scope})
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        with transaction.atomic():
            key, raw = ApiKey.issue(tenant=self.scope_tenant(), name=data["name"], role=data.get("role", "reader"),
                                    all_departments=data.get("all_departments", False), departments=data.get("departments"))
        out = s.ApiKeyCreatedSerializer(key).data
        out["key"] = raw
        response = Response(out, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    def scope_tenant(self):
        from tenants.models import Tenant

        return Tenant.objects.get(pk=self.scope.tenant_id)


class ApiKeyDetail(ScopedAPIView):
    """One key; DELETE revokes it (the row stays for the audit trail)."""

    roles = MANAGE

    @extend_schema(responses=s.ApiKeySerializer)
    def get(self, request, key_id: int):
        return Response(s.ApiKeySerializer(access_api_key(self.scope, key_id)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, key_id: int):
        key = access_api_key(self.scope, key_id)
        if key.is_active:
            key.revoke()
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberList(ScopedAPIView):
    """Members the caller may manage (api.access.visible_memberships); admins add one by username (the user is
    created, without a password, if new)."""

    roles = MANAGE

    @extend_schema(responses=s.MembershipSerializer(many=True))
    def get(self, request):
        qs = visible_memberships(self.scope).select_related("user").prefetch_related("departments")
        return self.paginated(qs, s.MembershipSerializer)

    @extend_schema(request=s.MembershipSerializer, responses={201: s.MembershipSerializer})
    def post(self, request):
        ser = s.MembershipSerializer(data=request.data, context={"scope": self.scope})
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        user_data = data["user"]
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(
                username=user_data["username"], defaults={"email": user_data.get("email", "")})
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            if Membership.objects.filter(tenant_id=self.scope.tenant_id, user=user).exists():
                raise ValidationError({"username": ["already a member"]})
            member = Membership.objects.create(tenant_id=self.scope.tenant_id, user=user, role=data.get("role", "reader"),
                                               all_departments=data.get("all_departments", False))
            member.departments.set(data.get("departments", []))
        return Response(s.MembershipSerializer(member).data, status=status.HTTP_201_CREATED)


class MemberDetail(ScopedAPIView):
    """One membership: change role/departments, or remove it (the user account stays)."""

    roles = MANAGE

    @extend_schema(responses=s.MembershipSerializer)
    def get(self, request, member_id: int):
        return Response(s.MembershipSerializer(access_membership(self.scope, member_id)).data)

    @extend_schema(request=s.MembershipSerializer, responses=s.MembershipSerializer)
    def patch(self, request, member_id: int):
        member = access_membership(self.scope, member_id)
        ser = s.MembershipSerializer(member, data=request.data, partial=True, context={"scope": self.scope})
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        if member.user_id == getattr(request.user, "id", None) and data.get("role", member.role) != "admin":
            raise ValidationError({"role": ["you cannot remove your own admin role"]})
        with transaction.atomic():
            for field in ("role", "all_departments"):
                if field in data:
                    setattr(member, field, data[field])
            member.save()
            if "departments" in data:
                member.departments.set(data["departments"])
        return Response(s.MembershipSerializer(member).data)

    @extend_schema(responses={204: None})
    def delete(self, request, member_id: int):
        member = access_membership(self.scope, member_id)
        if member.user_id == getattr(request.user, "id", None):
            raise ValidationError({"id": ["you cannot remove yourself"]})
        member.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
