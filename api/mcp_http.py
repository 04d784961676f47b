"""`/mcp` inside the web application: the MCP server (api.mcp_server) over streamable HTTP, served by the
same gunicorn (WSGI) workers as the API, so no second server and no proxy rule are needed.

WSGI cannot hold a long-lived stream, so the transport runs stateless with JSON responses (the SDK's
`stateless_http=True, json_response=True`): every POST is one self-contained JSON-RPC exchange. The view
authenticates the key exactly as the API does (api.auth.ApiKeyAuthentication: the same 401, the same
failed-key lockout, the per-key rate limit), then hands the request to the SDK's session manager as an
ASGI call on an event loop of its own (asgiref's `async_to_sync`) and turns what it sends back into the
HTTP response. The tools run under the key this request authenticated, which they authenticate again on
each call, and do their database work in the request's own thread (`orm_in_request_thread`), on its
connection. Sessions (API keys only) are not accepted here.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from api.auth import ApiKeyAuthentication
from api.ratelimit import PerKeyRateThrottle, client_address

MCP_PATH = "/mcp"
# Headers of the SDK's answer not copied to the Django response (Django sets its own length).
_NOT_COPIED = frozenset({"content-length", "connection", "transfer-encoding"})


class McpEndpoint(APIView):
    """POST /mcp: one MCP JSON-RPC message (or batch) under the request's API key; 401 without a valid key."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [PerKeyRateThrottle]
    parser_classes: list = []  # the body goes to the SDK as sent
    schema = None  # not part of the REST API's OpenAPI schema

    # POST only. GET would open the SDK's server-to-client event stream, which never ends on its own: on
    # a WSGI worker it would hold a thread for good. Without sessions there is none to end by DELETE either.
    # Both are 405 (the transport's answer for "not offered"), after authentication like any request.

    def post(self, request: Request) -> HttpResponse:
        raw_key = ApiKeyAuthentication.raw_key(request)
        status, headers, body = async_to_sync(mcp_exchange)(raw_key, asgi_scope(request), request.body)
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name.lower() not in _NOT_COPIED:
                response[name] = value
        response["Cache-Control"] = "private, no-store"
        return response


def asgi_scope(request: HttpRequest) -> dict:
    """The ASGI scope of a Django request, aimed at the SDK's MCP_PATH. The host is Django's validated one
    (ALLOWED_HOSTS), so the SDK's own DNS-rebinding check is not needed on top; a request with no Accept
    header is given one that the SDK accepts (it answers JSON either way)."""
    host = request.get_host()
    name, _, port = host.rpartition(":") if host.rsplit(":", 1)[-1].isdigit() else (host, "", "")
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()]
    if "Accept" not in request.headers:  # no Accept header accepts anything (RFC 9110); the SDK wants it said
        headers.append((b"accept", b"application/json, text/event-stream"))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
        "scheme": request.scheme, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "client": (client_address(request), 0),
        "server": (name, int(port) if port else (443 if request.is_secure() else 80)),
    }


async def mcp_exchange(raw_key: str, scope: dict, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request through a fresh stateless MCP server for `raw_key`: (status, headers, body) of its answer.

    A server per request is what stateless mode means here: its session manager runs for this one
    request and is gone after it, with nothing left on any event loop between requests.
    """
    # The MCP SDK (~0.7 s to import) loads on the first /mcp request, not at start.
    from mcp.server.transport_security import TransportSecuritySettings

    from api.mcp_server import build_server

    server = build_server(raw_key, orm_in_request_thread=True)
    server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = server.session_manager
    answer: dict = {"status": 500, "headers": [], "body": []}
    body_sent = False
    finished = anyio.Event()

    async def receive() -> dict:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # the client "disconnects" only once the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            answer["body"].append(message.get("body", b""))
            if not message.get("more_body", False):
                finished.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    finished.set()
    return answer["status"], answer["headers"], b"".join(answer["body"])
