"""The generative providers keep their contract with slow, weak and misbehaving models (issue 34).

The OpenAI-compatible provider's real httpx client talks to a local misbehaving server
(tests.fakes.fake_openai), google-genai to the local fake Gemini (tests.fakes.fake_gemini); a test
parametrised over `server` (SERVERS) runs against both. Nothing here leaves 127.0.0.1. What must
hold: no run outlives its wall budget by more than SLACK_S; a reply nobody waits for is abandoned
(its connection closed, the server idle again) so the next run is not delayed; a truncated reply is
never stored as a complete answer; a provider that ignores tools never yields an answer with zero
searches; an ungrounded answer is never `answered`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.cache import cache

from agents.budgets import Budgets
from agents.providers import known_capabilities, probe, provider_key
from agents.providers.gemini import GeminiProvider
from agents.providers.openai_compat import OpenAICompatProvider
from agents.selectors import run_steps
from agents.services import WITHHELD, ask
from tenants.scope import activate
from tests.factories import whole_tenant
from tests.fakes import fake_gemini as fg
from tests.fakes import fake_openai as fo
from tests.fakes.fake_openai import FakeOpenAI, last_user_text, never_stops, reply, tool_calls

pytestmark = pytest.mark.django_db(databases=["default", "owner"])
# The tests marked `serial` hold a run (or a probe's measured speed) to a budget of a few seconds, so they
# run apart from the parallel workers (scripts/test): beside them, on a small machine, the budget is spent
# waiting for a core, not on the behaviour under test. The others assert outcomes, not times.

SLACK_S = 2.0
QUESTION = "What is the hotel limit per night?"
MULTI = "What is the hotel limit per night, and how many days of annual leave do employees get?"
_BLOCK = re.compile(r'<document_data id="c:(\d+)"[^>]*>\n(.*?)\n</document_data>', re.S)


def openai(fake: FakeOpenAI, **kw) -> OpenAICompatProvider:
    return OpenAICompatProvider(**{"base_url": fake.base_url, "model": "tiny", "backoff_s": 0, **kw})


def gemini(fake: fg.FakeGemini, **kw) -> GeminiProvider:
    return GeminiProvider(**{"api_key": "test-key", "model": "gemini-test", "base_url": fake.base_url, "backoff_s": 0, **kw})


@dataclass(frozen=True)
class Shown:
    """What one request shows the model, whichever API carried it."""
    system: str
    tools: set[str]
    tools_off: bool  # declared, but calling them is turned off (tool_choice "none", mode NONE)
    last_user: str
    results: list[dict]  # the tool results sent back


def shown_openai(body: dict) -> Shown:
    messages = body.get("messages", [])
    return Shown(system=next((m["content"] for m in messages if m.get("role") == "system"), ""),
                 tools={t["function"]["name"] for t in body.get("tools", [])}, tools_off=body.get("tool_choice") == "none",
                 last_user=last_user_text(body), results=[json.loads(m["content"]) for m in messages if m.get("role") == "tool"])


def shown_gemini(body: dict) -> Shown:
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    return Shown(system=fg.system_text(body), tools=fg.declared_tools(body), tools_off=mode == "NONE",
                 last_user=fg.last_user_text(body), results=[r.get("response") or {} for r in fg.function_responses(body)])


@dataclass(frozen=True)
class Server:
    """A fake server, the provider that talks to it through its real client, and how to script it."""
    fake: Callable[..., Any]  # (script, when_exhausted=, single_slot=, drop_system=, ignore_tools=) -> FakeOpenAI | FakeGemini
    provider: Callable[..., Any]
    text: Callable[[str], dict]
    call: Callable[[str, dict], dict]  # one tool call
    shown: Callable[[dict], Shown]
    module: Any  # its echo, slow, close_connection


OPENAI = Server(FakeOpenAI, openai, reply, lambda name, args: tool_calls((name, json.dumps(args))), shown_openai, fo)
GEMINI = Server(fg.FakeGemini, gemini, fg.text, lambda name, args: fg.calls((name, args)), shown_gemini, fg)
SERVERS = [pytest.param(OPENAI, id="openai"), pytest.param(GEMINI, id="gemini")]


def shown_chunks(text: str) -> list[tuple[int, str]]:
    return [(int(i), body) for i, body in _BLOCK.findall(text)]


def prompt_text(body: dict) -> str:
    """Everything the request shows the model (OpenAI messages or Gemini contents), as text."""
    if "messages" in body:
        return "\n".join(str(m.get("content") or "") for m in body["messages"])
    return "\n".join(p.get("text", "") for c in body.get("contents", []) for p in c.get("parts", []))


def grounded_text(body: dict) -> str:
    """A correct answer: the first sentence of the first chunk shown, quoted and cited."""
    chunks = shown_chunks(prompt_text(body))
    if not chunks:
        return "NOT_ENOUGH_EVIDENCE: nothing was shown"
    cid, text = chunks[0]
    return f'"{text.split(". ")[0].rstrip(".")}." [c:{cid}]'


def timed_ask(scope, provider, budgets: Budgets, strategy: str = "classic", question: str = QUESTION):
    started = time.monotonic()
    run = ask(scope=scope, question=question, strategy=strategy, provider=provider, budgets=budgets)
    return run, time.monotonic() - started


# --- 1. Every call is bounded ---------------------------------------------------------------------

@pytest.mark.serial
def test_a_model_that_never_stops_is_cut_at_the_wall_budget_and_the_next_run_is_not_delayed(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    budgets = Budgets(max_wall_seconds=3)
    with FakeOpenAI([never_stops()], when_exhausted=lambda body: reply(grounded_text(body))) as fake:
        run, took = timed_ask(scope, openai(fake), budgets)
        assert took <= budgets.max_wall_seconds + SLACK_S, took
        assert run.outcome == "failed" and "wall budget" in run.error
        assert fake.idle_within(1.0) and fake.abandoned == 1  # the connection was closed: the server stopped
        assert fake.requests[0]["stream"] is True and 0 < fake.requests[0]["max_tokens"] <= budgets.max_output_tokens

        after, took_after = timed_ask(scope, openai(fake), budgets)
        assert took_after < 2.0 and after.outcome == "answered", (took_after, after.outcome, after.error)


def test_the_output_cap_follows_what_is_left_of_the_token_budget(acme):
    tenant, _, _ = acme
    budgets = Budgets(max_tokens=1_000, max_output_tokens=4_000)
    with FakeOpenAI([], when_exhausted=lambda body: reply(grounded_text(body), prompt_tokens=700, completion_tokens=100)) as fake:
        timed_ask(whole_tenant(tenant), openai(fake), budgets, strategy="pipeline")
    caps = [r["max_tokens"] for r in fake.requests]
    tasks = [task_of(r) for r in fake.requests]
    assert all(c <= 1_000 for c in caps) and caps[-1] < 1_000, caps
    # a few queries and a JSON verdict have caps of their own, well under the answer's
    limits = {"rewrite": 256, "judge": 512, "answer": 1_000}
    assert all(c <= limits[t] for c, t in zip(caps, tasks, strict=True)), list(zip(tasks, caps, strict=True))


def task_of(body: dict) -> str:
    text = prompt_text(body)
    return "rewrite" if "Rewrite the question" in text else "judge" if "Does every part of the question" in text else "answer"


def test_a_rambling_model_is_cut_at_the_small_caps_of_rewrites_and_verdicts(acme):
    tenant, _, _ = acme
    with FakeOpenAI([], when_exhausted=lambda body: reply(grounded_text(body))) as fake:
        timed_ask(whole_tenant(tenant), openai(fake), Budgets(), strategy="pipeline", question=MULTI)
    caps = {task_of(r): r["max_tokens"] for r in fake.requests}
    assert caps["rewrite"] == 256 and caps["judge"] == 512 and caps["answer"] == Budgets().max_output_tokens, caps


@pytest.mark.serial
@pytest.mark.parametrize("server", SERVERS)
def test_a_slow_provider_fails_the_call_within_the_budget_not_the_next_run(acme, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    budgets = Budgets(max_wall_seconds=2)
    grounded = lambda body: server.text(grounded_text(body))  # noqa: E731
    with server.fake([server.module.slow(8, server.text("too late"))], when_exhausted=grounded, single_slot=False) as fake:
        run, took = timed_ask(scope, server.provider(fake, timeout_s=120), budgets)
        assert took <= budgets.max_wall_seconds + SLACK_S and run.outcome == "failed", (took, run.outcome)
        after, took_after = timed_ask(scope, server.provider(fake), budgets)
        assert took_after < 2.0 and after.outcome == "answered", (took_after, after.error)


@pytest.mark.serial
def test_a_trickling_stream_is_abandoned_at_the_deadline(acme):
    tenant, _, _ = acme
    budgets = Budgets(max_wall_seconds=2)
    with FakeOpenAI([never_stops(interval=0.4)]) as fake:
        run, took = timed_ask(whole_tenant(tenant), openai(fake, timeout_s=120), budgets)
        assert took <= budgets.max_wall_seconds + SLACK_S and run.outcome == "failed"
        assert fake.idle_within(1.0)


@pytest.mark.serial
@pytest.mark.parametrize("server", SERVERS)
def test_a_closed_connection_is_retried_and_a_dead_server_fails_within_the_budget(acme, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with server.fake([server.module.close_connection()], when_exhausted=lambda body: server.text(grounded_text(body))) as fake:
        run, _ = timed_ask(scope, server.provider(fake), Budgets(max_wall_seconds=10))
        assert run.outcome == "answered", run.error
    budgets = Budgets(max_wall_seconds=3)
    with server.fake([], when_exhausted=server.module.close_connection()) as fake:
        run, took = timed_ask(scope, server.provider(fake, backoff_s=0.5), budgets)
        assert run.outcome == "failed" and took <= budgets.max_wall_seconds + SLACK_S
        with activate(scope):
            assert any(s.error for s in run_steps(scope, run.id))


@pytest.mark.serial
def test_gemini_that_never_stops_is_cut_at_the_wall_budget_and_the_next_run_is_not_delayed(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    budgets = Budgets(max_wall_seconds=3)
    with fg.FakeGemini([fg.never_stops()], when_exhausted=lambda body: fg.text(grounded_text(body)), single_slot=True) as fake:
        run, took = timed_ask(scope, gemini(fake), budgets)
        assert took <= budgets.max_wall_seconds + SLACK_S and run.outcome == "failed", (took, run.outcome, run.error)
        assert fake.requests[0]["generationConfig"]["maxOutputTokens"] <= budgets.max_output_tokens
        assert fake.idle_within(1.0) and fake.abandoned == 1
        after, took_after = timed_ask(scope, gemini(fake), budgets)
        assert took_after < 2.0 and after.outcome == "answered", (took_after, after.error)


# --- 2. The whole reply is read: finish_reason ----------------------------------------------------

def model_steps(scope, run, name: str | None = None):
    with activate(scope):
        return [s for s in run_steps(scope, run.id) if s.kind == "model_call" and (name is None or s.name == name)]


def test_a_reply_cut_off_twice_is_stored_as_truncated_never_as_a_complete_answer(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    cut = lambda body: reply(grounded_text(body), finish="length")  # noqa: E731 - a complete-looking, cited, cut-off reply
    with FakeOpenAI([cut, cut]) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="classic", provider=openai(fake), budgets=Budgets())
    assert run.outcome == "truncated" and not run.grounded, run.outcome
    answers = model_steps(scope, run, "answer")
    assert len(answers) == 2 and all(s.error.startswith("truncated") for s in answers)
    assert answers[1].arguments["retry_of_truncated"] is True and "cut off at the length limit" in prompt_text(fake.requests[1])


def test_a_reply_cut_off_once_is_retried_with_a_tighter_request(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with FakeOpenAI([reply("Hotel stays are reimbursed up to", finish="length")],
                    when_exhausted=lambda body: reply(grounded_text(body))) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="classic", provider=openai(fake), budgets=Budgets())
    assert run.outcome == "answered" and run.grounded and "reimbursed up to EUR 180" in run.answer
    assert [s.arguments.get("finish_reason") for s in model_steps(scope, run)] == ["length", "stop"]


def test_a_cut_off_verdict_is_no_verdict(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)

    def script(body: dict):
        text = prompt_text(body)
        if "Reply with JSON only" in text and "sufficient" in text:
            return reply('{"sufficient": true, "why": "the sources state the hotel limit and', finish="length")
        if '"queries"' in text:
            return reply('{"queries": ["hotel limit"]}')
        return reply(grounded_text(body))

    with FakeOpenAI([], when_exhausted=script) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="pipeline", provider=openai(fake), budgets=Budgets())
    judges = model_steps(scope, run, "judge")
    # One judgement, retried once; a verdict that is no verdict asks for nothing new, so research ends there.
    assert len(judges) == 2 and all(s.error.startswith("truncated") for s in judges)
    assert run.outcome == "answered"  # the answer itself was complete


def test_gemini_max_tokens_is_honoured(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    cut = lambda body: fg.cut_off(fg.text(grounded_text(body)))  # noqa: E731
    with fg.FakeGemini([cut, cut]) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="classic", provider=gemini(fake), budgets=Budgets())
    assert run.outcome == "truncated" and not run.grounded
    with fg.FakeGemini([cut], when_exhausted=lambda body: fg.text(grounded_text(body))) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="classic", provider=gemini(fake), budgets=Budgets())
    assert run.outcome == "answered" and run.grounded
    assert [s.arguments.get("finish_reason") for s in model_steps(scope, run)] == ["length", "stop"]


# --- 3. Outcomes that say what happened -----------------------------------------------------------

@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("strategy", ["classic", "agentic", "pipeline", "auto"])
def test_an_echoing_model_never_yields_answered(acme, strategy, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    for question in (QUESTION, "What is the CEO's salary?"):
        with server.fake([], when_exhausted=server.module.echo, drop_system=True, ignore_tools=True) as fake:
            run = ask(scope=scope, question=question, strategy=strategy, provider=server.provider(fake), budgets=Budgets())
        assert run.outcome in {"unverified", "not_enough_evidence"} and not run.grounded, (strategy, run.outcome, run.answer[:200])
        with server.fake([], when_exhausted=server.module.echo, drop_system=True, ignore_tools=True) as fake:
            run = ask(scope=scope, question=question, strategy=strategy, provider=server.provider(fake),
                      budgets=Budgets(strict_citations=True))
        assert run.outcome in {"withheld", "not_enough_evidence"} and not run.grounded
        if run.outcome == "withheld":
            assert run.answer == WITHHELD


def test_a_cited_but_unverifiable_answer_is_unverified_and_marked_in_the_api_and_stream(acme, settings, monkeypatch):
    from rest_framework.test import APIClient

    from api.views import agents as agent_views
    from tenants.models import ApiKey

    tenant, _, chunks = acme
    _, key = ApiKey.issue(tenant=tenant, name="reader", role="reader", all_departments=True, departments=None)
    invented = reply(f'"Hotel stays are reimbursed up to EUR 400 per night." [c:{chunks["travel1"].id}]')
    with FakeOpenAI([], when_exhausted=invented) as fake:
        settings.DEFAULT_ANSWER_PROVIDER, settings.OPENAI_COMPAT_BASE_URL, settings.OPENAI_COMPAT_MODEL = "openai", fake.base_url, "tiny"
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        data = client.post("/api/v1/ask/", {"question": QUESTION, "strategy": "classic"}, format="json").json()
        assert data["outcome"] == "unverified" and data["grounded"] is False and "EUR 400" in data["answer"]
        assert [c["verdict"] for c in data["citations"]] == ["quote_mismatch"]
        monkeypatch.setattr(agent_views, "start_background", lambda target: target())  # inline: the test's data is uncommitted
        r = client.post("/api/v1/ask/stream/", {"question": QUESTION, "strategy": "classic"}, format="json")
        events = [block for block in b"".join(r.streaming_content).decode().split("\n\n") if block.startswith("event: answer")]
        assert events and '"outcome": "unverified"' in events[0] and '"grounded": false' in events[0]


# --- 4. Tools ignored, system message dropped, malformed tool calls -------------------------------

def obeying(server: Server) -> Callable[[dict], dict]:
    """A model that does what it is shown: obeys a system code word, calls a declared tool when asked,
    returns asked-for JSON, searches when it has a search tool, answers from shown or returned chunks."""
    def model(body: dict) -> dict:
        seen = server.shown(body)
        if "reply with exactly this word" in seen.system:
            return server.text(seen.system.rsplit(": ", 1)[-1])
        if "get_time" in seen.tools:
            return server.call("get_time", {"city": "Paris"})
        if "JSON object" in seen.last_user:
            return server.text('{"ok": true, "n": 3}')
        if "search" in seen.tools and not seen.tools_off and not seen.results:
            return server.call("search", {"query": QUESTION})
        hits = [r for res in seen.results for r in res.get("results", [])]
        if hits:
            return server.text(f'"{hits[0]["text"].split(". ")[0].rstrip(".")}." [c:{hits[0]["chunk_id"]}]')
        return server.text(grounded_text(body))
    return model


obedient = obeying(OPENAI)


def search_steps(scope, run):
    with activate(scope):
        return [s for s in run_steps(scope, run.id) if s.kind == "tool_call" and s.name == "search" and not s.error]


@pytest.mark.serial
@pytest.mark.parametrize("server", SERVERS)
def test_the_probe_finds_what_a_server_drops(acme, server):
    for drop_system, ignore_tools in [(False, False), (True, False), (False, True), (True, True)]:
        with server.fake([], when_exhausted=obeying(server), drop_system=drop_system, ignore_tools=ignore_tools) as fake:
            found = probe(server.provider(fake))
            assert (found.system, found.tools, found.json) == (not drop_system, not ignore_tools, True), (drop_system, ignore_tools)
            assert not found.error and known_capabilities(server.provider(fake)) == found
    with server.fake([], when_exhausted=server.module.close_connection()) as fake:
        found = probe(server.provider(fake, max_attempts=1), timeout_s=2)
    assert (found.system, found.tools, found.json) == (None, None, None) and "RemoteProtocolError" in found.error


@pytest.mark.serial
def test_a_server_slow_to_read_prompts_gets_a_context_it_can_read_in_time_and_is_idle_when_the_run_ends(acme):
    """A call abandoned while the server still reads its prompt leaves it busy (it writes nothing, so it
    cannot notice the closed connection): the probe measures the reading speed, the run sizes its
    context to it, and the server is idle within a second of the run ending."""
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    budgets = Budgets(max_wall_seconds=4)
    with FakeOpenAI([], when_exhausted=obedient, read_chars_per_s=1_500) as fake:
        found = probe(openai(fake))
        assert 250 <= found.prompt_tokens_per_s <= 375, found  # 375 tokens/s, measured a little slow
        for strategy in ("classic", "pipeline"):
            probed = len(fake.requests)
            run, took = timed_ask(scope, openai(fake), budgets, strategy)
            ended = time.monotonic()
            sizes = [len(prompt_text(b)) for b in fake.requests[probed:]]
            assert max(sizes) * 1.0 / 1_500 < budgets.max_wall_seconds, sizes  # each prompt readable within the budget
            assert took <= budgets.max_wall_seconds + SLACK_S, (strategy, took)
            assert fake.idle_within(1.0) and fake.last_idle - ended < 1.0, strategy
            assert run.outcome != "answered" or run.grounded
            assert run.outcome == "answered" or "not sent" in run.error, (strategy, run.error)
            assert fake.read_for_nobody == 0, strategy  # no prompt was left being read after its run gave up on it


@pytest.mark.serial
def test_a_prompt_the_server_could_not_read_before_the_deadline_is_not_sent(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with FakeOpenAI([], when_exhausted=obedient, read_chars_per_s=4_000) as fake:
        provider = openai(fake)
        found = probe(provider)
        cache.set(provider_key(provider), {**found.as_dict(), "prompt_tokens_per_s": 10.0})  # measured very slow
        sent = len(fake.requests)
        run, took = timed_ask(scope, provider, Budgets(max_wall_seconds=3), "classic")
    with activate(scope):
        errors = [s.error for s in run_steps(scope, run.id) if s.kind == "model_call"]
    assert len(fake.requests) == sent  # nothing the server would still be reading after the run
    assert run.outcome == "failed" and took <= 3 + SLACK_S, (run.outcome, took)
    assert errors and all("tokens/s" in e and "not sent" in e for e in errors), errors


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("strategy", ["agentic", "auto"])
def test_a_provider_found_to_ignore_tools_never_runs_the_agentic_strategy(acme, strategy, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with server.fake([], when_exhausted=obeying(server), drop_system=True, ignore_tools=True) as fake:
        assert probe(server.provider(fake)).tools is False
        run = ask(scope=scope, question=MULTI, strategy=strategy, provider=server.provider(fake), budgets=Budgets())
    assert run.strategy == "pipeline" and search_steps(scope, run), run.strategy
    assert run.outcome != "answered" or run.grounded


@pytest.mark.parametrize("server", SERVERS)
def test_a_model_that_answers_without_searching_is_corrected_once_then_answered_from_evidence(acme, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with server.fake([], when_exhausted=obeying(server), ignore_tools=True) as fake:  # not probed: found out during the run
        run = ask(scope=scope, question=MULTI, strategy="agentic", provider=server.provider(fake), budgets=Budgets())
    agent_requests = [r for r in fake.requests if r.get("tools")]
    assert sum("You answered without searching" in prompt_text(r) for r in agent_requests) == 1  # one corrective turn
    assert search_steps(scope, run), "an answer with zero searches"
    assert run.outcome == "answered" and run.grounded, (run.outcome, run.answer)


def test_malformed_tool_call_json_is_reported_to_the_model_and_never_ends_in_a_search_free_answer(acme):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    bad = tool_calls(("search", '{"query": "hotel limit'))
    with FakeOpenAI([bad], when_exhausted=obedient) as fake:
        run = ask(scope=scope, question=QUESTION, strategy="agentic", provider=openai(fake), budgets=Budgets())
    with activate(scope):
        steps = run_steps(scope, run.id)
    assert "could not parse the arguments" in steps[1].error and run.outcome == "answered" and run.grounded
    with FakeOpenAI([], when_exhausted=bad) as fake:  # never a valid call: the iteration budget runs out
        run = ask(scope=scope, question=QUESTION, strategy="agentic", provider=openai(fake), budgets=Budgets(max_iterations=3))
    assert search_steps(scope, run) and run.outcome in {"unverified", "budget_exhausted", "not_enough_evidence"}
    assert run.outcome != "answered"


@pytest.mark.parametrize("server", SERVERS)
def test_a_model_that_never_sees_the_rules_gives_unverified_text_not_answers(acme, server):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    rambling = server.text("Hotels are generally reimbursed at a reasonable rate, usually per night, depending on the city.")
    with server.fake([], when_exhausted=rambling, drop_system=True, ignore_tools=True) as fake:
        for strategy in ("classic", "agentic", "pipeline", "auto"):
            run = ask(scope=scope, question=QUESTION, strategy=strategy, provider=server.provider(fake), budgets=Budgets())
            assert run.outcome == "unverified" and not run.grounded and search_steps(scope, run), (strategy, run.outcome)


# --- 5. No repeated work --------------------------------------------------------------------------

def test_an_identical_model_call_in_a_run_is_answered_from_the_runs_cache(acme):
    from agents.messages import UserMessage
    from agents.steps import RunState, call_model
    from agents.tools import ToolDeps

    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    with FakeOpenAI([], when_exhausted=reply("I think the sources are probably fine.")) as fake:
        state = RunState(question=QUESTION, budgets=Budgets(), provider=openai(fake), deps=ToolDeps(scope=scope, budgets=Budgets()))
        first = call_model(state, "judge", [UserMessage("Is it sufficient?")], tools_enabled=False)
        again = call_model(state, "judge", [UserMessage("Is it sufficient?")], tools_enabled=False)
    assert again.text == first.text and [s.cached for s in state.steps] == [False, True]
    assert len(fake.requests) == 1  # the server saw the call once
    assert state.steps[1].input_tokens == state.steps[1].output_tokens == 0


# --- 6. Capabilities in /healthz ------------------------------------------------------------------

def test_healthz_reports_each_configured_providers_probed_capabilities(acme, settings, client):
    with FakeOpenAI([], when_exhausted=obedient, drop_system=True, ignore_tools=True) as fake:
        settings.OPENAI_COMPAT_BASE_URL, settings.OPENAI_COMPAT_MODEL = fake.base_url, "tiny"
        first = client.get("/healthz").json()["providers"]
        assert first["offline"]["status"] == "declared" and first["openai"]["status"] in {"probing", "probed"}
        deadline = time.monotonic() + 10
        while (report := client.get("/healthz").json()["providers"])["openai"]["status"] == "probing":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        requests = len(fake.requests)
        again = client.get("/healthz").json()["providers"]
    assert report["openai"]["status"] == "probed" and (report["openai"]["system"], report["openai"]["tools"]) == (False, False)
    assert report["openai"]["json"] is True and again == report and requests == 4  # cached: probed once



def test_a_stale_probe_result_is_still_used_and_refreshed_in_the_background(acme, settings, client):
    """A provider found to ignore tools is not forgotten when its probe result ages: runs keep using it
    while /healthz probes again."""
    from agents.providers import CAPABILITIES_TTL_S

    with FakeOpenAI([], when_exhausted=obedient, drop_system=True, ignore_tools=True) as fake:
        settings.OPENAI_COMPAT_BASE_URL, settings.OPENAI_COMPAT_MODEL = fake.base_url, "tiny"
        provider = openai(fake)
        found = probe(provider)
        aged = {**found.as_dict(), "checked_at": found.checked_at - CAPABILITIES_TTL_S - 1}
        cache.set(provider_key(provider), aged, 3600)
        assert known_capabilities(provider).tools is False  # still known
        sent = len(fake.requests)
        client.get("/healthz")
        deadline = time.monotonic() + 10
        while known_capabilities(provider).checked_at == aged["checked_at"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert len(fake.requests) - sent == 4 and known_capabilities(provider).tools is False
