"""ask_events, the one SSE encoding of a streamed question: each step as it happens, then `answer` and
`done` (or `error`), a keepalive comment while nothing happens."""

from __future__ import annotations

import json
import threading
import time

import pytest

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.models import Run
from agents.providers.offline import OfflineProvider
from agents.selectors import run_steps
from agents.services import ask
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


def streamed_text(events: list[tuple[str, dict | None]]) -> str:
    """The answer as a reader of the `text` events shows it: pieces appended, a reset starting afresh."""
    shown = ""
    for kind, data in events:
        if kind == "text" and data is not None:
            shown = (data["delta"] if data["reset"] else shown + data["delta"])
    return shown


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_stream_yields_each_step_then_answer_and_done(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    events = read_stream(agent_views.ask_events(
        scope, "How much is a hotel night, and how many days of annual leave are there?", "auto"))
    kinds = [kind for kind, _ in events if kind != "comment"]
    assert kinds[-2:] == ["answer", "done"] and set(kinds[:-2]) == {"step", "text"}, kinds
    answer, done = events[-2][1], events[-1][1]
    # The answer's text arrived piece by piece before `done`, and the pieces (from the last reset) are the answer.
    assert streamed_text(events) == answer["answer"] and kinds.count("text") >= 2
    assert set(answer) == {"answer", "answer_html", "outcome", "grounded", "missing", "citations"}
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


class HeldProvider:
    """The offline provider, its second reply held until the test lets it go: the reader can leave meanwhile."""

    name, model = "offline", "extractive-v2"

    def __init__(self) -> None:
        self.inner, self.calls = OfflineProvider(), 0
        self.waiting, self.go = threading.Event(), threading.Event()

    def generate(self, request):
        self.calls += 1
        if self.calls == 2:
            self.waiting.set()
            self.go.wait(30)
        return self.inner.generate(request)


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_a_reader_that_leaves_stops_the_run_after_its_step_in_progress():
    """Stop in the chat closes the stream: the server closes the generator, and the run stops after the
    step it is in, stored as failed with the steps it made and an error saying it was stopped."""
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    held = HeldProvider()
    stream = agent_views.ask_events(scope, "How much is a hotel night?", "agentic",
                                    asker=lambda **kwargs: ask(provider=held, spend_budget=False, **kwargs))
    assert next(stream).startswith(b"event: step")  # the agent's first call (it asks for the facets)
    assert held.waiting.wait(30)  # the second call is under way
    stream.close()  # what the server does when a write to a reader that left fails
    held.go.set()
    deadline = time.monotonic() + 30
    with activate(scope):
        while (run := Run.objects.for_scope(scope).first()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run is not None and run.outcome == "failed" and run.error.startswith("RunStopped: the asker stopped the run")
        assert [s.name for s in run_steps(scope, run.id)] == ["agent", "facets", "agent"]  # nothing after the step in progress


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_a_gemini_answer_streams_as_its_chunks_arrive_before_the_answer_event():
    """Gemini's streamGenerateContent chunks (tests.fakes.fake_gemini: 16 characters each) become `text`
    events as they arrive: a one-sentence answer, which sentence splitting would send whole, arrives in
    several events before `answer`, and the events from the last reset are the stored answer."""
    from agents.providers.gemini import GeminiProvider  # the Gemini SDK: only this test needs it
    from tests.fakes.fake_gemini import FakeGemini, calls, text

    tenant = make_tenant("Acme")
    _, chunks = make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    answer = f"Per the travel policy hotel nights are reimbursed as stated [c:{chunks['travel2'].id}]"
    with FakeGemini([calls(("search", {"query": "hotel night"}))], when_exhausted=text(answer)) as fake:
        gemini = GeminiProvider(api_key="test-key", model="gemini-test", base_url=fake.base_url, backoff_s=0)
        events = read_stream(agent_views.ask_events(scope, "How much is a hotel night?", "agentic",
                                                    asker=lambda **kwargs: ask(provider=gemini, spend_budget=False, **kwargs)))
    kinds = [kind for kind, _ in events if kind != "comment"]
    assert kinds[-2:] == ["answer", "done"], events
    texts = [data for kind, data in events if kind == "text" and data is not None]
    last_reset = max(i for i, data in enumerate(texts) if data["reset"])
    assert len(texts[last_reset:]) >= 2 and streamed_text(events) == events[-2][1]["answer"] == answer
