"""The conversations API: start, list, read, ask follow-ups (JSON and SSE), delete; another tenant's or
another principal's conversation is 404, a key revoked mid-thread gets 401, bad input is a 400 on its field."""

from __future__ import annotations

import json
import re

import pytest
from rest_framework.test import APIClient

from agents.chain import verify_tenant_chain
from agents.demo import seed_demo
from agents.models import Run, RunStep
from api.views import agents as agent_views
from tenants.models import ApiKey
from tenants.scope import Scope, activate
from tests.api.conftest import issue
from tests.api.test_ask_stream import read_stream, streamed_text

HOTEL = "How much may employees spend on hotels per night?"


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


def start(client) -> int:
    r = client.post("/api/v1/conversations/", {"title": "Travel"}, format="json")
    assert r.status_code == 201, r.content
    return r.json()["id"]


def say(client, conversation_id: int, message: str):
    return client.post(f"/api/v1/conversations/{conversation_id}/messages/", {"message": message}, format="json")


def test_a_thread_with_a_follow_up_listed_and_read_back(world):
    reader = world.client("a-reader")
    cid = start(reader)
    first = say(reader, cid, HOTEL)
    assert first.status_code == 200, first.content
    assert (first.json()["conversation"], first.json()["turn"], first.json()["outcome"]) == (cid, 1, "answered")
    second = say(reader, cid, "shorter please")
    assert second.status_code == 200
    body = second.json()
    assert body["turn"] == 2 and body["message"] == "shorter please" and body["question"] == HOTEL
    assert body["strategy"] == "thread" and [s["name"] for s in body["steps"]][:2] == ["followup", "thread_evidence"]

    listed = reader.get("/api/v1/conversations/").json()["results"]
    assert [(c["id"], c["title"], c["turn_count"]) for c in listed] == [(cid, "Travel", 2)]
    detail = reader.get(f"/api/v1/conversations/{cid}/").json()
    assert [(t["turn"], t["message"], t["outcome"]) for t in detail["turns"]] == [(1, HOTEL, "answered"), (2, "shorter please", "answered")]
    assert detail["turns"][0]["citations"][0]["chunk"]["document_title"] == "Travel policy"

    # Each turn is a run of the tenant's chain, which still verifies.
    with activate(Scope.system(world.a.id)):
        assert Run.objects.for_scope(Scope.system(world.a.id)).filter(conversation_id=cid).count() == 2
        assert verify_tenant_chain(world.a.id, using="default").ok


def test_another_tenants_or_principals_conversation_is_not_found(world):
    cid = start(world.client("a-reader"))
    for who in ("b-reader", "b-admin", "a-editor", "a-admin"):
        client = world.client(who)
        assert client.get(f"/api/v1/conversations/{cid}/").status_code == 404, who
        assert say(client, cid, HOTEL).status_code == 404, who
        assert client.post(f"/api/v1/conversations/{cid}/messages/stream/", {"message": HOTEL}, format="json").status_code == 404
        assert client.delete(f"/api/v1/conversations/{cid}/").status_code == 404, who
        assert client.get("/api/v1/conversations/").json()["results"] == []
    assert world.client("a-reader").get(f"/api/v1/conversations/{cid}/").status_code == 200


def test_a_key_revoked_mid_thread_stops_the_thread(world):
    raw = issue(world.a, "reader")
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    cid = start(client)
    assert say(client, cid, HOTEL).status_code == 200
    public_id = raw.split("_")[1]
    with activate(Scope.system(world.a.id)):
        ApiKey.objects.get(public_id=public_id).revoke()
    assert say(client, cid, "shorter please").status_code == 401
    assert client.get(f"/api/v1/conversations/{cid}/").status_code == 401


def test_the_stream_sends_steps_then_answer_then_done(world, monkeypatch):
    monkeypatch.setattr(agent_views, "start_background", lambda target: target())  # the run inline, in the test's transaction
    reader = world.client("a-reader")
    cid = start(reader)
    assert say(reader, cid, HOTEL).status_code == 200
    r = reader.post(f"/api/v1/conversations/{cid}/messages/stream/", {"message": "and what about per week?"}, format="json")
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream"
    events = [(kind, data) for kind, data in read_stream(r.streaming_content) if kind != "comment"]
    kinds = [kind for kind, _ in events]
    assert kinds[-2:] == ["answer", "done"] and set(kinds[:-2]) == {"step", "text"}, kinds
    # The answer's text is streamed, at least a heading and a quote, before `done`: the reader shows it as it comes.
    assert kinds.count("text") >= 2 and streamed_text(events) == events[-2][1]["answer"]
    steps = [data for kind, data in events if kind == "step"]
    assert steps[0]["name"] == "followup" and [s["ordinal"] for s in steps] == list(range(len(steps)))
    done = events[-1][1]
    assert (done["conversation_id"], done["turn"]) == (cid, 2)
    assert done["question"] == "How much may employees spend on hotels per week?"
    assert json.loads(steps[0]["output"])["question"] == done["question"]


