"""One error format for every endpoint: {"error": {"code", "message", "fields"}}."""

from __future__ import annotations

from rest_framework.views import exception_handler as drf_exception_handler


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


def exception_handler(exc, context):
    """DRF's handler in the one error format; the domain's access errors (tenants.scope) mapped:
    NotVisible -> 404, NotAllowed -> 400 on the field it names, else 403."""
    from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError

    from tenants.scope import NotAllowed, NotVisible

    if isinstance(exc, NotVisible):
        exc = NotFound(str(exc))
    elif isinstance(exc, NotAllowed):
        exc = ValidationError({exc.field: [str(exc)]}) if exc.field else PermissionDenied(str(exc))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        body = {"code": code, "message": str(detail["detail"]), "fields": {}}
    else:
        fields = _flatten(detail)
        first = next(iter(fields.items()), ("", [""]))
        body = {"code": code, "message": f"{first[0]}: {first[1][0]}", "fields": fields}
    response.data = {"error": body}
    return response


def _json_or_default(request, status: int, code: str, message: str, default):
    if request.path.startswith("/api/"):
        from django.http import JsonResponse

        return JsonResponse({"error": {"code": code, "message": message, "fields": {}}}, status=status)
    return default()


def handler404(request, exception=None):
    """Unknown URLs under /api/ answer in the API's error format (HTML elsewhere)."""
    from django.views import defaults

    return _json_or_default(request, 404, "not_found", "no such endpoint", lambda: defaults.page_not_found(request, exception))


def handler500(request):
    """Unhandled errors under /api/ answer in the API's error format, without details."""
    from django.views import defaults

    return _json_or_default(request, 500, "server_error", "internal error", lambda: defaults.server_error(request))
