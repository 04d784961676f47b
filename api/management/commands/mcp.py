"""`manage.py mcp`: the MCP server (api.mcp_server) for desktop agents and other MCP clients.

    manage.py mcp --key gk_...                      stdio, every call under that key (or GROUNDED_MCP_KEY)
    manage.py mcp --http [--host H] [--port P]      streamable HTTP at http://H:P/mcp, a bearer key per request

The web application serves /mcp itself (api/mcp_http.py: stateless, JSON responses, under gunicorn);
`--http` runs the transport as a server of its own (uvicorn), for clients that need sessions or streams.
"""

from __future__ import annotations

from typing import Any

import anyio
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.mcp_server import build_server, http_app, key_scope
from tenants.conf import product_settings


class Command(BaseCommand):
    help = "Serve the MCP tools (search, ask, list_corpora, read) under an API key's scope, over stdio or HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key", default="", help="API key for stdio (default: the GROUNDED_MCP_KEY environment variable)")
        parser.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)

    def handle(self, *args: Any, key: str, http: bool, host: str, port: int, **options: Any) -> None:
        if http:
            hosts = [h for h in settings.ALLOWED_HOSTS if h != "*"]
            allowed = [*hosts, *(f"{h}:*" for h in hosts)] if "*" not in settings.ALLOWED_HOSTS else None
            uvicorn.run(http_app(allowed), host=host, port=port, log_level="warning", access_log=False)
            return
        raw = key or product_settings.GROUNDED_MCP_KEY
        if not raw:
            raise CommandError("give an API key: --key gk_... or GROUNDED_MCP_KEY")
        try:
            key_scope(raw)
        except Exception:
            raise CommandError("invalid or revoked API key") from None
        anyio.run(build_server(raw).run_stdio_async)
