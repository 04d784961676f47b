"""`manage.py mcp --http` (api.mcp_server.http_app, served by uvicorn on loopback) under the REST API's own
limits (issue 47, finding 7): a key's requests per minute (429 + Retry-After past RATE_LIMIT_PER_MINUTE,
one window shared with the REST API) and the tenant's daily agent-run budget for `ask`, counted in Redis
and in the Django cache."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import anyio
import httpx2
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.api.test_mcp import http_server  # noqa: F401  (the MCP HTTP app on a loopback port)
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "limits", "version": "1"}}}
QUESTION = "How much may employees spend on hotels per night?"


def _posts(url: str, raw_key: str, n: int) -> list[httpx2.Response]:
    async def go() -> list[httpx2.Response]:
        headers = {"Authorization": f"Bearer {raw_key}", "Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            return [await http.post(url, json=INITIALIZE) for _ in range(n)]

    return anyio.run(go)


def test_a_key_past_its_requests_per_minute_gets_429_with_retry_after(world, http_server, backend, settings,  # noqa: F811
                                                                      fixed_lockout_window):
    settings.RATE_LIMIT_PER_MINUTE = 5
    responses = _posts(http_server, world.keys["a-reader"], 7)
    assert [r.status_code for r in responses] == [200] * 5 + [429] * 2
    refused = responses[-1]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "throttled"
    # One window for the key on every edge: the REST API refuses it too; another key is served.
    api = world.client("a-reader").get("/api/v1/corpora/")
    assert api.status_code == 429 and api.json()["error"]["code"] == "throttled"
    assert [r.status_code for r in _posts(http_server, world.keys["a-editor"], 1)] == [200]


def test_ask_past_the_daily_run_budget_is_refused(world, http_server, backend, settings, fixed_lockout_window):  # noqa: F811
    settings.RATE_LIMIT_PER_MINUTE = 1_000
    settings.DEFAULT_DAILY_RUNS = 1
    if backend == "redis":  # tenant ids repeat between runs of the suite: today's counter starts empty
        redis.Redis.from_url(settings.RATE_LIMIT_REDIS_URL).delete(f"runs:{world.a.id}:{datetime.now(UTC):%Y%m%d}")

    async def asks() -> list:
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.keys['a-reader']}"}, timeout=120) as http,
                    Client(streamable_http_client(http_server, http_client=http)) as client):
            return [await client.call_tool("ask", {"question": QUESTION}) for _ in range(2)]

    first, second = anyio.run(asks)
    assert not first.is_error and json.loads(first.content[0].text)["outcome"] == "answered"
    assert second.is_error and "daily agent-run budget is used up; retry in" in second.content[0].text
    # The same budget as the REST ask's.
    rest = world.client("a-reader").post("/api/v1/ask/", {"question": QUESTION}, format="json")
    assert rest.status_code == 429 and "daily agent-run budget" in rest.json()["error"]["message"]