def test_delete_hides_the_thread_from_its_owner_and_keeps_its_runs(world):
    reader = world.client("a-reader")
    cid = start(reader)
    run_id = say(reader, cid, HOTEL).json()["id"]
    assert reader.delete(f"/api/v1/conversations/{cid}/").status_code == 204
    assert reader.get(f"/api/v1/conversations/{cid}/").status_code == 404
    assert say(reader, cid, "shorter please").status_code == 404
    assert reader.get("/api/v1/conversations/").json()["results"] == []
    run = world.client("a-admin").get(f"/api/v1/runs/{run_id}/")
    assert run.status_code == 200 and run.json()["conversation"] == cid


def test_rename_and_search_are_the_owners_only(world):
    reader = world.client("a-reader")
    travel = start(reader)
    assert say(reader, travel, HOTEL).status_code == 200
    other = start(reader)
    r = reader.patch(f"/api/v1/conversations/{other}/", {"title": "  Leave   questions "}, format="json")
    assert r.status_code == 200 and r.json()["title"] == "Leave questions"
    assert reader.get(f"/api/v1/conversations/{other}/").json()["title"] == "Leave questions"

    def found(client, q: str) -> list[int]:
        r = client.get("/api/v1/conversations/", {"q": q})
        assert r.status_code == 200, r.content
        return [c["id"] for c in r.json()["results"]]

    assert found(reader, "leave") == [other]  # by title
    assert found(reader, "SPEND ON HOTELS") == [travel]  # by a question asked in it
    assert found(reader, "100%_") == []  # wildcards are text
    assert sorted(found(reader, "")) == sorted([travel, other])
    for who in ("b-reader", "a-editor", "a-admin"):  # another tenant's user, another principal of the same tenant
        client = world.client(who)
        assert client.patch(f"/api/v1/conversations/{travel}/", {"title": "mine"}, format="json").status_code == 404, who
        assert found(client, "hotels") == [] and found(client, "Travel") == [], who
    assert reader.get(f"/api/v1/conversations/{travel}/").json()["title"] == "Travel"
    for body in ({"title": "   "}, {}, {"title": "t" * 201}):
        r = reader.patch(f"/api/v1/conversations/{other}/", body, format="json")
        assert r.status_code == 400 and "title" in r.json()["error"]["fields"], body
    assert reader.get("/api/v1/conversations/", {"q": "a\x00b"}).status_code == 400
    # A deleted conversation is found by nobody, its owner included.
    assert reader.delete(f"/api/v1/conversations/{travel}/").status_code == 204
    assert found(reader, "hotels") == [] and reader.patch(f"/api/v1/conversations/{travel}/", {"title": "x"},
                                                          format="json").status_code == 404


def test_bad_input_is_a_400_on_its_field_and_roles_are_checked(world):
    reader = world.client("a-reader")
    cid = start(reader)
    for body, field in (({"message": ""}, "message"), ({}, "message"), ({"message": "x" * 4001}, "message"),
                        ({"message": "hi", "strategy": "nope"}, "strategy"), ({"message": "a\x00b"}, "message")):
        r = reader.post(f"/api/v1/conversations/{cid}/messages/", body, format="json")
        assert r.status_code == 400 and field in r.json()["error"]["fields"], (body, r.content)
    assert reader.post("/api/v1/conversations/", {"title": "t" * 201}, format="json").status_code == 400
    assert reader.get("/api/v1/conversations/99999999999999999999/").status_code == 404
    assert world.client("a-auditor").post("/api/v1/conversations/", {}, format="json").status_code == 403
    assert world.client(None).get("/api/v1/conversations/").status_code == 401


@pytest.mark.django_db(databases=["default", "owner"])
@pytest.mark.parametrize("relevance_model", ["none", "packaged"])
def test_a_pronoun_follow_up_on_the_demo_resolves_to_the_hotel_not_the_currency(django_capture_on_commit_callbacks, monkeypatch,
                                                                                 relevance_model):
    """The demo's hotel rule quotes "EUR 180 per night": the follow-up "Does it include breakfast?"
    is about the hotel night the first turn asked about, in its stored question and in its searches,
    with the word rules alone and with the packaged cross-encoder judging."""
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", relevance_model)
    with django_capture_on_commit_callbacks(execute=True):
        tenant = seed_demo(log=lambda line: None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue(tenant, 'reader')}")
    cid = start(client)
    first = say(client, cid, "How much can I spend on a hotel night in a capital city?")
    assert first.status_code == 200 and "EUR" in first.json()["answer"], first.content
    second = say(client, cid, "Does it include breakfast?")
    assert second.status_code == 200, second.content
    body = second.json()
    assert body["message"] == "Does it include breakfast?"
    assert "hotel" in body["question"].casefold() and not re.search(r"\bEUR\b", body["question"]), body["question"]
    system = Scope.system(tenant.id)
    with activate(system):
        queries = [str(s.arguments.get("query", "")) for s in RunStep.objects.for_scope(system).filter(run_id=body["id"], name="search")]
        assert Run.objects.for_scope(system).get(pk=body["id"]).question == body["question"]
    assert queries and any("hotel" in q.casefold() for q in queries), queries
    assert not any(re.search(r"\bEUR\b", q) for q in queries), queries
