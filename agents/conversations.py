"""Conversations: a principal's threads of questions, each turn a Run in the tenant's hash chain.

A turn is answered like any question (agents.services.ask), with one step first: the follow-up is
made standalone against the thread (a traced `followup` model call: "and for Lisbon?" becomes the
previous question about Lisbon), and the reply says whether it needs a new search. One that does
not (a request for a shorter or clearer answer) is answered from the evidence the last turn used,
re-read under the caller's scope as it is now (a `thread_evidence` step); if none of it is visible
any more, or it does not answer, the turn searches as usual.

The scope is the caller's at each turn, never the one the thread started with: the API
authenticates every message (a revoked key stops the thread with 401), a conversation is found
only through its owner's scope (agents.access.access_conversation), and the thread's evidence is
read again through that scope. The history a turn sees is budgeted (Budgets.history_turns and
history_tokens, oldest turns dropped first).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.access import access_conversation, check_may_ask, visible_conversations
from agents.budgets import Budgets, budgets_for_tenant, spend_daily_run
from agents.citations import RetrievedChunk, is_not_enough_evidence
from agents.loop import LoopResult, RunState, StepRecord, answer_context, finish_run, parse_json_object, run_strategy
from agents.messages import UserMessage
from agents.models import Citation, Conversation, Outcome, Run, RunStep
from agents.prompts import followup_prompt, thread_answer_prompt
from agents.providers import Provider
from agents.selectors import CHUNK_FIELDS
from agents.services import MAX_QUESTION_CHARS, InvalidQuestion, ask, check_corpora, check_question
from agents.steps import call_model
from agents.streaming import TextSink
from kb.access import visible_chunks
from tenants.scope import Scope, activate

TITLE_CHARS = 80
ANSWER_CHARS = 1_200  # an earlier answer as shown to the follow-up call, at most
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Thread:
    """What a new turn knows of its conversation: earlier turns within the history budget and the
    chunks the last answered turn used (cited ones first)."""

    conversation_id: int
    history: tuple[tuple[str, str], ...]  # (standalone question, answer), oldest first
    evidence: tuple[int, ...]


def start_conversation(*, scope: Scope, title: str = "") -> Conversation:
    """A new, empty conversation owned by the caller's principal. NotAllowed for roles that may not ask."""
    check_may_ask(scope)
    with activate(scope):
        return Conversation.objects.create(tenant_id=scope.tenant_id, principal=scope.principal[:200],
                                           title=_clean(title)[:200])


def hide_conversation(*, scope: Scope, conversation_id: object) -> None:
    """Delete a conversation for its owner: it disappears from their lists; its runs stay for audit.
    NotVisible for any id the caller does not own."""
    with activate(scope):
        conversation = access_conversation(scope, conversation_id)
        visible_conversations(scope).filter(pk=conversation.pk).update(hidden_at=timezone.now())


def rename_conversation(*, scope: Scope, conversation_id: object, title: str) -> Conversation:
    """Give one of the caller's conversations a new title (whitespace collapsed, at most 200
    characters; InvalidQuestion for an empty one). NotVisible for any id the caller does not own."""
    cleaned = _clean(title)[:200]
    if not cleaned:
        raise InvalidQuestion("the title is empty")
    with activate(scope):
        conversation = access_conversation(scope, conversation_id)
        visible_conversations(scope).filter(pk=conversation.pk).update(title=cleaned)  # a rename does not reorder the list
        conversation.refresh_from_db()
    return conversation


def find_conversations(scope: Scope, text: str = "") -> QuerySet:
    """The caller's own conversations (not the deleted ones), newest first; with `text`, those whose title
    or any turn's typed message or standalone question contains it (case-insensitive, wildcards taken
    literally). Inside activate(scope)."""
    found = visible_conversations(scope)
    text = _clean(text)
    if text:
        asked = (Run.objects.for_scope(scope).filter(principal=scope.principal, conversation_id__isnull=False)
                 .filter(Q(message__icontains=text) | Q(question__icontains=text)).values("conversation_id"))
        found = found.filter(Q(title__icontains=text) | Q(pk__in=asked))
    return found.order_by("-id")


