"""One error format for every endpoint: {"error": {"code", "message", "fields"}}.

Under /api/ that holds for every status, whatever DEBUG says: DRF errors go through
`exception_handler`, an exception no handler knows becomes a bare 500 (logged with its traceback,
never shown), and an unknown URL is answered by `api_not_found` (a catch-all route, so Django's
debug 404 page, which lists every URL pattern, is never reached).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError, PermissionDenied, Throttled, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from agents.budgets import BudgetExceeded
from agents.services import RunNotRecorded
from tenants.counters import CounterUnavailable
from tenants.scope import NotAllowed, NotVisible

logger = logging.getLogger("django.request")


class RateLimitUnavailable(APIException):
    """A fail-closed limit could not be counted (tenants.counters.CounterUnavailable): 503 with Retry-After."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "rate-limit storage is unavailable, retry shortly"
    default_code = "rate_limit_unavailable"

    def __init__(self, detail=None, code=None, wait: int = 30):
        super().__init__(detail, code)
        self.wait = wait


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            # List items (DRF reports them as int keys) read files[0]; nested fields read filters.corpus_ids.
            name = f"{prefix}[{key}]" if isinstance(key, int) else (f"{prefix}.{key}" if prefix else str(key))
            out.update(_flatten(value, name))
        return out
    if isinstance(detail, list) and detail and not all(isinstance(d, str) for d in detail):
        out = {}
        for i, value in enumerate(detail):
            out.update(_flatten(value, f"{prefix}[{i}]"))
        return out
    items = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(d) for d in items]}


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    """The one error shape."""
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's handler in the one error format; the domain's access errors (tenants.scope) mapped:
    NotVisible -> 404, NotAllowed -> 400 on the field it names, else 403; a run that could not be
    stored (agents.services.RunNotRecorded) -> 503 `run_not_recorded`; the daily run budget used up
    (agents.budgets.BudgetExceeded) -> 429 `throttled` with Retry-After, its counter unavailable
    (tenants.counters.CounterUnavailable) -> 503 `rate_limit_unavailable` with Retry-After. Any other exception is a
    500 `server_error` with no detail: logged (with the traceback) and signalled like Django's own
    500s, but never rendered, so DEBUG cannot turn it into a page of settings and SQL."""
    if isinstance(exc, SuspiciousOperation):  # Django's request limits (fields, size) and the like: 400, as Django does
        logging.getLogger(f"django.security.{exc.__class__.__name__}").warning(str(exc))
        exc = ParseError({"body": [_suspicious_message(exc)]})
    elif isinstance(exc, RunNotRecorded):
        unavailable = Response(error_body("run_not_recorded", str(exc)), status=503)
        unavailable["Retry-After"] = "30"
        return unavailable
    elif isinstance(exc, BudgetExceeded):
        exc = Throttled(wait=exc.retry_after, detail=str(exc))
    elif isinstance(exc, CounterUnavailable):
        exc = RateLimitUnavailable(str(exc), wait=exc.retry_after)
    elif isinstance(exc, NotVisible):
        exc = NotFound(str(exc))
    elif isinstance(exc, NotAllowed):
        exc = ValidationError({exc.field: [str(exc)]}) if exc.field else PermissionDenied(str(exc))
    response = drf_exception_handler(exc, context)
    if response is None:
        return _server_error(exc, context)
    detail = response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        body = error_body(code, str(detail["detail"]))
    else:
        fields = _flatten(detail)
        first = next(iter(fields.items()), ("", [""]))
        body = error_body(code, f"{first[0]}: {first[1][0]}", fields)
    response.data = body
    return response


def _suspicious_message(exc: SuspiciousOperation) -> str:
    if isinstance(exc, TooManyFieldsSent):
        return f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields"
    if isinstance(exc, TooManyFilesSent):
        return "too many files"
    if isinstance(exc, RequestDataTooBig):
        return "request body too large"
    return "malformed request"


def _server_error(exc: BaseException, context) -> Response:
    request = getattr(context.get("request"), "_request", None)
    set_rollback()
    logger.error("Internal Server Error: %s", getattr(request, "path", "?"), exc_info=(type(exc), exc, exc.__traceback__),
                 extra={"status_code": 500, "request": request})
    # Error reporters (and Django's test client) listen for this, as for any unhandled exception.
    got_request_exception.send(sender=None, request=request)
    response = Response(error_body("server_error", "internal error"), status=500)
    # django.utils.log.log_response reads this flag (logged above, with the traceback); the stubs do not declare it.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def api_not_found(request: HttpRequest, unmatched: str = "") -> HttpResponse:
    """Every /api/ URL no route matches: the JSON 404 (in DEBUG too). A GET or HEAD missing only its
    trailing slash is redirected to the real endpoint, as Django's APPEND_SLASH would."""
    if not request.path.endswith("/") and request.method in ("GET", "HEAD"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(request.path + "/" + (f"?{query}" if query else ""))
    return JsonResponse(error_body("not_found", "no such endpoint"), status=404)


def _json_or_default(request, status: int, code: str, message: str, default):
    if request.path.startswith("/api/"):
        return JsonResponse(error_body(code, message), status=status)
    return default()


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Unknown URLs under /api/ answer in the API's error format (HTML elsewhere)."""
    return _json_or_default(request, 404, "not_found", "no such endpoint", lambda: defaults.page_not_found(request, exception))


def handler500(request: HttpRequest) -> HttpResponse:
    """Unhandled errors under /api/ answer in the API's error format, without details."""
    return _json_or_default(request, 500, "server_error", "internal error", lambda: defaults.server_error(request))
