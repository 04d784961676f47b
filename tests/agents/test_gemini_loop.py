"""The agentic loop with the real google-genai SDK against a scripted local Gemini.

Every scenario must end correctly, never return or cite anything outside the caller's scope,
and leave a complete trace.
"""

from __future__ import annotations

import json

import pytest

from agents.messages import ModelRequest, UserMessage
from agents.providers.gemini import GeminiProvider
from agents.selectors import run_citations, run_steps
from agents.services import ask
from agents.tools import TOOL_SPECS
from kb import retrieval
from tenants.models import Tenant
from tenants.scope import activate
from tests.factories import department, departments_of
from tests.fakes.fake_gemini import FakeGemini, calls, malformed, status, text

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def provider(fake: FakeGemini, **kw) -> GeminiProvider:
    return GeminiProvider(api_key="test-key", model="gemini-test", base_url=fake.base_url, backoff_s=0, **kw)


def returned_ids(body: dict) -> list[int]:
    """Chunk ids the loop sent back to the model in one request's function responses."""
    out = []
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            response = (part.get("functionResponse") or {}).get("response") or {}
            out += [r["chunk_id"] for r in response.get("results", []) if isinstance(r, dict) and "chunk_id" in r]
    return out


def all_sent_text(fake: FakeGemini) -> str:
    return json.dumps(fake.requests)


def cite_first(body: dict) -> dict:
    ids = returned_ids(body)
    return text(f"Per the policy [c:{ids[0]}]." if ids else "NOT_ENOUGH_EVIDENCE: nothing found")


def trace(scope, run):
    with activate(scope):
        return run_steps(scope, run.id), run_citations(scope, run.id)


def assert_complete(steps, fake: FakeGemini | None = None):
    assert [s.ordinal for s in steps] == list(range(len(steps)))
    if fake is not None:
        assert sum(1 for s in steps if s.kind == "model_call") <= len(fake.requests)


def scope_of(tenant: Tenant, *depts: str):
    from tests.factories import dept_scope, whole_tenant

    return dept_scope(tenant, *depts) if depts else whole_tenant(tenant)


def quote(chunk) -> str:
    return chunk.text.split(". ")[0].rstrip(".") + "."


def test_parallel_calls_are_all_run_and_answered_together(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant, "Engineering")

    def answer(body):
        ids = returned_ids(body)
        if not {chunks["travel2"].id, chunks["leave0"].id} <= set(ids):
            return text("NOT_ENOUGH_EVIDENCE: x")
        return text(f'"{quote(chunks["travel2"])}" [c:{chunks["travel2"].id}] and "{quote(chunks["leave0"])}" [c:{chunks["leave0"].id}]')

    script = [calls(("search", {"query": "business trip extended personal days claim"}),
                    ("search", {"query": "personal days annual leave", "k": 3.0})), answer]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="What can I claim and which leave applies?", strategy="agentic", provider=provider(fake))
    assert run.outcome == "answered" and run.grounded, run.answer
    assert len(fake.function_responses(1)) == 2  # both responses in one turn
    steps, cites = trace(scope, run)
    assert [s.name for s in steps] == ["agent", "search", "search", "agent"]
    assert steps[2].arguments["k"] == 3  # coerced from the model's float
    assert [c.verdict for c in cites] == ["verified", "verified"]
    assert run.input_tokens == 200 and run.output_tokens == 30
    assert fake.tool_modes() == ["AUTO", "AUTO"]


def test_parallel_calls_without_ids_round_trip(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    script = [calls(("search", {"query": "hotel night"}), ("search", {"query": "annual leave days"}), with_ids=False), cite_first]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="Hotel and leave?", strategy="agentic", provider=provider(fake))
    responses = fake.function_responses(1)
    assert [r["name"] for r in responses] == ["search", "search"] and all("id" not in r for r in responses)
    assert run.outcome == "answered" and run.grounded


