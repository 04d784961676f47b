"""The MCP server through the SDK's own client, over stdio (`manage.py mcp --key` as a subprocess) and
over streamable HTTP (a real server on loopback): the tools, a scoped search, an ask that is a run of
the chain marked as coming through MCP, another tenant's key seeing nothing of this one, and keys
checked on every call."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest
import uvicorn
from django.core.management import CommandError, call_command
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agents.chain import verify_tenant_chain
from agents.models import Run
from api.mcp_server import http_app
from kb.models import Chunk
from tenants.models import ApiKey
from tenants.scope import Scope, activate
from tests.api.conftest import CANARY
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.reliability.infra import free_port

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"ask", "list_corpora", "read", "search"}


def _data(result) -> object:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _error(result) -> str:
    assert result.is_error
    return result.content[0].text


def stdio(raw_key: str) -> Client:
    env = {**os.environ, "GROUNDED_EMBEDDER": "hash", "GROUNDED_PROVIDER": "offline"}
    return Client(StdioServerParameters(command=sys.executable, args=["manage.py", "mcp", "--key", raw_key], env=env, cwd=str(ROOT)),
                  read_timeout_seconds=120)


def a_chunk(world) -> Chunk:
    scope = Scope.system(world.a.id)
    with activate(scope):
        return Chunk.objects.for_scope(scope).filter(corpus=world.shared).first()


async def use_every_tool(client: Client, chunk_id: int) -> dict:
    """One session's calls of every tool, as the checks below read them."""
    return {
        "tools": {t.name for t in (await client.list_tools()).tools},
        "corpora": _data(await client.call_tool("list_corpora", {})),
        "search": _data(await client.call_tool("search", {"query": "hotel per night", "k": 5})),
        "read": await client.call_tool("read", {"chunk_id": chunk_id, "neighbours": 0}),
        "ask": _data(await client.call_tool("ask", {"question": "How much may employees spend on hotels per night?"})),
    }


def check_own_tenant_session(world, chunk: Chunk, mine: dict) -> None:
    """Tenant A's reader key: its corpora, a scoped search, the chunk by id, an ask recorded in A's chain as via mcp."""
    assert mine["tools"] >= TOOLS
    assert {c["name"] for c in mine["corpora"]} == {"shared", "sales-only", "eng-only"}
    assert "150 EUR" in mine["search"][0]["text"] and CANARY not in json.dumps(mine, default=str)
    assert _data(mine["read"])[0]["chunk_id"] == chunk.id
    answer = mine["ask"]
    assert answer["outcome"] == "answered" and "150 EUR" in answer["answer"] and answer["citations"]
    run = Run.objects.unscoped_dangerously("owner").get(pk=answer["run_id"], tenant_id=world.a.id)
    public_id = world.keys["a-reader"].split("_")[1]
    assert run.principal == f"key:{public_id} via mcp" and run.tenant_id == world.a.id
    assert verify_tenant_chain(world.a.id).ok


def check_other_tenant_session(world, chunk: Chunk, theirs: dict) -> None:
    """Tenant B's key: none of tenant A, not even A's chunk by id."""
    assert {c["name"] for c in theirs["corpora"]} == {f"globex {CANARY}"}
    assert all("150 EUR" not in r["text"] for r in theirs["search"])
    assert _error(theirs["read"]).endswith(f"chunk {chunk.id} not found")
    assert Run.objects.unscoped_dangerously("owner").filter(pk=theirs["ask"]["run_id"], tenant_id=world.b.id).exists()
    assert "150 EUR" not in theirs["ask"]["answer"]


def test_stdio_tools_scoped_search_and_an_ask_in_the_chain(world):
    async def session(raw: str, chunk_id: int) -> dict:
        async with stdio(raw) as client:
            return await use_every_tool(client, chunk_id)

    chunk = a_chunk(world)
    check_own_tenant_session(world, chunk, anyio.run(session, world.keys["a-reader"], chunk.id))
    check_other_tenant_session(world, chunk, anyio.run(session, world.keys["b-reader"], chunk.id))


def test_stdio_refuses_a_bad_key_and_a_key_revoked_mid_session(world):
    with pytest.raises(CommandError):
        call_command("mcp", key="gk_nope_nope")

    async def session(raw: str) -> tuple[object, str]:
        async with stdio(raw) as client:
            before = _data(await client.call_tool("list_corpora", {}))
            await anyio.to_thread.run_sync(revoke, raw)
            return before, _error(await client.call_tool("search", {"query": "hotel"}))

    def revoke(raw: str) -> None:
        with activate(Scope.system(world.a.id)):
            ApiKey.objects.get(public_id=raw.split("_")[1]).revoke()

    before, after = anyio.run(session, world.keys["a-editor"])
    assert before and after.endswith("invalid or revoked API key")


@pytest.fixture
def http_server(world):
    """The MCP HTTP app on a loopback port, served by uvicorn in a thread for the test."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(http_app(["127.0.0.1", "127.0.0.1:*"]), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(10)


def test_http_with_a_bearer_key(world, http_server, settings, fixed_lockout_window):
    async def session(raw: str) -> dict:
        out: dict = {}
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {raw}"}, timeout=120) as http,
                    Client(streamable_http_client(http_server, http_client=http)) as client):
            out["tools"] = {t.name for t in (await client.list_tools()).tools}
            out["search"] = _data(await client.call_tool("search", {"query": "hotel per night"}))
            out["ask"] = _data(await client.call_tool("ask", {"question": "How much may employees spend on hotels per night?"}))
        return out

    mine = anyio.run(session, world.keys["a-reader"])
    assert mine["tools"] >= TOOLS and "150 EUR" in mine["search"][0]["text"]
    run = Run.objects.unscoped_dangerously("owner").get(pk=mine["ask"]["run_id"], tenant_id=world.a.id)
    assert run.principal.endswith(" via mcp") and run.tenant_id == world.a.id and mine["ask"]["grounded"]
    assert verify_tenant_chain(world.a.id).ok

    theirs = anyio.run(session, world.keys["b-reader"])
    assert all("150 EUR" not in r["text"] for r in theirs["search"]) and "150 EUR" not in theirs["ask"]["answer"]

    async def unauthenticated(headers: dict) -> int:
        async with httpx2.AsyncClient(headers=headers) as http:
            r = await http.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            return r.status_code

    assert anyio.run(unauthenticated, {}) == 401
    assert anyio.run(unauthenticated, {"Authorization": "Bearer gk_forged_key"}) == 401
    # Failed keys count towards the address's lockout, as on the API: then even a valid key is refused.
    settings.AUTH_FAILURES_PER_IP = 2
    assert anyio.run(unauthenticated, {"Authorization": "Bearer gk_forged_again"}) == 401
    assert anyio.run(unauthenticated, {"Authorization": f"Bearer {world.keys['a-reader']}"}) == 429
