"""NUL bytes stop at the edge: a request whose path, query string or (outside /api/) url-encoded form
fields hold a NUL character is answered 400 naming the parameter, before any view sees it.

PostgreSQL text cannot hold NUL, so a NUL that reaches a query is a `DataError` (a 500): the admin's
list filters (`?outcome=%00`), its search box (`q`) and every other parameter that goes to the ORM
as typed. One check here covers them all, present and future. Bodies under /api/ (JSON, multipart)
are left to the API's serializers, which reject NUL per field (DRF's CharField does, and the
metadata validators), and multipart forms elsewhere (uploads) to their Django forms, which do too
(ProhibitNullCharactersValidator) and show it on the page: reading those here would parse uploads
before the view's own limits apply. Installed in MIDDLEWARE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, QueryDict

from api.errors import error_body

NUL = "\x00"
FORM_TYPE = "application/x-www-form-urlencoded"
API_PREFIXES = ("/api/", "/mcp")


def _printable(name: str) -> str:
    return name.replace(NUL, "\\x00")[:100]


def first_nul_parameter(params: QueryDict) -> str | None:
    """The name of the first parameter whose name or any value holds NUL, else None."""
    for name, values in params.lists():
        if NUL in name or any(NUL in v for v in values if isinstance(v, str)):
            return _printable(name)
    return None


def _form_parameters(request: HttpRequest) -> Iterable[QueryDict]:
    """The url-encoded form fields a view outside /api/ reads (the admin's, the chat sign-in's); none for other bodies."""
    if request.method != "POST" or request.path.startswith(API_PREFIXES):
        return ()
    if request.content_type != FORM_TYPE:
        return ()
    try:
        return (request.POST,)
    except (SuspiciousOperation, OSError):  # too many fields, too big, a broken upload: the view answers as before
        return ()


class RejectNulBytes:
    """Middleware: 400 for NUL in the path, a query parameter or a url-encoded form field (JSON under /api/)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = "path" if NUL in request.path else None
        if name is None:
            try:
                name = first_nul_parameter(request.GET)
            except SuspiciousOperation:  # too many fields: Django's own 400 follows where the view reads them
                name = None
        for form in () if name else _form_parameters(request):
            name = first_nul_parameter(form)
        if name is None:
            return self.get_response(request)
        message = f"{name}: must not contain NUL characters"
        if request.path.startswith(API_PREFIXES):
            return JsonResponse(error_body("invalid", message, {name: ["must not contain NUL characters"]}), status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