def test_bad_arguments_and_unknown_tool_come_back_as_correctable_errors(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    script = [
        calls(("search", {"query": "hotel", "k": "lots"}), ("search", {"qeury": "hotel"}), ("search", {"query": ["not", "a", "string"]}),
              ("delete_everything", {"confirm": True}), ("read", {})),
        calls(("search", {"query": "hotel night reimbursed"})),
        cite_first,
    ]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="How much is a hotel night?", strategy="agentic", provider=provider(fake))
    errors = [r["response"]["error"] for r in fake.function_responses(1)]
    assert "'k' must be an integer" in errors[0]
    assert "unknown argument(s) qeury" in errors[1]
    assert "'query' must be a string" in errors[2]
    assert "unknown tool 'delete_everything'" in errors[3]
    assert "give either chunk_id" in errors[4]
    assert run.outcome == "answered" and run.grounded
    steps, _ = trace(scope, run)
    assert_complete(steps, fake)
    assert [bool(s.error) for s in steps if s.kind == "tool_call"] == [True] * 5 + [False]


def test_repeated_search_is_served_from_the_run_cache(acme, monkeypatch):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    executed = []
    real = retrieval.search
    monkeypatch.setattr(retrieval, "search", lambda *a, **kw: executed.append(a[1]) or real(*a, **kw))
    script = [calls(("search", {"query": "hotel night"})), calls(("search", {"query": "  Hotel   NIGHT "})), cite_first]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="Hotel night limit?", strategy="agentic", provider=provider(fake))
    assert executed == ["hotel night"]
    steps, _ = trace(scope, run)
    searches = [s for s in steps if s.name == "search"]
    assert [s.cached for s in searches] == [False, True]
    assert searches[0].chunk_ids == searches[1].chunk_ids
    assert "not searched again" in json.dumps(fake.function_responses(2))


def test_foreign_ids_in_tool_calls_return_nothing_and_cannot_be_cited(acme, globex):
    tenant, _, chunks = acme
    other, other_corpus, canary = globex
    scope = scope_of(tenant, "Engineering")
    sales = department(tenant, "Sales")
    other_dept = departments_of(other)[0]
    script = [
        calls(("search", {"query": "hotel reimbursed night", "corpus_ids": [other_corpus.id]}),
              ("search", {"query": "commission rate", "department_ids": [sales.id]}),
              ("search", {"query": "hotel reimbursed night", "department_ids": [other_dept.id]}),
              ("search", {"query": "canary", "document_ids": [canary.document_id]}),
              ("read", {"chunk_id": canary.id}), ("read", {"chunk_id": chunks["secret"].id}),
              ("read", {"document_id": canary.document_id})),
        text(f"Globex pays EUR 999 [c:{canary.id}] and commission is 7 percent [c:{chunks['secret'].id}]."),
    ]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="Hotel limit?", strategy="agentic", provider=provider(fake))
    sent = all_sent_text(fake)
    assert "canary" not in sent.replace('"query": "canary"', "") and "999" not in sent.split("Globex pays")[0]
    assert "commission rate is 7" not in sent
    responses = fake.function_responses(1)
    assert all(r["response"].get("results", []) == [] for r in responses[:4])
    assert "not found" in responses[4]["response"]["error"] and "not found" in responses[5]["response"]["error"]
    assert "not found" in responses[6]["response"]["error"]
    assert responses[4]["response"]["error"].replace(str(canary.id), "X") == \
        responses[5]["response"]["error"].replace(str(chunks["secret"].id), "X")  # foreign == missing
    assert not run.grounded
    steps, cites = trace(scope, run)
    assert {c.verdict for c in cites} == {"not_retrieved"}
    returned = {cid for s in steps for cid in s.chunk_ids}
    assert canary.id not in returned and chunks["secret"].id not in returned
    dept_filter = steps[2].effective_filter["scope"]
    assert dept_filter["department_ids"] == [] and dept_filter["all_departments"] is False