def conversation_turns(scope: Scope, conversation: Conversation) -> list[Run]:
    """The conversation's runs in turn order. Inside activate(scope)."""
    return list(Run.objects.for_scope(scope).filter(conversation_id=conversation.pk).order_by("turn"))


def send_message(*, scope: Scope, conversation_id: object, message: str, strategy: str = "auto",
                 provider: Provider | str | None = None, on_step: Callable[[StepRecord], Any] | None = None,
                 budgets: Budgets | None = None, spend_budget: bool = True, on_text: TextSink | None = None,
                 corpus_ids: Iterable[int] | None = None, should_stop: Callable[[], bool] | None = None) -> Run:
    """Ask `message` as the conversation's next turn and return its stored Run (`on_text`,
    `should_stop` and `corpus_ids` as for agents.services.ask: the turn reads only the chosen corpora,
    the thread's earlier evidence included).

    NotVisible when the caller does not own the conversation (another tenant's, another principal's,
    a deleted one); NotAllowed for a role that may not ask; agents.services.InvalidQuestion for an
    empty or overlong message, an unknown strategy or a corpus the caller does not see. Then the turn is counted against the tenant's
    daily run budget like any run (`ask`; agents.budgets.BudgetExceeded, before the thread is read or
    titled; `spend_budget=False` when the caller counted it). Like `ask`, a provider failure is a
    stored failed run, not an exception."""
    check_may_ask(scope)
    budgets = budgets or budgets_for_tenant(scope.tenant_id)
    with activate(scope):
        conversation = access_conversation(scope, conversation_id)
    check_question(message, strategy)  # an invalid turn is refused before it is counted, as by ask
    chosen = check_corpora(scope, corpus_ids)
    if spend_budget:
        spend_daily_run(scope.tenant_id)
    with activate(scope):
        thread = load_thread(scope, conversation, budgets)
        if not conversation.title and message.strip():
            visible_conversations(scope).filter(pk=conversation.pk, title="").update(title=title_from(message))
    # A turn with nothing before it is a question like any other: the standard runner, and the answer cache with it.
    runner = turn_runner(thread) if thread.history or thread.evidence else run_strategy
    return ask(scope=scope, question=message, strategy=strategy, provider=provider, on_step=on_step, budgets=budgets,
               runner=runner, conversation_id=conversation.pk, spend_budget=False, on_text=on_text,
               corpus_ids=chosen, should_stop=should_stop)


def load_thread(scope: Scope, conversation: Conversation, budgets: Budgets) -> Thread:
    """The conversation's last turns within the history budget, and the last answered turn's chunks.
    Failed turns are left out. Inside activate(scope)."""
    runs = list(Run.objects.for_scope(scope).filter(conversation_id=conversation.pk).exclude(outcome=Outcome.FAILED)
                .order_by("-turn")[: budgets.history_turns])
    history = budget_history([(run.question, run.answer) for run in reversed(runs)], budgets)
    evidence: list[int] = []
    if runs:
        last = runs[0]
        cited = Citation.objects.for_scope(scope).filter(run_id=last.pk).order_by("ordinal").values_list("chunk_id", flat=True)
        shown = [cid for args in RunStep.objects.for_scope(scope).filter(run_id=last.pk, name="answer")
                 .values_list("arguments", flat=True) for cid in (args or {}).get("context_chunks", []) if isinstance(cid, int)]
        evidence = list(dict.fromkeys([*cited, *shown]))
    return Thread(conversation.pk, tuple(history), tuple(evidence))


def budget_history(turns: list[tuple[str, str]], budgets: Budgets) -> tuple[tuple[str, str], ...]:
    """(question, answer) turns, oldest first, cut to the history budget: at most `history_turns`,
    each answer to ANSWER_CHARS, and `history_tokens` in all, the oldest dropped first. Pure."""
    kept: list[tuple[str, str]] = []
    left = budgets.history_tokens * CHARS_PER_TOKEN
    for question, answer in reversed(turns[-budgets.history_turns:] if budgets.history_turns else []):
        answer = answer if len(answer) <= ANSWER_CHARS else answer[:ANSWER_CHARS] + " […]"
        size = len(question) + len(answer)
        if size > left:
            break
        left -= size
        kept.append((question, answer))
    return tuple(reversed(kept))


