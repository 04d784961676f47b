"""Search, ask (JSON and SSE), runs with filters, chain verification and the daily run budget."""

from __future__ import annotations

import json

import pytest

from agents.models import Run
from api.views import agents as agent_views
from tenants.scope import activate
from tests.api.conftest import CANARY
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def test_search_happy_path_and_filters(world):
    c = world.client("a-reader")
    r = c.post("/api/v1/search/", {"query": "hotel per night", "k": 5, "mode": "keyword"}, format="json")
    assert r.status_code == 200, r.content
    hits = r.json()["hits"]
    assert hits and "150 EUR" in hits[0]["text"] and CANARY not in r.content.decode()
    r = c.post("/api/v1/search/", {"query": "hotel", "mode": "hybrid", "filters": {"corpus_ids": [world.sales_corpus.id]}}, format="json")
    assert r.status_code == 200 and all(h["corpus_id"] == world.sales_corpus.id for h in r.json()["hits"])
    assert "applied_filter" in r.json()


def test_search_another_tenants_corpus_filter_finds_nothing(world):
    r = world.client("a-reader").post("/api/v1/search/", {"query": "Globex hotel limit", "mode": "keyword",
                                                          "filters": {"corpus_ids": [world.b_corpus.id]}}, format="json")
    assert r.status_code == 200 and r.json()["hits"] == [] and CANARY not in r.content.decode()


def test_department_key_search_stays_in_its_departments(world):
    r = world.client("a-sales-reader").post("/api/v1/search/", {"query": "on-call engineers rotate weekly", "mode": "keyword",
                                                                "filters": {"department_ids": [world.eng.id]}}, format="json")
    assert r.status_code == 200 and "rotate" not in r.content.decode()


