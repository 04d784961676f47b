"""`ask`: the one service the API and management commands call to answer a question.

The loop runs without holding a transaction (model calls can take seconds); its trace is kept in
memory and streamed to `on_step`. At the end the run, every step and every citation are written
in ONE transaction, chained to the tenant's previous run under an advisory lock: an answer never
exists without its trace, and a failed run is stored as failed with the steps it got through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents import answer_cache
from agents.budgets import Budgets, spend_daily_run
from agents.chain import GENESIS, allocate_ids, clean_json, lock_chain, run_hash
from agents.citations import CitationCheck
from agents.citations import keep as keep_evidence
from agents.judge import open_parts
from agents.loop import STRATEGIES, LoopResult, RunState, StepRecord, run_strategy
from agents.models import Citation, Conversation, Outcome, Run, RunStep
from agents.prompts import PROMPT_VERSION
from agents.providers import Provider, get_provider, known_capabilities
from agents.steps import RunStopped
from agents.streaming import TextSink
from agents.sufficiency import seen_chunk
from agents.tools import ToolDeps
from kb.access import visible_corpora
from tenants.replicas import note_write
from tenants.scope import Scope, activate
from tenants.tenant_settings import for_tenant

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 4_000
WITHHELD = ("The answer is withheld: it is not grounded (no citation, or one that could not be verified against the sources "
            "retrieved for it, or it was cut off) and strict citation mode is on. The draft and the verdicts are in the run's "
            "audit trail.")


class RunNotRecorded(Exception):
    """The run could not be written (database failure): no answer may be given out without its record."""


class InvalidQuestion(ValueError):
    """The question or strategy cannot be run (empty, too long, unknown strategy, a corpus not the
    caller's). `field`, when set, names the input at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def ask(*, scope: Scope, question: str, strategy: str = "auto", provider: Provider | str | None = None,
        on_step: Callable[[StepRecord], Any] | None = None, budgets: Budgets | None = None,
        runner: Callable[[RunState, str], LoopResult] = run_strategy, conversation_id: int | None = None,
        spend_budget: bool = True, on_text: TextSink | None = None, corpus_ids: Iterable[int] | None = None,
        should_stop: Callable[[], bool] | None = None, use_cache: bool = True) -> Run:
    """Answer `question` within `scope` and return the stored Run (outcome, answer, grounded).

    `corpus_ids` narrows the question to those of the caller's corpora (check_corpora: InvalidQuestion
    for an id the caller does not see, before anything is counted); every search and read of the run
    stays within them (agents.tools.ToolDeps.corpus_ids) and its searches record them.

    The run is first counted against the tenant's daily run budget (agents.budgets.spend_daily_run;
    a question refused as invalid is not): agents.budgets.BudgetExceeded once it is used up,
    tenants.counters.CounterUnavailable when nothing can count it, both before any work.
    `spend_budget=False` only when the caller counted this run itself (an edge that must refuse
    before it answers, such as a stream's, or a conversation turn, agents.conversations).

    `runner` replaces the strategy runner (a conversation turn first makes its follow-up standalone,
    agents.conversations); with `conversation_id` the run is that conversation's next turn, `question`
    kept as its `message` and the runner's final `state.question` as its question.

    `on_step(step)` is called after every model and tool call, as it happens (for SSE); its
    exceptions are logged and ignored. `on_text(delta, reset)` receives the answer's text as it is
    written (agents.streaming: a draft; the stored answer is what counts), except under strict
    citations, where no text leaves before it is verified. Once `should_stop()` is true (the asker
    closed its stream) the run stops after the step in progress and is stored as failed, its error
    "RunStopped: ..." (agents.steps.RunStopped). Provider failures do not raise: the run is stored with
    outcome "failed", its error and its partial trace. Read steps and citations inside
    `activate(scope)`: run.steps.all(), run.citations.all(). If the run cannot be stored, RunNotRecorded:
    an answer is never handed out without its record.

    The answer cache (agents.answer_cache): a question run by the standard runner (not a conversation's
    follow-up, whose runner reads its thread) first looks for the answer of an earlier run in the same
    circumstances; a hit is stored as a run of its own (one "answer_cache" step, the reused run's
    citations re-verified, `cached_from_*` naming that run). `use_cache=False` neither reads nor fills
    the cache; a failure of the cache itself (Redis down included) only means no cache.
    """
    question = check_question(question, strategy)
    chosen = check_corpora(scope, corpus_ids)
    if spend_budget or budgets is None:
        stored = for_tenant(scope.tenant_id)  # read once, for the daily budget and the run's budgets
        if spend_budget:
            spend_daily_run(scope.tenant_id, stored)
        budgets = budgets or stored.budgets
    model = provider if provider is not None and not isinstance(provider, str) else get_provider(provider)
    found = known_capabilities(model)  # cached probe results only: a run never probes
    state = RunState(question=question, budgets=budgets, provider=model, deps=ToolDeps(scope=scope, budgets=budgets, corpus_ids=chosen),
                     on_step=on_step,
                     tools_ok=found is None or found.tools is not False,
                     prompt_tokens_per_s=found.prompt_tokens_per_s if found is not None else None,
                     on_text=None if budgets.strict_citations else on_text, should_stop=should_stop)
    created_at, started = timezone.now(), time.perf_counter()
    result: LoopResult | None = None
    error = ""
    # Only the standard runner: a conversation's follow-up (agents.conversations.turn_runner) depends on its thread.
    key, hit = _cached(scope, question, strategy, model, budgets, chosen) if use_cache and runner is run_strategy else (None, None)
    try:
        result = answer_cache.serve(state, hit, (time.perf_counter() - started) * 1000) if hit else runner(state, strategy)
    except RunStopped as exc:  # the asker went away: stored as failed, saying so (no stack trace: nothing broke)
        log.info("run stopped by its asker for tenant %s", scope.tenant_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    except Exception as exc:
        log.exception("run failed for tenant %s", scope.tenant_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        run = record_run(scope=scope, state=state, result=result, error=error, strategy_requested=strategy,
                         created_at=created_at, latency_ms=(time.perf_counter() - started) * 1000,
                         conversation_id=conversation_id, message=question,
                         reused=hit.run if hit and result is not None else None)
    except Exception as exc:  # the database failed: nothing of this run is stored, and the caller must say so
        log.exception("run could not be recorded for tenant %s", scope.tenant_id)
        raise RunNotRecorded(f"the run was not recorded ({type(exc).__name__}); its answer is not given out") from exc
    if key is not None and hit is None:
        answer_cache.remember(key, run)
    return run


def _cached(scope: Scope, question: str, strategy: str, provider: Provider, budgets: Budgets,
            corpus_ids: tuple[int, ...] | None) -> tuple[answer_cache.AnswerKey | None, answer_cache.CachedAnswer | None]:
    """The question's answer-cache key and, on a hit, the answer to reuse. A failure of the cache itself is
    logged and the question runs uncached: the cache never stands between a caller and an answer."""
    try:
        return answer_cache.lookup(scope=scope, question=question, strategy=strategy, provider=provider, budgets=budgets,
                                   corpus_ids=corpus_ids)
    except Exception:
        log.exception("answer cache lookup failed for tenant %s; answering uncached", scope.tenant_id)
        return None, None


def check_question(question: str, strategy: str) -> str:
    """The cleaned question, or InvalidQuestion (empty, too long, unknown strategy)."""
    question = (question or "").replace("\x00", "").strip()
    if not question:
        raise InvalidQuestion("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidQuestion(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    if strategy not in STRATEGIES:
        raise InvalidQuestion(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return question


def check_corpora(scope: Scope, corpus_ids: Iterable[int] | None) -> tuple[int, ...] | None:
    """The chosen corpora, each one the caller sees (kb.access.visible_corpora), in the order given;
    None when none were chosen (every corpus of the scope). InvalidQuestion on `corpus_ids` for an
    empty choice or an id the caller does not see, worded alike for a missing id and another
    tenant's or department's, so nothing is revealed."""
    if corpus_ids is None:
        return None
    ids = tuple(dict.fromkeys(int(c) for c in corpus_ids))
    if not ids:
        raise InvalidQuestion("choose at least one corpus, or leave the choice out for all of yours", field="corpus_ids")
    with activate(scope):
        seen = set(visible_corpora(scope).filter(pk__in=ids).values_list("pk", flat=True))
    if unseen := [c for c in ids if c not in seen]:
        raise InvalidQuestion(f"no corpus {', '.join(map(str, unseen))} among the ones you can ask", field="corpus_ids")
    return ids


def record_run(*, scope: Scope, state: RunState, result: LoopResult | None, error: str, strategy_requested: str,
               created_at: datetime, latency_ms: float, conversation_id: int | None = None, message: str = "",
               reused: Run | None = None) -> Run:
    """Write the run, its steps and citations in one transaction and append it to the tenant's chain.

    With `conversation_id`, the run is the conversation's next turn (numbered under the chain's lock)
    and `message` what the caller typed. With `reused`, the run was served from the answer cache: that
    run's `missing` is kept and its id and hash are recorded (`cached_from_run_id`, `cached_from_hash`)."""
    budgets = state.budgets
    outcome: str
    if result is None:
        answer, outcome, grounded, checks = "", Outcome.FAILED, False, []
    else:
        answer, outcome, checks, grounded = result.answer, result.outcome, result.citations, result.grounded
        if budgets.strict_citations and outcome in (Outcome.UNVERIFIED, Outcome.TRUNCATED):
            answer, outcome = WITHHELD, Outcome.WITHHELD
    # Read as the answer read them: with their documents' titles (a paragraph's "It" is its title).
    seen = [seen_chunk(c) for c in state.retrieved.values()]
    missing = reused.missing if reused is not None else open_parts(state.question, seen) if outcome != Outcome.FAILED else []
    with activate(scope):
        lock_chain(scope.tenant_id)
        last = Run.objects.for_scope(scope).order_by("-seq").values_list("seq", "hash").first()
        run_id = allocate_ids(Run, 1)[0]
        step_ids = allocate_ids(RunStep, len(state.steps))
        citation_ids = allocate_ids(Citation, len(checks))
        turn = next_turn(scope, conversation_id) if conversation_id is not None else None
        run = Run(
            id=run_id, tenant_id=scope.tenant_id, seq=(last[0] + 1) if last else 1, principal=scope.principal[:200],
            scope=clean_json(scope.as_dict()), question=clean_json(state.question), strategy_requested=strategy_requested,
            strategy=state.strategy or strategy_requested, provider=state.provider.name[:32], model=state.provider.model[:100],
            prompt_version=PROMPT_VERSION, budgets=clean_json(budgets.as_dict()), answer=clean_json(answer), outcome=str(outcome),
            grounded=grounded, strict=budgets.strict_citations, missing=clean_json(missing), error=clean_json(error),
            input_tokens=state.input_tokens, output_tokens=state.output_tokens, tool_calls=state.tool_calls,
            latency_ms=round(latency_ms, 3), created_at=created_at, prev_hash=last[1] if last else GENESIS, hash="",
            conversation_id=conversation_id, turn=turn, message=clean_json(message) if conversation_id is not None else "",
            cached_from_run_id=reused.pk if reused is not None else None, cached_from_hash=reused.hash if reused is not None else "")
        steps = [_step_row(pk, scope.tenant_id, run_id, s) for pk, s in zip(step_ids, state.steps, strict=True)]
        citations = [_citation_row(pk, scope.tenant_id, run_id, c) for pk, c in zip(citation_ids, checks, strict=True)]
        run.hash = run_hash(run, steps, citations)
        Run.objects.bulk_create([run])
        RunStep.objects.bulk_create(steps)
        Citation.objects.bulk_create(citations)
        keep_evidence(scope, state.retrieved.values(), created_at)
    note_write(scope)  # the asker's next reads see this run, on the primary until a replica has replayed it
    run._state.adding = False
    return run


def next_turn(scope: Scope, conversation_id: int) -> int:
    """The conversation's next turn number, counted as it is taken (inside the chain's lock)."""
    conversations = Conversation.objects.for_scope(scope).filter(pk=conversation_id)
    last = conversations.values_list("turns", flat=True).first()
    if last is None:
        raise InvalidQuestion("the conversation is not visible")
    conversations.update(turns=last + 1, updated_at=timezone.now())
    return last + 1


def _step_row(pk: int, tenant_id: int, run_id: int, s: StepRecord) -> RunStep:
    return RunStep(id=pk, tenant_id=tenant_id, run_id=run_id, ordinal=s.ordinal, kind=s.kind, name=s.name[:64],
                   arguments=clean_json(s.arguments), effective_filter=clean_json(s.effective_filter), chunk_ids=clean_json(s.chunk_ids),
                   content_hashes=clean_json(s.content_hashes), output=clean_json(s.output), cached=s.cached, error=clean_json(s.error),
                   latency_ms=round(s.latency_ms, 3), input_tokens=s.input_tokens, output_tokens=s.output_tokens,
                   model_input=clean_json(s.model_input))


def _citation_row(pk: int, tenant_id: int, run_id: int, c: CitationCheck) -> Citation:
    return Citation(id=pk, tenant_id=tenant_id, run_id=run_id, ordinal=c.ordinal, chunk_id=c.chunk_id, document_id=c.document_id,
                    content_hash=c.content_hash, quoted_text=clean_json(c.quoted_text), claim=clean_json(c.claim), verdict=c.verdict,
                    reason=c.reason)
