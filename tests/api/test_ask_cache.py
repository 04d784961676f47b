"""The answer cache at the edges: the REST ask (JSON and SSE) and the MCP ask tool reuse an identical
question's answer, a request can turn it off, a real re-ingest misses, and a bad switch is a 400."""

from __future__ import annotations

import json

import pytest

from api.mcp_server import ask_for
from api.views import agents as agent_views
from tenants.conf import product_settings
from tenants.scope import Scope, activate
from tests.api.conftest import ingest
from tests.api.test_admin import staff
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

QUESTION = "What is the hotel limit per night?"


@pytest.fixture
def cached_world(world):
    if not product_settings.ANSWER_CACHE_REDIS_URL:
        pytest.skip("no Redis configured (REDIS_URL / ANSWER_CACHE_REDIS_URL)")
    world.a.settings = {"answer_cache_ttl_seconds": 600}
    with activate(whole_tenant(world.a)):
        world.a.save(update_fields=["settings"])
    return world


def _ask(world, **body):
    r = world.client("a-reader").post("/api/v1/ask/", {"question": QUESTION, "strategy": "classic", **body}, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def test_rest_ask_reuses_the_answer_unless_the_request_says_no(cached_world):
    first = _ask(cached_world)
    assert first["outcome"] == "answered" and first["cached_from_run_id"] is None
    again = _ask(cached_world, question=QUESTION.upper())
    assert again["cached_from_run_id"] == first["id"] and again["cached_from_hash"] == first["hash"]
    assert again["answer"] == first["answer"] and [c["chunk_id"] for c in again["citations"]] == [
        c["chunk_id"] for c in first["citations"]]
    assert [s["name"] for s in again["steps"]] == ["answer_cache"]
    assert _ask(cached_world, cache=False)["cached_from_run_id"] is None
    ingest(cached_world.shared, "Travel policy", "Employees may book hotels up to 170 EUR per night.")  # re-ingested
    fresh = _ask(cached_world)
    assert fresh["cached_from_run_id"] is None and "170" in fresh["answer"]
    assert cached_world.client("a-auditor").get("/api/v1/runs/verify/").json()["ok"] is True


def test_stream_serves_a_hit_as_one_step_then_the_answer(cached_world, monkeypatch):
    monkeypatch.setattr(agent_views, "start_background", lambda target: target())
    first = _ask(cached_world)
    r = cached_world.client("a-reader").post("/api/v1/ask/stream/", {"question": QUESTION, "strategy": "classic"}, format="json")
    events = [(e.split("\n")[0][len("event: "):], json.loads(e.split("\n")[1][len("data: "):]))
              for e in b"".join(r.streaming_content).decode().strip().split("\n\n") if e.startswith("event:")]
    assert [(name, data.get("name")) for name, data in events if name in ("step", "text")][:2] == [("step", "answer_cache"),
                                                                                                 ("text", None)]
    assert sum(name == "step" for name, _ in events) == 1
    assert dict(events)["answer"]["answer"] == first["answer"]


def test_cache_switch_must_be_a_boolean(cached_world):
    r = cached_world.client("a-reader").post("/api/v1/ask/", {"question": QUESTION, "cache": "maybe"}, format="json")
    assert r.status_code == 400 and "cache" in r.json()["error"]["fields"]


def test_mcp_ask_reuses_the_answer_unless_told_not_to(cached_world):
    scope = Scope(tenant_id=cached_world.a.id, all_departments=True, role="reader", principal="key:mcp-test")
    first = ask_for(scope, QUESTION, "classic")
    assert first["outcome"] == "answered" and first["cached_from_run_id"] is None
    assert ask_for(scope, QUESTION, "classic")["cached_from_run_id"] == first["run_id"]
    assert ask_for(scope, QUESTION, "classic", cache=False)["cached_from_run_id"] is None


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_admin_run_review_shows_hits_their_rate_and_latencies(cached_world, client):
    first = _ask(cached_world)
    hits = [_ask(cached_world) for _ in range(2)]
    assert [h["cached_from_run_id"] for h in hits] == [first["id"]] * 2
    client.force_login(staff(cached_world, "auditor"))
    listing = " ".join(client.get("/admin/agents/run/").content.decode().split())
    assert "Answer cache: 2 of 3 runs served from the cache (67%); median latency" in listing, listing[:3000]
    assert f'/admin/agents/run/{first["id"]}/change/' in listing
    served = " ".join(client.get("/admin/agents/run/", {"cached": "yes"}).content.decode().split())
    assert "2 of 2 runs served from the cache (100%)" in served and "— answered afresh" in served
    fresh = " ".join(client.get("/admin/agents/run/", {"cached": "no"}).content.decode().split())
    assert "0 of 1 run served" in fresh
