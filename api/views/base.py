"""The base of every tenant endpoint: authenticated, role-checked, rate-limited, scoped."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from api.auth import request_scope
from api.permissions import RolePermission
from api.ratelimit import PerKeyRateThrottle
from tenants.scope import Scope


class IdCursorPagination(CursorPagination):
    """Newest first; stable under inserts (the cursor is an id, not an offset)."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class ScopedAPIView(APIView):
    """`self.scope` is the caller's scope; handlers wrap data access in `activate(self.scope)`."""

    permission_classes = [IsAuthenticated, RolePermission]
    throttle_classes = [PerKeyRateThrottle]
    pagination_class = IdCursorPagination
    scope: Scope
    roles: frozenset[str] = frozenset()

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        self.scope = request_scope(request)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # Tenant data: never stored by shared caches or the browser's disk cache.
        if not response.has_header("Cache-Control") or "no-cache" in response["Cache-Control"]:
            response["Cache-Control"] = "private, no-store" if not response.streaming else "no-cache, no-store"
        return response

    def paginated(self, queryset: QuerySet, serializer_class, **context) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        data = serializer_class(page, many=True, context={"scope": self.scope, "request": self.request, **context}).data
        return paginator.get_paginated_response(data)
