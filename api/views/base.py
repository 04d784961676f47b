"""The base of every tenant endpoint: authenticated, role-checked, rate-limited, scoped; bounded JSON
bodies and cursors checked before they reach a query."""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Callable
from datetime import datetime, time
from typing import Any

from django.conf import settings
from django.db import OperationalError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.utils import json
from rest_framework.views import APIView

from api.auth import request_scope
from api.permissions import RolePermission
from api.ratelimit import PerKeyRateThrottle
from api.serializers import ID_MAX, MAX_JSON_DEPTH
from kb.metadata import json_problem
from tenants.replicas import PRIMARY, note_write, read_alias, reading
from tenants.scope import NotVisible, Scope, activate

# A JSON body larger than this is refused unread (DRF reads JSON bodies past Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE). The largest legitimate body (1,000 document ids) is ~20 KB.
MAX_JSON_BODY_BYTES = 4 * 1024 * 1024


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with a size cap, a nesting cap (MAX_JSON_DEPTH) and no RecursionError:
    violations are a 400 `parse_error` on `body`."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read(MAX_JSON_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_JSON_BODY_BYTES:
            raise ParseError({"body": [f"larger than {MAX_JSON_BODY_BYTES} bytes"]})
        try:
            data = json.loads(codecs.decode(raw, encoding), parse_constant=json.strict_constant if self.strict else None)
        except RecursionError:
            raise ParseError({"body": [f"JSON nested deeper than {MAX_JSON_DEPTH} levels"]}) from None
        except ValueError as exc:
            raise ParseError({"body": [f"JSON parse error - {exc}"]}) from None
        if problem := json_problem(data, max_depth=MAX_JSON_DEPTH):
            raise ParseError({"body": [problem]})
        return data


def date_bound(raw: str | None, field: str, *, end: bool) -> datetime | None:
    """A since/until query parameter as an aware datetime: an ISO datetime (naive ones in the current
    time zone), or an ISO date meaning its first moment (its last with `end`, so an until date is
    inclusive). None when absent or empty; anything else is a 400 on `field`."""
    if not raw:
        return None
    try:
        value = parse_datetime(raw)
        if value is None:
            day = parse_date(raw)
            if day is None:
                raise ValueError(raw)
            value = timezone.make_aware(datetime.combine(day, time.max if end else time.min))
        elif value.tzinfo is None:
            value = timezone.make_aware(value)
    except (ValueError, OverflowError):  # well-formed but impossible, e.g. 2020-13-45
        raise ValidationError({field: ["expected an ISO date or datetime"]}) from None
    return value


class IdCursorPagination(CursorPagination):
    """Newest first; stable under inserts (the cursor is an id, not an offset). A cursor that does not
    decode to an id is a 400 on `cursor`."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def decode_cursor(self, request):
        invalid = ValidationError({self.cursor_query_param: ["invalid cursor: use the next or previous link of a page"]})
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise invalid from None
        # The position is the string from the query (the stubs say int): an id, checked before it reaches SQL.
        position = str(cursor.position) if cursor and cursor.position is not None else None
        if position is not None and not (re.fullmatch(r"\d{1,19}", position) and int(position) <= ID_MAX):
            raise invalid
        return cursor


class ScopedAPIView(APIView):
    """`self.scope` is the caller's scope; handlers wrap data access in `activate(self.scope)`."""

    permission_classes = [IsAuthenticated, RolePermission]
    throttle_classes = [PerKeyRateThrottle]
    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]
    pagination_class = IdCursorPagination
    scope: Scope
    roles: frozenset[str] = frozenset()
    # A successful POST, PUT, PATCH or DELETE pins the caller's next reads to what it wrote (tenants.replicas.
    # note_write). False: the view writes nothing (a search), or pins itself (a stored run: agents.services).
    pins_writes = True

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        self.scope = request_scope(request)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.pins_writes and request.method not in SAFE_METHODS and response.status_code < 400 and hasattr(self, "scope"):
            note_write(self.scope)  # the caller's next reads see what it just changed (tenants.replicas)
        # Tenant data: never stored by shared caches or the browser's disk cache.
        if not response.has_header("Cache-Control") or "no-cache" in response["Cache-Control"]:
            response["Cache-Control"] = "private, no-store" if not response.streaming else "no-cache, no-store"
        return response

    def paginated(self, queryset: QuerySet, serializer_class, **context) -> Response:
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        data = serializer_class(page, many=True, context={"scope": self.scope, "request": self.request, **context}).data
        return paginator.get_paginated_response(data)

    def valid_body(self, serializer_class: Callable[..., Serializer], *args: Any, **kwargs: Any) -> Any:
        """The request body validated by `serializer_class(*args, data=<the body>, **kwargs)`: its
        validated_data, or a 400 (ValidationError) naming the fields at fault."""
        ser = serializer_class(*args, data=self.request.data, **kwargs)
        ser.is_valid(raise_exception=True)
        return ser.validated_data

    def read_one(self, read: Callable[[Scope], Any], *, replica: bool = False) -> Response:
        """A GET of one row: 200 with `read(self.scope)` (the row's JSON; an access_* call in it raises
        NotVisible, a 404, for an id the caller may not see), computed inside the scope's activation.

        `replica`: read on the read replica where tenants.replicas allows it; a row the replica does
        not have (not replayed yet: a run id a stream just handed out) is read again on the primary,
        so lag never turns into a 404; nor does a replica that fails under the read turn into a 500."""
        if replica and (alias := read_alias(self.scope)) != PRIMARY:
            try:
                with reading(self.scope, alias=alias):
                    return Response(read(self.scope))
            except (NotVisible, OperationalError):
                pass  # perhaps not replayed yet, or the replica is gone: the primary decides
        with activate(self.scope):
            return Response(read(self.scope))

    def reading(self) -> contextlib.AbstractContextManager[str]:
        """A read-only block for the caller's scope on the read replica where tenants.replicas allows it
        (else the primary): ORM reads inside go there; yields the alias."""
        return reading(self.scope)

    def delete_one(self, remove: Callable[[Scope], object]) -> Response:
        """A DELETE of one row: `remove(self.scope)` inside the scope's activation, then 204."""
        with activate(self.scope):
            remove(self.scope)
        return Response(status=status.HTTP_204_NO_CONTENT)