def test_budget_overrun_forces_a_final_answer_with_tools_off(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    with activate(scope):  # only the tenant itself may change its row (RLS)
        Tenant.objects.filter(pk=tenant.pk).update(settings={"budgets": {"max_tool_calls": 3}})
    endless = [calls(("search", {"query": f"hotel {i}"}), ("search", {"query": f"leave {i}"})) for i in range(10)]

    def final(body):
        assert body["toolConfig"]["functionCallingConfig"]["mode"] == "NONE"
        return text(f"Partial: hotels are capped [c:{returned_ids(body)[0]}]. Could not find the rest.")

    with FakeGemini(endless[:2] + [final]) as fake:
        run = ask(scope=scope, question="Hotel and leave?", strategy="agentic", provider=provider(fake))
    assert run.outcome == "budget_exhausted"
    assert fake.tool_modes() == ["AUTO", "AUTO", "NONE"]
    steps, _ = trace(scope, run)
    tool_steps = [s for s in steps if s.kind == "tool_call"]
    assert len(tool_steps) == 4 and run.tool_calls == 3
    assert "budget spent" in tool_steps[-1].error
    assert "budget is spent" in json.dumps(fake.requests[-1]["contents"][-1])


def test_rate_limit_and_server_error_are_retried(acme):
    tenant, _, _ = acme
    scope = scope_of(tenant)
    with FakeGemini([status(429), status(500), calls(("search", {"query": "hotel night"})), status(503), cite_first]) as fake:
        run = ask(scope=scope, question="Hotel?", strategy="agentic", provider=provider(fake))
    assert run.outcome == "answered" and run.grounded
    assert len(fake.requests) == 5
    steps, _ = trace(scope, run)
    assert [s.name for s in steps] == ["agent", "search", "agent"]


def test_malformed_reply_is_retried_then_the_run_fails_with_its_partial_trace(acme):
    tenant, _, _ = acme
    scope = scope_of(tenant)
    with FakeGemini([malformed(), calls(("search", {"query": "hotel"}))], when_exhausted=malformed()) as fake:
        run = ask(scope=scope, question="Hotel?", strategy="agentic", provider=provider(fake, max_attempts=3))
    assert run.outcome == "failed"
    assert "after 3 attempts" in run.error
    assert run.answer == "" and not run.grounded
    steps, _ = trace(scope, run)
    assert [s.name for s in steps] == ["agent", "search", "agent"]
    assert steps[-1].error


def test_strict_mode_withholds_an_answer_with_unverified_citations(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    with activate(scope):  # only the tenant itself may change its row (RLS)
        Tenant.objects.filter(pk=tenant.pk).update(settings={"strict_citations": True})
    script = [calls(("search", {"query": "hotel night"})),
              lambda body: text(f'"Hotels are free." [c:{returned_ids(body)[0]}] See also [c:99999999].')]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="Hotel?", strategy="agentic", provider=provider(fake))
    assert not run.grounded and run.strict
    assert "withheld" in run.answer
    _, cites = trace(scope, run)
    assert [c.verdict for c in cites] == ["quote_mismatch", "not_retrieved"]
    steps, _ = trace(scope, run)
    assert [s.name for s in steps] == ["agent", "search", "agent", "repair"]  # one repair attempt, which did not verify
    assert "Hotels are free" in steps[2].output  # the draft stays in the audit trail


def test_unverified_citations_get_one_repair_turn_with_tools_off(acme):
    tenant, _, chunks = acme
    scope = scope_of(tenant)
    hotel = chunks["travel1"]
    script = [calls(("search", {"query": "hotel night reimbursed"})),
              text(f'"Hotels are free" [c:{hotel.id}] and flights too [c:424242].'),
              text(f'"Hotel stays are reimbursed up to EUR 180 per night" [c:{hotel.id}].')]
    with FakeGemini(script) as fake:
        run = ask(scope=scope, question="Hotel?", strategy="agentic", provider=provider(fake))
    assert run.grounded and "EUR 180" in run.answer
    assert fake.tool_modes() == ["AUTO", "AUTO", "NONE"]
    assert "Citation check failed" in json.dumps(fake.requests[-1]["contents"][-1])
    steps, cites = trace(scope, run)
    assert [s.name for s in steps] == ["agent", "search", "agent", "repair"]
    assert [c.verdict for c in cites] == ["verified"]


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_sdk_paths_and_no_tools_mode(api_version):
    with FakeGemini([text("hello")]) as fake:
        turn = provider(fake, api_version=api_version).generate(
            ModelRequest(task="agent", system="s", messages=(UserMessage("q"),), tools=TOOL_SPECS, tools_enabled=False))
    assert turn.text == "hello"
    assert fake.paths[0].startswith(f"/{api_version}/models/gemini-test:streamGenerateContent")  # streamed: a call can be abandoned
    assert fake.requests[0]["toolConfig"]["functionCallingConfig"]["mode"] == "NONE"
    assert "automaticFunctionCalling" not in json.dumps(fake.requests[0])
