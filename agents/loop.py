"""The answer loop and its strategies. State lives in one dataclass; each step's outcome is a closed union.

    classic   one search, one generation
    agentic   the model drives the tools until it answers or a budget is spent
    pipeline  rewrite into sub-queries, fan out, merge, judge sufficiency, refine, synthesise
    auto      classic for single-fact questions; agentic for multi-part ones or when classic is not grounded
              (the pipeline instead of agentic with a provider whose probe found it ignores tools)

Every model call and tool call becomes a StepRecord, handed to `on_step` as it happens and stored
with the run by agents.services. Nothing here writes to the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.budgets import Budgets
from agents.citations import CitationCheck, RetrievedChunk, check_citations, is_not_enough_evidence
from agents.messages import (
    AssistantMessage,
    ContextChunk,
    Message,
    ModelRequest,
    ModelTurn,
    ProviderError,
    Task,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agents.planning import fuse
from agents.prompts import (
    answer_prompt,
    budget_note,
    fitting_chunks,
    judge_prompt,
    must_search_note,
    render_context,
    repair_prompt,
    rewrite_prompt,
    system_prompt,
    truncated_note,
)
from agents.providers import Provider
from agents.text import contained_share, shingles, split_question
from agents.tools import TOOL_SPECS, ToolDeps, ToolOutcome, run_tool

log = logging.getLogger(__name__)

Strategy = Literal["auto", "classic", "agentic", "pipeline"]
STRATEGIES: tuple[str, ...] = ("auto", "classic", "agentic", "pipeline")


@dataclass
class StepRecord:
    """One model call or tool call, as streamed to `on_step` and stored as a RunStep."""

    ordinal: int
    kind: Literal["model_call", "tool_call"]
    name: str
    arguments: dict = field(default_factory=dict)
    effective_filter: dict = field(default_factory=dict)
    chunk_ids: list[int] = field(default_factory=list)
    content_hashes: list[str] = field(default_factory=list)
    output: str = ""
    cached: bool = False
    error: str = ""
    latency_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- Step outcomes (closed union) -----------------------------------------------------------------

@dataclass(frozen=True)
class CallTools:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class FinalAnswer:
    text: str


@dataclass(frozen=True)
class BudgetSpent:
    reason: str


NextStep = CallTools | FinalAnswer | BudgetSpent


ANSWER_RESERVE = 0.25  # share of the wall budget kept for the final answer once research stops
MIN_OUTPUT_TOKENS = 64  # a reply's cap never goes below this, even when the token budget is spent


@dataclass
class RunState:
    """Everything one run knows. Mutated only by the step functions below."""

    question: str
    budgets: Budgets
    provider: Provider
    deps: ToolDeps
    on_step: Callable[[StepRecord], Any] | None = None
    strategy: str = ""
    messages: list[Message] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    tool_calls: int = 0
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    budget_reason: str = ""  # set when a budget forced the final answer
    missing: list[str] = field(default_factory=list)
    truncated: set[str] = field(default_factory=set)  # texts of replies cut off even after their retry: never complete
    tools_ok: bool = True  # False when the provider's capability probe found it ignores tool declarations
    fallback: str = ""  # why the strategy fell back to answering from code-retrieved evidence
    model_cache: dict[str, ModelTurn] = field(default_factory=dict)  # call_key -> reply: an identical call is not made twice

    @property
    def retrieved(self) -> dict[int, RetrievedChunk]:
        return self.deps.retrieved

    @property
    def deadline(self) -> float:
        """time.monotonic() by which every model call of the run is over (abandoned if still running)."""
        return self.started + self.budgets.max_wall_seconds

    def output_cap(self) -> int:
        """One reply's output-token cap: max_output_tokens, less when less of the run's token budget is left."""
        left = self.budgets.max_tokens - self.input_tokens - self.output_tokens
        return max(MIN_OUTPUT_TOKENS, min(self.budgets.max_output_tokens, left))

    def spent(self) -> str:
        """Why no more research may happen ('' while budgets remain)."""
        b = self.budgets
        if reason := self.spent_time_or_tokens():
            return reason
        if self.tool_calls >= b.max_tool_calls:
            return f"tool call budget of {b.max_tool_calls} reached"
        if self.iterations >= b.max_iterations:
            return f"iteration budget of {b.max_iterations} reached"
        return ""

    def spent_time_or_tokens(self) -> str:
        """The wall or token budget is spent. Research stops when ANSWER_RESERVE of the wall budget
        is left, so the final answer has time before the deadline."""
        b = self.budgets
        if time.monotonic() - self.started >= b.max_wall_seconds * (1 - ANSWER_RESERVE):
            return f"wall time of {b.max_wall_seconds:g}s reached"
        if self.input_tokens + self.output_tokens >= b.max_tokens:
            return f"token budget of {b.max_tokens} reached"
        return ""

    def record(self, step: StepRecord) -> None:
        self.steps.append(step)
        if self.on_step is not None:
            try:
                self.on_step(step)
            except Exception:  # a disconnected stream must not lose the run's trace
                log.warning("on_step callback failed", exc_info=True)


@dataclass(frozen=True)
class LoopResult:
    answer: str
    strategy: str
    outcome: str  # agents.models.Outcome values (see decide_outcome)
    citations: list[CitationCheck]
    budget_reason: str = ""

    @property
    def grounded(self) -> bool:
        return self.outcome in ("answered", "budget_exhausted")


# --- Model and tool steps -------------------------------------------------------------------------

def call_model(state: RunState, task: Task, messages: list[Message], *, tools_enabled: bool,
               context: tuple[ContextChunk, ...] = ()) -> ModelTurn:
    """One model call, traced. A reply the output cap cut off (finish_reason "length") is retried once
    with a note asking for a shorter reply; if that is cut off too, the turn is returned marked
    (`turn.truncated`, its text in state.truncated, its step's error says so) and never counts as complete."""
    turn = _call_once(state, task, messages, tools_enabled=tools_enabled, context=context)
    if not turn.truncated:
        return turn
    retry = [*messages, UserMessage(truncated_note(state.output_cap()))]
    turn = _call_once(state, task, retry, tools_enabled=tools_enabled, context=context, retry_of_truncated=True)
    if turn.truncated:
        state.truncated.add(turn.text)
    return turn


def _call_once(state: RunState, task: Task, messages: list[Message], *, tools_enabled: bool,
               context: tuple[ContextChunk, ...] = (), retry_of_truncated: bool = False) -> ModelTurn:
    conversational = task in ("agent", "repair")  # continues the tool conversation, so tools stay declared
    request = ModelRequest(task=task, system=system_prompt(with_tools=tools_enabled and task == "agent"),
                           messages=tuple(messages), tools=TOOL_SPECS if conversational else (), tools_enabled=tools_enabled,
                           question=state.question, context=context, deadline=state.deadline,
                           max_output_tokens=state.output_cap())
    started = time.perf_counter()
    step = StepRecord(ordinal=len(state.steps), kind="model_call", name=task,
                      arguments={"provider": state.provider.name, "model": state.provider.model, "tools_enabled": tools_enabled,
                                 "messages": len(messages), "context_chunks": [c.chunk_id for c in context],
                                 "max_output_tokens": request.max_output_tokens})
    if retry_of_truncated:
        step.arguments["retry_of_truncated"] = True
    key = call_key(request)
    turn = state.model_cache.get(key)
    if turn is not None:  # the same call earlier in this run: its reply, no tokens spent
        step.cached = True
    else:
        try:
            turn = state.provider.generate(request)
        except Exception as exc:
            step.error = f"{type(exc).__name__}: {exc}"[:2000]
            step.latency_ms = (time.perf_counter() - started) * 1000
            state.record(step)
            raise
        state.model_cache[key] = turn
        step.input_tokens, step.output_tokens = turn.usage.input_tokens, turn.usage.output_tokens
        state.input_tokens += turn.usage.input_tokens
        state.output_tokens += turn.usage.output_tokens
    step.latency_ms = (time.perf_counter() - started) * 1000
    step.output = turn.text
    if turn.finish_reason:
        step.arguments["finish_reason"] = turn.finish_reason
    if turn.truncated:
        step.error = f"truncated: the reply reached the output cap of {request.max_output_tokens} tokens"
    if turn.tool_calls:
        step.arguments["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls]
    state.record(step)
    return turn


def call_key(request: ModelRequest) -> str:
    """What makes two model calls identical: task, instructions, conversation and tools (not the output cap,
    which shrinks as the run spends tokens)."""
    def message(m: Message) -> list:
        if isinstance(m, UserMessage):
            return ["user", m.text]
        if isinstance(m, AssistantMessage):
            return ["assistant", m.text, [[c.id, c.name, c.arguments, c.arguments_error] for c in m.tool_calls]]
        return ["tool", m.call_id, m.name, m.content]

    payload = [request.task, request.system, [message(m) for m in request.messages], [t.name for t in request.tools],
               request.tools_enabled]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def call_tool(state: RunState, call: ToolCall) -> ToolOutcome:
    started = time.perf_counter()
    outcome = run_tool(state.deps, call)
    arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    state.record(StepRecord(
        ordinal=len(state.steps), kind="tool_call", name=call.name, arguments=arguments,
        effective_filter=outcome.effective_filter, chunk_ids=list(outcome.chunk_ids), content_hashes=list(outcome.content_hashes),
        output=_summary(outcome), cached=outcome.cached, error=outcome.error, latency_ms=(time.perf_counter() - started) * 1000))
    return outcome


def _summary(outcome: ToolOutcome) -> str:
    if outcome.error:
        return ""
    if "results" in outcome.content:
        results = outcome.content["results"]
        # Ingest-time injection flags go into the trace, so an auditor sees which shown chunks were suspect.
        flagged = [f"c:{r['chunk_id']} {','.join(r['flagged'])}" for r in results if isinstance(r, dict) and r.get("flagged")]
        rank = {cid: i for i, cid in enumerate(outcome.ranked_ids, start=1)}
        past = f"; past the output budget: {', '.join(f'c:{c.chunk_id} (#{rank.get(c.chunk_id)})' for c in outcome.overflow)}" \
            if outcome.overflow else ""
        return f"{len(results)} result(s)" + (" (cached)" if outcome.cached else "") + past + \
            (f"; flagged as possible instructions to the model: {'; '.join(flagged)}" if flagged else "")
    return json.dumps(outcome.content, default=str)[:1000]


def execute_calls(state: RunState, calls: tuple[ToolCall, ...]) -> None:
    """Run a turn's tool calls in order; calls beyond the tool budget get an error answer, never silence."""
    for call in calls:
        if state.tool_calls >= state.budgets.max_tool_calls:
            outcome = ToolOutcome.failed("tool call budget spent: answer with what you have")
            state.record(StepRecord(ordinal=len(state.steps), kind="tool_call", name=call.name,
                                    arguments=dict(call.arguments or {}), error=outcome.error))
        else:
            state.tool_calls += 1
            outcome = call_tool(state, call)
        state.messages.append(ToolResultMessage(call_id=call.id, name=call.name, content=outcome.content))


# --- Strategies -----------------------------------------------------------------------------------

def agent_step(state: RunState) -> NextStep:
    if reason := state.spent():
        return BudgetSpent(reason)
    state.iterations += 1
    turn = call_model(state, "agent", state.messages, tools_enabled=True)
    state.messages.append(AssistantMessage(text=turn.text, tool_calls=turn.tool_calls, raw=turn.raw))
    if turn.tool_calls:
        return CallTools(turn.tool_calls)
    return FinalAnswer(turn.text)


def run_agentic(state: RunState) -> str:
    """The model drives the tools. An answer given before any search succeeded gets one corrective
    turn; a second one is set aside and the run answers from evidence the code retrieves (answer_from_evidence)."""
    state.messages = [UserMessage(state.question)]
    corrected = False
    while True:
        match agent_step(state):
            case CallTools(calls):
                execute_calls(state, calls)
            case FinalAnswer(_) if not searched(state) and not corrected and not state.spent():
                corrected = True
                state.messages.append(UserMessage(must_search_note()))
            case FinalAnswer(_) if not searched(state):
                return answer_from_evidence(state, "the model answered without searching, even when told to search")
            case FinalAnswer(text) if text.strip():
                return repair_citations(state, text)
            case FinalAnswer(_):
                return repair_citations(state, final_without_tools(state, "the model returned an empty answer"))
            case BudgetSpent(reason):
                state.budget_reason = reason
                if not searched(state) and not state.spent_time_or_tokens():  # e.g. iterations spent on malformed calls
                    return answer_from_evidence(state, f"no search succeeded before the budget was spent ({reason})")
                return repair_citations(state, final_without_tools(state, reason))


def searched(state: RunState) -> bool:
    """A search or read call of this run succeeded (so the model has seen retrieved text)."""
    return any(s.kind == "tool_call" and s.name in ("search", "read") and not s.error for s in state.steps)


def answer_from_evidence(state: RunState, why: str) -> str:
    """The fallback when the model would not retrieve: the chunks already retrieved (e.g. by auto's
    classic attempt), else one search for the question made by the code, then an answer call over them."""
    state.fallback = why
    ids = [c.chunk_id for c in sorted(state.retrieved.values(), key=lambda c: -c.score)]
    if not ids and not state.spent_time_or_tokens():
        ids = code_search(state, state.question, state.budgets.max_context_chunks, "fallback")
    return synthesise(state, ids)


def repair_citations(state: RunState, answer: str) -> str:
    """One chance, tools off, to fix citations that failed verification; the fix is kept only if it verifies."""
    bad = [c for c in check_citations(answer, state.retrieved) if not c.verified]
    b = state.budgets
    if not bad or is_not_enough_evidence(answer) or state.input_tokens + state.output_tokens >= b.max_tokens \
            or time.monotonic() - state.started >= b.max_wall_seconds:
        return answer
    report = "; ".join(f"[c:{c.chunk_id}] {c.verdict} ({c.reason})" for c in bad[:10])
    state.messages.append(UserMessage(repair_prompt(report)))
    try:
        turn = call_model(state, "repair", state.messages, tools_enabled=False)
    except ProviderError:  # e.g. the deadline cut the repair: the draft stands (its verdicts say what failed)
        return answer
    state.messages.append(AssistantMessage(text=turn.text, raw=turn.raw))
    fixed = check_citations(turn.text, state.retrieved)
    if turn.text.strip() and not turn.truncated and (is_not_enough_evidence(turn.text) or (fixed and all(c.verified for c in fixed))):
        return turn.text
    return answer


def final_without_tools(state: RunState, reason: str) -> str:
    """Tools off (function calling mode NONE): the model must answer from what it has."""
    state.messages.append(UserMessage(budget_note(reason)))
    turn = call_model(state, "agent", state.messages, tools_enabled=False)
    state.messages.append(AssistantMessage(text=turn.text, raw=turn.raw))
    return turn.text or f"NOT_ENOUGH_EVIDENCE: no answer could be produced ({reason})."


def _context(state: RunState, chunk_ids: list[int]) -> tuple[str, tuple[ContextChunk, ...]]:
    """The context shown to an answer or judge call, rendered and as the chunk list recorded with the call.

    Both hold the same chunks: at most max_context_chunks, and no more than fit in context_chars,
    so the trace (and the evaluation reading it) never lists a chunk the model was not shown."""
    chunks = [state.retrieved[c] for c in chunk_ids if c in state.retrieved][: state.budgets.max_context_chunks]
    shown = fitting_chunks(chunks, max_chars_per_chunk=state.budgets.chunk_chars, max_total_chars=state.budgets.context_chars)
    rendered = render_context(shown, max_chars_per_chunk=state.budgets.chunk_chars, max_total_chars=state.budgets.context_chars)
    return rendered, tuple(ContextChunk(c.chunk_id, c.text, c.title, c.locator, c.score, c.flags, c.metadata) for c in shown)


def synthesise(state: RunState, chunk_ids: list[int], note: str = "") -> str:
    rendered, structured = _context(state, chunk_ids)
    turn = call_model(state, "answer", [UserMessage(answer_prompt(state.question, rendered, missing_note=note))],
                      tools_enabled=False, context=structured)
    return turn.text


def code_search(state: RunState, query: str, k: int, tag: str, filters: dict | None = None) -> list[int]:
    """A search the strategy itself decides on, traced exactly like a model's tool call."""
    if state.tool_calls >= state.budgets.max_tool_calls:
        return []
    state.tool_calls += 1
    outcome = call_tool(state, ToolCall(id=f"{tag}-{state.tool_calls}", name="search",
                                        arguments={"query": query, "k": k, **(filters or {})}))
    # The output budget limits what a model is shown; this strategy's context is built in code and
    # shown whole by its answer call, so hits past that budget are kept (registered as retrieved).
    for chunk in outcome.overflow:
        state.retrieved.setdefault(chunk.chunk_id, chunk)
    # In the search's order: a long hit past the budget keeps its rank above shorter ones shown after it.
    return list(outcome.ranked_ids) or [*outcome.chunk_ids, *(c.chunk_id for c in outcome.overflow)]


def code_facets(state: RunState) -> dict:
    """The metadata facets of the caller's scope, fetched by the strategy (traced like a tool call)."""
    if state.tool_calls >= state.budgets.max_tool_calls:
        return {}
    state.tool_calls += 1
    outcome = call_tool(state, ToolCall(id=f"facets-{state.tool_calls}", name="facets", arguments={}))
    return {} if outcome.error else dict(outcome.content)


def run_classic(state: RunState) -> str:
    ids = code_search(state, state.question, state.budgets.max_context_chunks, "classic")
    state.iterations += 1
    return synthesise(state, ids)


def run_pipeline(state: RunState) -> str:
    facets = code_facets(state)
    known_sources = set(facets.get("sources") or {})
    queries = rewrite(state, facets)
    searched: set[str] = set()
    narrowed: list[tuple[list[int], int]] = []  # (results, their share of the context)
    lists: list[list[int]] = []
    rounds = min(state.budgets.pipeline_rounds, state.budgets.max_iterations)
    for round_no in range(1, rounds + 1):
        state.iterations += 1
        # Narrowed sub-queries share the whole context (their results come first); the others a share each.
        n_narrowed = sum(1 for _, filters in queries if filters)
        k_narrowed = _share(state, n_narrowed)
        k = _share(state, len(queries))
        k_whole = min(state.budgets.max_k, state.budgets.max_context_chunks)
        for query, filters in queries:
            key = json.dumps([query, filters], sort_keys=True)
            if key in searched:
                continue  # a follow-up the judge asks for again: its results are in already
            searched.add(key)
            # A narrowed search asks for the whole context: its share comes first, the rest of its
            # list fills slots no other search filled (a question naming one publisher often has few).
            ids = code_search(state, query, k_whole if filters else k, f"pipeline{round_no}", filters)
            if filters and not ids and ("published_after" in filters or "published_before" in filters):
                undated = {n: v for n, v in filters.items() if n not in ("published_after", "published_before")}
                ids = code_search(state, query, k_whole, f"pipeline{round_no}", undated)  # a time zone can move a day
            # Narrowed sub-queries are more specific than the whole question: their results come first.
            if filters:
                narrowed.append((ids, k_narrowed))
            else:
                lists.append(ids)
        if round_no == rounds:
            break  # the last round skips the judge
        if reason := state.spent():
            state.budget_reason = reason
            break
        verdict = judge(state, _context_order(state, narrowed, lists), facets)
        if verdict.get("sufficient"):
            break
        queries = _parsed_queries(verdict.get("missing", []), known_sources)[:MAX_SUBQUERIES] or [(state.question, None)]
    ids = _context_order(state, narrowed, lists)
    return synthesise(state, ids, budget_note(state.budget_reason) if state.budget_reason else "")


def _share(state: RunState, n_queries: int) -> int:
    """Results per search when `n_queries` searches fill the context: an equal share, at least 5."""
    return min(state.budgets.max_k, max(5, -(-state.budgets.max_context_chunks // max(n_queries, 1))))


def _context_order(state: RunState, narrowed: list[tuple[list[int], int]], others: list[list[int]]) -> list[int]:
    """The pipeline's context: each narrowed search's share of its results fused first, then the
    other searches', then the rest of the narrowed searches' results for slots still free (narrowed
    searches that return the same chunks left slots empty: 16 of 1,705 evaluation contexts)."""
    return _merged(state, [ids[:share] for ids, share in narrowed], others, [ids[share:] for ids, share in narrowed])


def _merged(state: RunState, *groups: list[list[int]]) -> list[int]:
    """Each group's search results fused by reciprocal rank (a chunk both a publisher's search and
    the search of a fact the question states rank comes first), groups in order, de-duplicated by
    chunk, by identical text and by near-copies (NEAR_COPY). Measured on the evaluation sample
    against interleaving the lists: evidence recall 0.747 -> 0.757 with the fact searches
    (docs/evaluation.md)."""
    seen_hashes: set[str] = set()
    kept: list[frozenset[str]] = []
    out: list[int] = []
    ranked = [cid for lists in groups for cid in fuse(lists, rrf_k=CONTEXT_RRF_K, key=lambda c: c)]
    for cid in ranked:
        if len(out) >= state.budgets.max_context_chunks:
            break
        chunk = state.retrieved.get(cid)
        h = chunk.content_hash if chunk is not None else str(cid)
        if h in seen_hashes:
            continue
        seen_hashes.add(h)
        if chunk is not None:
            grams = shingles(chunk.text)
            if any(contained_share(grams, other) >= NEAR_COPY for other in kept):
                continue  # a syndicated copy, or a document's last chunk that is mostly its overlap
            kept.append(grams)
        out.append(cid)
    return out


_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_SUBQUERIES = 8  # a rewrite's sub-queries searched (per publisher, per fact); the tool-call budget still applies
CONTEXT_RRF_K = 60
# A chunk whose word 5-grams are this share (of the smaller) inside a chunk already in the context
# is not given one of its few slots: the same story syndicated under another byline, or a short
# last chunk that repeats its predecessor's overlap.
NEAR_COPY = 0.8


def rewrite(state: RunState, facets: dict | None = None) -> list[tuple[str, dict | None]]:
    """Sub-queries with optional narrowing filters (source values the facets listed, a date window), plus the question."""
    turn = call_model(state, "rewrite", [UserMessage(rewrite_prompt(state.question, facets))], tools_enabled=False)
    proposed = {} if turn.truncated else parse_json_object(turn.text)  # a cut-off list is not the model's list
    queries = _parsed_queries(proposed.get("queries", [])[:MAX_SUBQUERIES], set((facets or {}).get("sources") or {}))
    if not any(q == state.question and not f for q, f in queries):
        queries.append((state.question, None))
    return queries


def _parsed_queries(items: list, known: set[str]) -> list[tuple[str, dict | None]]:
    """A model's proposed searches: strings, or {query, sources, published_after, published_before}
    objects whose sources must be values the facets listed; duplicates dropped."""
    out: dict[str, tuple[str, dict | None]] = {}
    for item in items if isinstance(items, list) else []:
        query, filters = (item, None) if isinstance(item, str) else (item.get("query"), {}) if isinstance(item, dict) else (None, None)
        if not isinstance(query, str) or not query.strip():
            continue
        if isinstance(item, dict):
            sources = [v for v in item.get("sources") or [] if isinstance(v, str) and v in known]
            if sources:
                filters["metadata"] = {"source": sources}
            for name in ("published_after", "published_before"):
                if isinstance(item.get(name), str) and _ISO_DAY.match(item[name]):
                    filters[name] = item[name]
        out.setdefault(json.dumps([query.strip(), filters], sort_keys=True), (query.strip(), filters or None))
    return list(out.values())


def judge(state: RunState, chunk_ids: list[int], facets: dict | None = None) -> dict:
    rendered, structured = _context(state, chunk_ids)
    turn = call_model(state, "judge", [UserMessage(judge_prompt(state.question, rendered, facets))], tools_enabled=False,
                      context=structured)
    data = {} if turn.truncated else parse_json_object(turn.text)  # a cut-off verdict is no verdict
    if not isinstance(data.get("sufficient"), bool):
        return {"sufficient": False, "why": "unreadable judgement", "missing": [state.question]}
    return data


_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_json_object(text: str) -> dict:
    """The first JSON object in a model reply (models wrap JSON in prose or code fences); {} if none."""
    m = _JSON_OBJECT.search(text or "")
    if not m:
        return {}
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def is_multi_part(question: str) -> bool:
    return len(split_question(question)) > 1


def run_strategy(state: RunState, strategy: str) -> LoopResult:
    """Run the requested strategy; `auto` may escalate. Exceptions propagate (the caller stores a failed run)."""
    # A provider found to ignore tool declarations never runs the agentic strategy: the pipeline needs no tool calls.
    escalation, escalate = ("agentic", run_agentic) if state.tools_ok else ("pipeline", run_pipeline)
    if strategy == "auto":
        if is_multi_part(state.question):
            return _finish(state, escalation, escalate(state))
        first = _finish(state, "classic", run_classic(state))
        if first.outcome == "answered":  # grounded
            return first
        if state.spent():
            return first
        return _finish(state, escalation, escalate(state))
    if strategy == "agentic" and not state.tools_ok:
        return _finish(state, "pipeline", run_pipeline(state))
    runner = {"classic": run_classic, "agentic": run_agentic, "pipeline": run_pipeline}.get(strategy)
    if runner is None:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return _finish(state, strategy, runner(state))


def _finish(state: RunState, strategy: str, answer: str) -> LoopResult:
    state.strategy = strategy
    citations = check_citations(answer, state.retrieved)
    outcome = decide_outcome(answer, citations, truncated=answer in state.truncated, budget_reason=state.budget_reason)
    return LoopResult(answer=answer, strategy=strategy, outcome=outcome, citations=citations, budget_reason=state.budget_reason)


def is_grounded(citations: list[CitationCheck]) -> bool:
    """At least one citation, and every citation verified against a chunk this run retrieved."""
    return bool(citations) and all(c.verified for c in citations)


def decide_outcome(answer: str, citations: list[CitationCheck], *, truncated: bool = False, budget_reason: str = "") -> str:
    """What the run's text is (agents.models.Outcome values):

        truncated            cut off by the output cap even after its retry: never complete, never grounded
        not_enough_evidence  the model said so (a statement, not an answer)
        unverified           text without a citation, or with one that failed verification: not an answer
        budget_exhausted     grounded, but a budget ended the research early
        answered             grounded: at least one citation, every one verified

    The loop never decides `withheld`: agents.services withholds unverified and truncated text
    when the tenant asks for strict citations."""
    if truncated:
        return "truncated"
    if is_not_enough_evidence(answer):
        return "not_enough_evidence"
    if not is_grounded(citations):
        return "unverified"
    return "budget_exhausted" if budget_reason else "answered"