def turn_runner(thread: Thread) -> Callable[[RunState, str], LoopResult]:
    """The strategy runner of one turn: make the follow-up standalone, then answer it from the
    thread's evidence (when no new search is needed and that evidence answers) or as any question."""

    def run(state: RunState, strategy: str) -> LoopResult:
        message = state.question
        if thread.history:
            question, retrieve = standalone(state, thread, message)
            state.question = question
            if not retrieve and thread.evidence:
                ids = reread_evidence(state, thread.evidence)
                if ids:
                    result = finish_run(state, "thread", answer_from_thread(state, ids, message))
                    if result.outcome != Outcome.NOT_ENOUGH_EVIDENCE and not is_not_enough_evidence(result.answer):
                        return result
        return run_strategy(state, strategy)

    return run


def standalone(state: RunState, thread: Thread, message: str) -> tuple[str, bool]:
    """The traced `followup` call: (the standalone question, whether to search). An unreadable or
    cut-off reply leaves the message as it is, searched afresh."""
    turn = call_model(state, "followup", [UserMessage(followup_prompt(thread.history, message))], tools_enabled=False,
                      history=thread.history)
    data = {} if turn.truncated else parse_json_object(turn.text)
    question = data.get("question")
    question = _clean(question)[:MAX_QUESTION_CHARS] if isinstance(question, str) and question.strip() else message
    retrieve = data.get("retrieve")
    return question, retrieve if isinstance(retrieve, bool) else True


def reread_evidence(state: RunState, chunk_ids: tuple[int, ...]) -> list[int]:
    """The thread's chunks the caller can still see, read again under the run's scope and recorded
    as a `thread_evidence` step; their ids, in the thread's order."""
    scope = state.deps.scope
    wanted = list(chunk_ids)[: state.budgets.max_context_chunks]
    started = time.perf_counter()
    chosen = state.deps.corpus_ids  # the corpora chosen for this turn, if any: earlier evidence from others is not reused
    with activate(scope):
        rows = {r["id"]: r for r in visible_chunks(scope).filter(pk__in=wanted).values(*CHUNK_FIELDS)
                if chosen is None or r["corpus_id"] in chosen}
    found = [cid for cid in wanted if cid in rows]
    for cid in found:
        r = rows[cid]
        state.retrieved.setdefault(cid, RetrievedChunk(
            chunk_id=cid, document_id=r["document_id"], content_hash=r["content_hash"], text=r["text"], title=r["document__title"],
            locator=r["locator"], corpus_name=r["corpus__name"], flags=tuple(r["flags"] or ()), metadata=r["document__metadata"] or {}))
    state.record(StepRecord(
        ordinal=len(state.steps), kind="tool_call", name="thread_evidence", arguments={"chunk_ids": wanted},
        effective_filter={"scope": {k: v for k, v in scope.as_dict().items() if k != "principal"}}, chunk_ids=found,
        content_hashes=[rows[c]["content_hash"] for c in found],
        output=f"{len(found)} of {len(wanted)} chunk(s) of the conversation still visible",
        latency_ms=(time.perf_counter() - started) * 1000))
    return found


def answer_from_thread(state: RunState, chunk_ids: list[int], message: str) -> str:
    """An answer call over the thread's evidence, told what the follow-up asks for."""
    state.strategy = "thread"
    state.iterations += 1
    rendered, structured = answer_context(state, chunk_ids)
    turn = call_model(state, "answer", [UserMessage(thread_answer_prompt(state.question, message, rendered))],
                      tools_enabled=False, context=structured)
    return turn.text


def title_from(message: str, limit: int = TITLE_CHARS) -> str:
    """A conversation's title from its first message: whitespace collapsed, at most `limit` characters.
    A longer message is cut at the last word boundary that fits and ends with "…" (counted in the
    limit); a single word longer than the limit is cut inside it rather than dropped."""
    text = _clean(message)
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    if text[limit - 1] != " " and " " in head:  # the cut falls inside a word: drop that word
        head = head[: head.rindex(" ")]
    return (head.rstrip(" ,;:.-–—") or text[: limit - 1]) + "…"


def _clean(text: str) -> str:
    return " ".join((text or "").replace("\x00", "").split())
