"""Shared pieces of the serializers: id bounds, JSON limits, the department checks (through
tenants.access, so a foreign id is "not found" on the field at fault) and JSON field types."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.access import access_department, departments_in_scope
from tenants.models import Department
from tenants.scope import NotAllowed, NotVisible, Scope

# PostgreSQL bigint: a larger id names no row, and must not reach a query (it would fail there).
ID_MAX = 2**63 - 1
# Nesting any JSON input may have (request bodies, upload metadata); deeper is refused before use.
MAX_JSON_DEPTH = 32
# Search filters: keys matched, and each key's string length and values.
MAX_FILTER_KEYS = 50
MAX_FILTER_KEY_CHARS = 200
MAX_FILTER_VALUE_CHARS = 1000


def id_field(**kwargs) -> serializers.IntegerField:
    """An id from outside: 1..ID_MAX, so an out-of-range number is a 400 on the field, not a database error."""
    return serializers.IntegerField(min_value=1, max_value=ID_MAX, **kwargs)


def department_or_400(scope: Scope, department_id: int | None) -> Department | None:
    """The department of that id the scope sees (None for None); else a ValidationError "department not found"."""
    if department_id is None:
        return None
    try:
        return access_department(scope, department_id)
    except NotVisible:
        raise serializers.ValidationError("department not found") from None


def departments_or_400(scope: Scope, ids: list[int]) -> list[Department]:
    """Those departments, each one the scope may grant; else a ValidationError naming the problem."""
    try:
        return departments_in_scope(scope, ids)
    except NotAllowed as exc:
        raise serializers.ValidationError(str(exc)) from None


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.JSONField):
    """A stored JSON object, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(serializers.JSONField):
    """A stored JSON list of strings, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "array", "items": {"type": "integer"}})
class IntegerListField(serializers.JSONField):
    """A stored JSON list of integers, typed as one in the OpenAPI schema."""


@extend_schema_field({"type": "object", "properties": {
    "tenant_id": {"type": "integer"}, "department_ids": {"type": "array", "items": {"type": "integer"}},
    "all_departments": {"type": "boolean"}, "role": {"type": "string"}, "principal": {"type": "string"}}})
class ScopeField(serializers.JSONField):
    """A run's scope (tenants.scope.Scope.as_dict())."""
