"""MCP at /mcp inside the web application (api/mcp_http.py), through the SDK's own streamable HTTP client
against a live Django server: the tools, a scoped search, an ask that is a run of the chain marked as
coming through MCP, another tenant's key seeing nothing of this one, and 401 without a valid key."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.models import ApiKey
from tenants.scope import Scope, activate
from tests.api.test_mcp import (
    TOOLS,
    _error,
    a_chunk,
    check_other_tenant_session,
    check_own_tenant_session,
    use_every_tool,
)
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


@pytest.fixture
def mcp_url(world, live_server) -> str:
    return f"{live_server.url}/mcp"


async def _session(url: str, headers: dict, chunk_id: int) -> dict:
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        return await use_every_tool(client, chunk_id)


def test_tools_scoped_search_and_an_ask_in_the_chain_via_mcp(world, mcp_url):
    chunk = a_chunk(world)
    check_own_tenant_session(world, chunk, anyio.run(_session, mcp_url, {"Authorization": f"Bearer {world.keys['a-reader']}"},
                                                     chunk.id))
    # Another tenant's key, sent as X-API-Key.
    check_other_tenant_session(world, chunk, anyio.run(_session, mcp_url, {"X-API-Key": world.keys["b-reader"]}, chunk.id))


def test_no_key_a_bad_key_and_a_revoked_key_are_401_and_an_auditor_gets_tool_errors(world, mcp_url, fixed_lockout_window):
    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer gk_forged_key"}, {"X-API-Key": "gk_forged_key"}):
        r = httpx2.post(mcp_url, json=tools_list, headers={**accept, **headers})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", headers
        assert r.json()["error"]["code"] in {"not_authenticated", "authentication_failed"}

    raw = world.keys["a-editor"]
    ok = httpx2.post(mcp_url, json=tools_list, headers={**accept, "Authorization": f"Bearer {raw}"})
    assert ok.status_code == 200 and {t["name"] for t in ok.json()["result"]["tools"]} >= TOOLS
    assert ok.headers["Content-Type"].startswith("application/json") and ok.headers["Cache-Control"] == "private, no-store"
    # No Accept header at all (Django's test client sends none) accepts the JSON answer too.
    from rest_framework.test import APIClient

    plain = APIClient().post("/mcp", tools_list, format="json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert plain.status_code == 200 and plain.json()["result"]["tools"], plain.content
    # Stateless: no server-to-client stream to open (it would hold a web worker's thread) and no session to end.
    for method in ("GET", "DELETE"):
        refused = httpx2.request(method, mcp_url, headers={**accept, "Authorization": f"Bearer {raw}"}, timeout=10)
        assert refused.status_code == 405 and refused.headers["Allow"] == "POST, OPTIONS", method
    with activate(Scope.system(world.a.id)):
        ApiKey.objects.get(public_id=raw.split("_")[1]).revoke()
    assert httpx2.post(mcp_url, json=tools_list, headers={**accept, "Authorization": f"Bearer {raw}"}).status_code == 401

    async def auditor() -> str:
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.keys['a-auditor']}"}, timeout=60) as http,
                    Client(streamable_http_client(mcp_url, http_client=http)) as client):
            return _error(await client.call_tool("search", {"query": "hotel"}))

    assert "role does not allow" in anyio.run(auditor)