@pytest.mark.parametrize("body,field", [
    ({}, "query"),
    ({"query": ""}, "query"),
    ({"query": "x", "k": 0}, "k"),
    ({"query": "x", "k": 500}, "k"),
    ({"query": "x", "mode": "psychic"}, "mode"),
    ({"query": "x", "filters": {"corpus_ids": ["a"]}}, "filters.corpus_ids[0]"),
    ({"query": "x", "filters": {"metadata": {"k": [{"nested": 1}]}}}, "filters.metadata"),
    ({"query": "x", "filters": {"metadata": {"k": []}}}, "filters.metadata"),  # a list is "any of": not empty
    ({"query": "x", "filters": {"date_after": "yesterday"}}, "filters.date_after"),
])
def test_search_bad_input(world, body, field):
    r = world.client("a-reader").post("/api/v1/search/", body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.json()


def test_search_and_ask_roles_and_auth(world):
    for url, body in [("/api/v1/search/", {"query": "x"}), ("/api/v1/ask/", {"question": "x"}), ("/api/v1/ask/stream/", {"question": "x"})]:
        assert world.client("a-auditor").post(url, body, format="json").status_code == 403
        assert world.client(None).post(url, body, format="json").status_code == 401


def test_ask_returns_a_cited_answer_and_the_run_is_auditable(world):
    r = world.client("a-reader").post("/api/v1/ask/", {"question": "What is the hotel limit per night?"}, format="json")
    assert r.status_code == 200, r.content
    run = r.json()
    assert run["outcome"] in {"answered", "not_enough_evidence"} and run["steps"]
    assert run["principal"].startswith("key:") and run["scope"]["tenant_id"] == world.a.id
    assert CANARY not in r.content.decode()
    if run["outcome"] == "answered":
        assert "150" in run["answer"] and run["citations"][0]["verdict"] == "verified"
        assert run["citations"][0]["chunk"]["text"].endswith("Employees may book hotels up to 150 EUR per night.")
    auditor = world.client("a-auditor")
    detail = auditor.get(f"/api/v1/runs/{run['id']}/")
    assert detail.status_code == 200 and detail.json()["hash"] == run["hash"]
    listed = auditor.get("/api/v1/runs/", {"principal": run["principal"], "outcome": run["outcome"]}).json()["results"]
    assert [x["id"] for x in listed] == [run["id"]]
    assert auditor.get("/api/v1/runs/", {"strategy": "nope"}).json()["results"] == []
    assert auditor.get("/api/v1/runs/", {"since": "2999-01-01"}).json()["results"] == []
    assert auditor.get("/api/v1/runs/", {"until": "2000-01-01"}).json()["results"] == []
    assert [x["id"] for x in auditor.get("/api/v1/runs/", {"unverified": "false"}).json()["results"]] == (
        [run["id"]] if run["unverified_citations"] == 0 else [])
    chain = auditor.get("/api/v1/runs/verify/").json()
    assert chain == {"ok": True, "runs_checked": 1, "first_break": None}


@pytest.mark.parametrize("body,field", [({}, "question"), ({"question": " "}, "question"), ({"question": "x" * 5000}, "question"),
                                        ({"question": "x", "strategy": "magic"}, "strategy")])
def test_ask_bad_input(world, body, field):
    r = world.client("a-reader").post("/api/v1/ask/", body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"]


def test_runs_are_for_auditors_and_admins_and_tenant_private(world):
    world.client("b-reader").post("/api/v1/ask/", {"question": f"hotel limit {CANARY}?"}, format="json")
    with activate(whole_tenant(world.b)):
        b_run = Run.objects.for_scope(whole_tenant(world.b)).get()
    for who in ("a-reader", "a-editor"):
        assert world.client(who).get("/api/v1/runs/").status_code == 403
        assert world.client(who).get("/api/v1/runs/verify/").status_code == 403
    for who in ("a-auditor", "a-admin"):
        c = world.client(who)
        assert c.get("/api/v1/runs/").json()["results"] == []
        assert c.get(f"/api/v1/runs/{b_run.id}/").status_code == 404
        assert c.get("/api/v1/runs/verify/").json()["runs_checked"] == 0
    assert world.client("b-auditor").get(f"/api/v1/runs/{b_run.id}/").status_code == 200
    assert world.client(None).get("/api/v1/runs/").status_code == 401


@pytest.mark.parametrize("params,field", [({"since": "soon"}, "since"), ({"outcome": "great"}, "outcome"),
                                          ({"unverified": "maybe"}, "unverified")])
def test_run_filters_bad_input(world, params, field):
    r = world.client("a-auditor").get("/api/v1/runs/", params)
    assert r.status_code == 400 and field in r.json()["error"]["fields"]


def test_daily_run_budget_is_429_with_retry_after(world):
    world.a.settings = {"daily_runs": 1}
    with activate(whole_tenant(world.a)):  # only the tenant itself may change its row (RLS)
        world.a.save()
    c = world.client("a-reader")
    assert c.post("/api/v1/ask/", {"question": "hotel limit?"}, format="json").status_code == 200
    r = c.post("/api/v1/ask/", {"question": "hotel limit?"}, format="json")
    assert r.status_code == 429 and int(r["Retry-After"]) >= 1 and r.json()["error"]["code"] == "throttled"
    assert c.post("/api/v1/ask/stream/", {"question": "hotel limit?"}, format="json").status_code == 429
    assert world.client("b-reader").post("/api/v1/ask/", {"question": "hotel?"}, format="json").status_code == 200


def parse_sse(raw: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_ask_stream_emits_steps_then_answer(world, monkeypatch):
    # Inline: the test's data lives in its (uncommitted) transaction, invisible to another thread's connection.
    monkeypatch.setattr(agent_views, "start_background", lambda target: target())
    r = world.client("a-reader").post("/api/v1/ask/stream/", {"question": "What is the hotel limit per night?"}, format="json")
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream"
    events = parse_sse(b"".join(r.streaming_content))
    kinds = [e for e, _ in events]
    assert kinds[0] == "step" and kinds[-2:] == ["answer", "done"], kinds
    steps = [d for e, d in events if e == "step"]
    assert [s["ordinal"] for s in steps] == sorted(s["ordinal"] for s in steps)
    answer = events[-2][1]
    assert set(answer) == {"answer", "answer_html", "outcome", "grounded", "missing", "citations"}
    run_id = events[-1][1]["run_id"]
    detail = world.client("a-auditor").get(f"/api/v1/runs/{run_id}/").json()
    assert len(detail["steps"]) == len(steps)


def test_ask_stream_bad_input_is_a_plain_400(world):
    r = world.client("a-reader").post("/api/v1/ask/stream/", {"question": ""}, format="json")
    assert r.status_code == 400 and "question" in r.json()["error"]["fields"]


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_ask_stream_runs_off_the_request_thread(world):
    """The real path: the loop runs in a worker thread and events cross a queue as they happen."""
    r = world.client("a-reader").post("/api/v1/ask/stream/", {"question": "What is the hotel limit per night?"}, format="json")
    events = parse_sse(b"".join(r.streaming_content))
    assert [e for e, _ in events][-2:] == ["answer", "done"] and events[0][0] == "step"
    assert world.client("a-auditor").get(f"/api/v1/runs/{events[-1][1]['run_id']}/").status_code == 200


def test_department_auditor_sees_only_runs_confined_to_its_departments(world):
    sales_run = world.client("a-sales-reader").post("/api/v1/ask/", {"question": "discount ceiling?"}, format="json").json()
    wide_run = world.client("a-reader").post("/api/v1/ask/", {"question": "on-call rotation?"}, format="json").json()
    c = world.client("a-sales-auditor")
    assert [r["id"] for r in c.get("/api/v1/runs/").json()["results"]] == [sales_run["id"]]
    assert c.get(f"/api/v1/runs/{wide_run['id']}/").status_code == 404
    assert {r["id"] for r in world.client("a-auditor").get("/api/v1/runs/").json()["results"]} == {sales_run["id"], wide_run["id"]}
