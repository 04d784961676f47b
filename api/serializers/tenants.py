"""Departments, API keys and members. What a caller may grant is checked by tenants.access.check_grant in
the services the views call; ids in a body go through the scope."""

from __future__ import annotations

from django.contrib.auth.validators import UnicodeUsernameValidator
from rest_framework import serializers

from api.serializers.common import departments_or_400, id_field
from tenants.models import ApiKey, Department, Membership, Role
from tenants.services import display_name


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["id", "name"]


class ApiKeySerializer(serializers.ModelSerializer):
    departments = serializers.ListField(child=id_field(), required=False, write_only=True, max_length=1000)
    department_ids = serializers.SerializerMethodField()
    prefix = serializers.SerializerMethodField()
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "role", "all_departments", "departments", "department_ids", "active", "created_at",
                  "revoked_at", "last_used_at"]
        read_only_fields = ["id", "prefix", "active", "created_at", "revoked_at", "last_used_at"]

    def get_department_ids(self, obj) -> list[int]:
        return sorted(d.id for d in obj.departments.all())

    def get_prefix(self, obj) -> str:
        return f"gk_{obj.public_id}_"

    def validate_departments(self, ids: list[int]) -> list[Department]:
        return departments_or_400(self.context["scope"], ids)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The raw key. Shown once; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = ApiKeySerializer.Meta.fields + ["key"]


class ApiKeyRevokeSerializer(serializers.Serializer):
    """The optional body of DELETE /keys/{id}/: a key revoking itself must confirm it (tenants.services.revoke_key)."""

    confirm_self_revoke = serializers.BooleanField(
        default=False, help_text="Must be true when the key being revoked is the one making the request.")


class MembershipSerializer(serializers.ModelSerializer):
    """A member. `username` is the name in this tenant: adding one finds the tenant's own user of that
    name or creates one (signing in as `login`, `<username>@<tenant slug>`); users of other tenants are
    never found, and the answer is the same whether the name exists elsewhere or not."""

    username = serializers.CharField(source="user.username", max_length=150, validators=[UnicodeUsernameValidator()])
    login = serializers.SerializerMethodField(help_text="The name the member signs in with")
    email = serializers.EmailField(source="user.email", required=False, allow_blank=True)
    departments = serializers.ListField(child=id_field(), required=False, write_only=True, max_length=1000)
    department_ids = serializers.SerializerMethodField()

    class Meta:
        model = Membership
        fields = ["id", "username", "login", "email", "role", "all_departments", "departments", "department_ids"]
        read_only_fields = ["id"]

    def get_department_ids(self, obj) -> list[int]:
        return sorted(d.id for d in obj.departments.all())

    def get_login(self, obj) -> str:
        return obj.user.username

    def to_representation(self, obj):
        data = super().to_representation(obj)
        data["username"] = display_name(obj.user, obj.tenant.slug)
        return data

    def validate_role(self, value: str) -> str:
        if value not in Role.values:
            raise serializers.ValidationError("unknown role")
        return value

    def validate_departments(self, ids: list[int]) -> list[Department]:
        return departments_or_400(self.context["scope"], ids)

    def validate(self, attrs):
        if self.instance is not None and "user" in attrs:
            raise serializers.ValidationError({"username": "cannot be changed; remove and add the member instead"})
        return attrs
