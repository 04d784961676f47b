"""Model provider faults through the real API: Gemini (fake server, real google-genai SDK) answering 429,
500, timing out or returning malformed JSON, for every attempt or only some.

Pass: never a 5xx from our API; a run whose provider never recovered is stored as failed, with its
error and the partial trace it got through (ordinals contiguous, the failing model call recorded);
a run whose provider recovered within the retries is answered; the tenant's chain verifies; the
SSE stream always ends with `done` or `error`.
"""

from __future__ import annotations

import json
import time

import pytest
from rest_framework.test import APIClient

from agents.chain import verify_tenant_chain
from agents.models import Run, RunStep
from tenants.scope import activate
from tests.factories import whole_tenant
from tests.fakes.fake_gemini import FakeGemini, calls, malformed, status, text
from tests.reliability.infra import api_tenant_with_fast_gemini

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

TIMEOUT_S = 0.25
QUESTION = "How much is a hotel night in a capital city?"


def hang(body: dict) -> dict:
    time.sleep(TIMEOUT_S * 3)
    return text("too late")


def cite_first(body: dict) -> dict:
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            for r in ((part.get("functionResponse") or {}).get("response") or {}).get("results", []):
                return text(f"Hotels are capped [c:{r['chunk_id']}].")
    return text("NOT_ENOUGH_EVIDENCE: nothing retrieved")


SEARCH = calls(("search", {"query": "hotel night capital"}))
FAULTS = {  # name -> (script, the fake's answer once the script is used up, expected outcome)
    "429 always": ([], status(429, "quota"), "failed"),
    "500 always": ([], status(500, "boom"), "failed"),
    "timeout always": ([], hang, "failed"),
    "malformed JSON always": ([], malformed(), "failed"),
    "500 after a search (partial trace)": ([SEARCH], status(500, "boom"), "failed"),
    "timeout after a search (partial trace)": ([SEARCH], hang, "failed"),
    "malformed after a search (partial trace)": ([SEARCH], malformed(), "failed"),
    "429, 500, malformed, timeout then recovery": ([status(429), status(500), malformed(), SEARCH, hang, cite_first], None, "answered"),
}


@pytest.fixture
def tenant_key(db, settings, monkeypatch):
    tenant, raw = api_tenant_with_fast_gemini(settings, monkeypatch, timeout_s=TIMEOUT_S)
    from api.views import agents as agent_views

    monkeypatch.setattr(agent_views, "start_background", lambda target: target())
    return tenant, raw


def _use_fake(settings, fake: FakeGemini) -> None:
    settings.DEFAULT_ANSWER_PROVIDER = "gemini"
    settings.GEMINI_API_KEY = "test-key"
    settings.GEMINI_BASE_URL = fake.base_url
    settings.GEMINI_MODEL = "gemini-test"


def _sse_events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in lines:
            out.append((lines["event"], json.loads(lines.get("data", "null"))))
    return out


STREAMED = ("500 always", "timeout after a search (partial trace)", "429, 500, malformed, timeout then recovery")


@pytest.mark.parametrize("fault,route", [(f, "ask") for f in FAULTS] + [(f, "ask/stream") for f in STREAMED])
def test_provider_fault_is_stored_as_a_failed_run_with_its_partial_trace(tenant_key, settings, reliability, fault, route):
    """Faults: model provider answering 429 / 500 / timing out / malformed JSON (fake Gemini through the API)"""
    tenant, raw = tenant_key
    script, exhausted, expected = FAULTS[fault]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    with FakeGemini(list(script), when_exhausted=exhausted or text("script over")) as fake:
        _use_fake(settings, fake)
        response = client.post(f"/api/v1/{route}/", {"question": QUESTION, "strategy": "agentic"}, format="json")
        body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code < 500, body[:500]
    scope = whole_tenant(tenant)
    with activate(scope):
        run = Run.objects.for_scope(scope).order_by("-id").first()
        steps = list(RunStep.objects.for_scope(scope).filter(run_id=run.id).order_by("ordinal"))
    reliability.tried(len(fake.requests), "provider requests")
    reliability.tried(1, "runs")
    assert run is not None, "no run stored"
    assert run.outcome == expected, (run.outcome, run.error)
    assert [s.ordinal for s in steps] == list(range(len(steps)))
    if expected == "failed":
        assert run.error and not run.grounded
        assert steps and steps[-1].kind == "model_call" and steps[-1].error, "the failing model call is in the trace"
        if script:
            assert [s.name for s in steps[:2]] == ["agent", "search"] and not steps[1].error, "the partial trace is kept"
    else:
        assert run.grounded
    if route == "ask/stream":
        events = _sse_events(body)
        assert events and events[-1][0] in {"done", "error"}, events[-3:]
        assert tuple(e for e, _ in events if e == "answer")[:1] == ("answer", ) or events[-1][0] == "error"
    else:
        data = json.loads(body)
        assert data["outcome"] == expected and data["id"] == run.id
    with activate(scope):
        assert verify_tenant_chain(tenant.id, using="default").ok
