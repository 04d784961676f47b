"""ask_events, the one SSE encoding of a streamed question: each step as it happens, then `answer` and
`done` (or `error`), a keepalive comment while nothing happens."""

from __future__ import annotations

import json
import time

import pytest

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.selectors import run_steps
from api.views import agents as agent_views
from tenants.scope import activate
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant


def read_stream(chunks) -> list[tuple[str, dict | None]]:
    """(event, data) per SSE block; a comment block is ("comment", None)."""
    events: list[tuple[str, dict | None]] = []
    for block in b"".join(chunks).decode().split("\n\n"):
        if block.startswith(":"):
            events.append(("comment", None))
        elif block:
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            events.append((fields["event"], json.loads(fields["data"])))
    return events


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_stream_yields_each_step_then_answer_and_done(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    events = read_stream(agent_views.ask_events(
        scope, "How much is a hotel night, and how many days of annual leave are there?", "auto"))
    kinds = [kind for kind, _ in events if kind != "comment"]
    assert kinds[-2:] == ["answer", "done"] and set(kinds[:-2]) == {"step"}, kinds
    answer, done = events[-2][1], events[-1][1]
    assert set(answer) == {"answer", "outcome", "grounded", "missing", "citations"}
    assert answer["outcome"] == "answered" and answer["grounded"]
    steps = [data for kind, data in events if kind == "step"]
    with activate(scope):
        stored = run_steps(scope, done["run_id"])
    assert [s["ordinal"] for s in steps] == [s.ordinal for s in stored]
    assert [s["name"] for s in steps] == [s.name for s in stored]


def test_stream_keeps_alive_while_silent_and_reports_a_failure_as_an_error_event(monkeypatch):
    def slow_failure(**kwargs):
        time.sleep(0.2)
        raise RuntimeError("provider down")

    monkeypatch.setattr(agent_views, "_ask", slow_failure)
    monkeypatch.setattr(agent_views, "KEEPALIVE_SECONDS", 0.02)
    events = read_stream(agent_views.ask_events(None, "q", "auto"))  # type: ignore[arg-type]
    assert events[0] == ("comment", None)
    assert events[-1] == ("error", {"code": "RuntimeError", "message": "provider down"})
    assert {kind for kind, _ in events[:-1]} == {"comment"}


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_a_run_the_database_refuses_to_store_ends_the_stream_with_run_not_recorded(settings, client):
    """The record comes first: the answer is streamed only once the run is stored. Here the database
    refuses the run's row (a trigger, as a stopped database would): the steps already streamed
    belong to no record, so the stream ends with `run_not_recorded` and the JSON ask answers 503."""
    from django.db import connections

    from tests.api.conftest import issue

    settings.DEFAULT_ANSWER_PROVIDER = "offline"
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    with connections["owner"].cursor() as cur:
        cur.execute("""CREATE FUNCTION refuse_run() RETURNS trigger LANGUAGE plpgsql AS
                       $$ BEGIN RAISE EXCEPTION 'disk full'; END $$;
                       CREATE TRIGGER refuse_run BEFORE INSERT ON agents_run FOR EACH ROW EXECUTE FUNCTION refuse_run();""")
    try:
        events = read_stream(agent_views.ask_events(scope, "How much is a hotel night?", "classic"))
        with activate(scope):
            raw = issue(tenant, "reader")
        response = client.post("/api/v1/ask/", {"question": "How much is a hotel night?", "strategy": "classic"},
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    finally:
        with connections["owner"].cursor() as cur:
            cur.execute("DROP TRIGGER refuse_run ON agents_run; DROP FUNCTION refuse_run();")
    kinds = [kind for kind, _ in events if kind != "comment"]
    assert kinds[-1] == "error" and "answer" not in kinds and "done" not in kinds and "step" in kinds, kinds
    assert events[-1][1]["code"] == "run_not_recorded" and "not recorded" in events[-1][1]["message"]
    assert response.status_code == 503 and response.json()["error"]["code"] == "run_not_recorded", response.content
    with activate(scope):
        from agents.models import Run

        assert not Run.objects.for_scope(scope).exists()
