"""Conversations below the API: follow-ups made standalone (pure rules, and as a traced step of the
run), evidence reused for a reformulation and re-read under the caller's scope as it is now, history
budgets, and every turn a Run in the tenant's hash chain."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agents.budgets import Budgets
from agents.chain import verify_tenant_chain
from agents.conversation_text import resolve_followup
from agents.conversations import TITLE_CHARS, hide_conversation, load_thread, send_message, start_conversation, title_from
from agents.messages import ModelRequest, ModelTurn, Usage
from agents.models import Conversation, Run
from agents.providers.offline import OfflineProvider
from agents.selectors import run_steps
from tenants.scope import NotVisible, Scope, activate
from tests.factories import dept_scope, whole_tenant

PARIS = ("How much is a hotel night in Paris?",
         'Extractive answer.\n\n1. How much is a hotel night in Paris:\n   - "Hotel stays in Paris are reimbursed up to EUR 180." [c:3] '
         "(Travel Policy)")
FILM = ("Who directed the film Blue Harbour?", '"Blue Harbour is a 1999 drama film directed by Jane Roe." [c:4] (Blue Harbour)')


@pytest.mark.parametrize(("message", "turn", "question", "retrieve"), [
    ("and for Lisbon?", PARIS, "How much is a hotel night in Lisbon?", True),
    ("What about Lisbon?", PARIS, "How much is a hotel night in Lisbon?", True),
    ("and in 2020?", ("What was the hotel limit in 2019?", "x"), "What was the hotel limit in 2020?", True),
    ("what about per week?", ("How much is the allowance per night?", "x"), "How much is the allowance per week?", True),
    ("and for Lisbon?", ("How much is a hotel night in capital cities?", "x"),
     "How much is a hotel night in capital cities for Lisbon?", True),
    ("shorter please", PARIS, PARIS[0], False),
    ("Can you explain that more simply?", PARIS, PARIS[0], False),
    ("When was she born?", FILM, "When was Jane Roe born?", True),
    ("what is her nationality?", FILM, "what is Jane Roe's nationality?", True),
    ("When was it released?", FILM, "When was Blue Harbour released?", True),
    ("How many days of annual leave are there?", PARIS, "How many days of annual leave are there?", True),
])
def test_a_follow_up_is_made_standalone_from_the_last_turn(message, turn, question, retrieve):
    resolved = resolve_followup(message, [("An older question about Rome?", "Old answer."), turn])
    assert (resolved.question, resolved.retrieve) == (question, retrieve)


def test_a_first_message_is_left_as_it_is():
    assert resolve_followup("  When was she born? ", []).question == "When was she born?"


def test_a_title_is_cut_at_a_word_boundary_with_an_ellipsis():
    assert title_from("  What is the   per diem\nfor Lisbon? ") == "What is the per diem for Lisbon?"
    long = "What is the per diem for business trips to Lisbon and Porto, and who approves the hotel bookings above it?"
    title = title_from(long)
    assert len(title) <= TITLE_CHARS and title.endswith("…") and long.startswith(title[:-1])
    assert long[len(title) - 1] == " "  # the cut falls between words
    assert title_from("the per diem for travel", limit=15) == "the per diem…"
    assert title_from("the per diem, for travel", limit=15) == "the per diem…"  # no dangling comma
    assert title_from("x" * 100, limit=10) == "x" * 9 + "…"  # one overlong word is cut inside it
    assert title_from("exactly ten", limit=11) == "exactly ten"


def _names(scope: Scope, run: Run) -> list[str]:
    with activate(scope):
        return [s.name for s in run_steps(scope, run.id)]


def test_each_turn_is_a_run_in_the_chain_with_its_rewrite_in_the_trace(acme):
    tenant, _corpus, chunks = acme
    scope = whole_tenant(tenant)
    conversation = start_conversation(scope=scope)
    first = send_message(scope=scope, conversation_id=conversation.id, provider="offline",
                         message="What does the Travel and Expense Policy say about hotel stays?")
    second = send_message(scope=scope, conversation_id=conversation.id, provider="offline", message="and what does it say about flights?")
    third = send_message(scope=scope, conversation_id=conversation.id, provider="offline", message="shorter please")

    assert [(r.conversation_id, r.turn) for r in (first, second, third)] == [(conversation.id, n) for n in (1, 2, 3)]
    assert first.outcome == "answered" and "followup" not in _names(scope, first)
    # The follow-up: rewritten (the run's question), as typed (its message), the rewrite a traced step.
    assert second.message == "and what does it say about flights?"
    assert second.question == "and what does Travel and Expense Policy say about flights?"
    with activate(scope):
        followup = run_steps(scope, second.id)[0]
    assert followup.name == "followup" and json.loads(followup.output)["question"] == second.question
    assert f"[c:{chunks['travel0'].id}]" in second.answer
    # "shorter please": the last turn's question, answered from its evidence, no new search.
    assert third.question == second.question and third.strategy == "thread" and third.outcome == "answered"
    assert _names(scope, third) == ["followup", "thread_evidence", "answer"]
    assert f"[c:{chunks['travel0'].id}]" in third.answer

    with activate(scope):
        report = verify_tenant_chain(tenant.id, using="default")
        assert report.ok and report.runs_checked == 3
        assert Conversation.objects.for_scope(scope).get(pk=conversation.id).turns == 3
        assert Conversation.objects.for_scope(scope).get(pk=conversation.id).title.startswith("What does the Travel")


def test_reused_evidence_is_read_again_under_the_scope_of_this_turn(acme):
    """A thread started with Sales' view, continued by the same principal now limited to Engineering:
    the Sales chunk the first turn cited is not visible any more, so it is neither reused nor quoted
    (what is still visible does not answer, so the turn searches, within Engineering's view)."""
    tenant, _corpus, chunks = acme
    sales = dataclasses.replace(dept_scope(tenant, "Sales"), principal="user:77")
    engineering = dataclasses.replace(dept_scope(tenant, "Engineering"), principal="user:77")
    conversation = start_conversation(scope=sales)
    first = send_message(scope=sales, conversation_id=conversation.id, provider="offline",
                         message="What is the Sales commission rate for new accounts?")
    assert f"[c:{chunks['secret'].id}]" in first.answer
    later = send_message(scope=engineering, conversation_id=conversation.id, provider="offline", message="shorter please")
    with activate(engineering):
        steps = run_steps(engineering, later.id)
    evidence = next(s for s in steps if s.name == "thread_evidence")
    assert chunks["secret"].id in evidence.arguments["chunk_ids"] and chunks["secret"].id not in evidence.chunk_ids
    assert "7 percent" not in later.answer and later.strategy != "thread"


def test_only_the_owner_sees_and_continues_a_conversation(acme, globex):
    tenant, _corpus, _chunks = acme
    owner = dataclasses.replace(whole_tenant(tenant), principal="key:owner")
    conversation = start_conversation(scope=owner)
    other_principal = dataclasses.replace(owner, principal="key:someone-else")
    other_tenant = dataclasses.replace(whole_tenant(globex[0]), principal="key:owner")
    for scope in (other_principal, other_tenant):
        with pytest.raises(NotVisible):
            send_message(scope=scope, conversation_id=conversation.id, message="anything?", provider="offline")
        with pytest.raises(NotVisible):
            hide_conversation(scope=scope, conversation_id=conversation.id)
    hide_conversation(scope=owner, conversation_id=conversation.id)
    with pytest.raises(NotVisible):
        send_message(scope=owner, conversation_id=conversation.id, message="anything?", provider="offline")


def test_history_is_budgeted_by_turns_and_tokens(acme):
    tenant, _corpus, _chunks = acme
    scope = whole_tenant(tenant)
    conversation = start_conversation(scope=scope)
    for question in ("How many days of annual leave do employees receive?", "When is a doctor's note needed for sick leave?",
                     "How much is a hotel night in capital cities?"):
        send_message(scope=scope, conversation_id=conversation.id, message=question, provider="offline")
    with activate(scope):
        conversation = Conversation.objects.for_scope(scope).get(pk=conversation.id)
        assert len(load_thread(scope, conversation, Budgets()).history) == 3
        two = load_thread(scope, conversation, Budgets(history_turns=2)).history
        assert [q for q, _ in two] == ["When is a doctor's note needed for sick leave?", "How much is a hotel night in capital cities?"]
        assert load_thread(scope, conversation, Budgets(history_tokens=1)).history == ()
        assert load_thread(scope, conversation, Budgets()).evidence  # the last turn's chunks, for a reformulation


class ScriptedFollowups(OfflineProvider):
    """A model whose follow-up rewrites are scripted (the prompt's JSON, or not); every other task is the offline one's."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.prompts: list[str] = []

    def generate(self, request: ModelRequest) -> ModelTurn:
        if request.task != "followup":
            return super().generate(request)
        self.prompts.append(request.messages[0].text)
        return ModelTurn(text=self.replies.pop(0), usage=Usage(10, 10))


def test_a_models_rewrite_and_retrieval_decision_are_followed_and_a_bad_reply_is_not(acme):
    tenant, _corpus, chunks = acme
    scope = whole_tenant(tenant)
    model = ScriptedFollowups([
        '{"question": "How many days of annual leave do employees receive?", "retrieve": false}',
        "Sure! The user wants to know about sick leave.",
    ])
    conversation = start_conversation(scope=scope)
    send_message(scope=scope, conversation_id=conversation.id, provider=model,
                 message="How many days of annual leave do employees receive?")
    reused = send_message(scope=scope, conversation_id=conversation.id, provider=model, message="in one sentence please")
    assert reused.strategy == "thread" and f"[c:{chunks['leave1'].id}]" in reused.answer
    assert "Follow-up message: in one sentence please" in model.prompts[0] and "Turn 1. Question: How many days" in model.prompts[0]
    unreadable = send_message(scope=scope, conversation_id=conversation.id, provider=model,
                              message="When is a doctor's note needed for sick leave?")
    assert unreadable.question == "When is a doctor's note needed for sick leave?" and unreadable.strategy != "thread"
    assert f"[c:{chunks['leave2'].id}]" in unreadable.answer
