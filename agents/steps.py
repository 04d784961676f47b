"""One run's state and its steps: every model call and tool call, traced as a StepRecord.

RunState is everything a run knows (budgets, messages, the steps so far, tokens, retrieved chunks,
the run's model-call cache). `call_model` makes one bounded model call (deadline and output cap
from the budgets; a cut-off reply retried once; an identical call answered from the cache) and
`call_tool` / `execute_calls` run tools; both record a StepRecord and hand it to `on_step`. The
strategies (agents.loop) are built from these. Nothing here writes to the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agents.budgets import Budgets
from agents.citations import RetrievedChunk
from agents.messages import (
    AssistantMessage,
    ContextChunk,
    DeadlineExceeded,
    Message,
    ModelRequest,
    ModelTurn,
    Task,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agents.planning import Facets, GeneralPlanner, Planner
from agents.prompts import CHARS_PER_TOKEN, as_recorded, compact, system_prompt, truncated_note
from agents.streaming import TextSink, TextStream
from agents.tools import TOOL_SPECS, ToolDeps, ToolOutcome, document_share, run_tool
from kb import relevance

if TYPE_CHECKING:  # only annotated here: the offline provider imports agents.judge, which imports this module
    from agents.providers import Provider

log = logging.getLogger(__name__)


class RunStopped(Exception):
    """The asker stopped the run (RunState.should_stop): raised after the step in progress is recorded,
    so the run is stored as failed, its error saying so, with the steps it got through."""


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
    model_input: dict = field(default_factory=dict)  # a model call's request, compacted (agents.prompts.compact)

    def as_dict(self) -> dict:
        """The step as streamed: everything but the (large) recorded model input, which stays in the record."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "model_input"}


ANSWER_RESERVE = 0.25  # share of the wall budget kept for the final answer once research stops
PROMPT_SHARE = 0.5  # of the time left, what reading a context may take (the rest is for the reply)
MIN_OUTPUT_TOKENS = 64  # a reply's cap never goes below this, even when the token budget is spent
# Replies whose shape is small whatever the question: a few search queries, a JSON verdict. A model
# that rambles (a small self-hosted one will) is cut there, not at the answer's cap.
TASK_OUTPUT_CAPS: dict[str, int] = {"rewrite": 256, "judge": 512}
# Tasks whose text may be the answer: streamed to RunState.on_text as it is written (an agent turn
# that calls tools takes back what it streamed).
TEXT_TASKS = frozenset({"agent", "answer", "repair"})


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
    sent: dict[int, dict] = field(default_factory=dict)  # step ordinal -> the full input of that model call
    planner: Planner = field(default_factory=GeneralPlanner)  # the question planner of the pipeline (agents.planning)
    prompt_tokens_per_s: float | None = None  # the provider's measured prompt reading speed (None: not measured)
    on_text: TextSink | None = None  # the answer's text as it is written (agents.streaming); None: not streamed
    # True once the asker has gone (a closed stream): the run stops after the step in progress (RunStopped).
    should_stop: Callable[[], bool] | None = None

    @property
    def retrieved(self) -> dict[int, RetrievedChunk]:
        return self.deps.retrieved

    @property
    def deadline(self) -> float:
        """time.monotonic() by which every model call of the run is over (abandoned if still running)."""
        return self.started + self.budgets.max_wall_seconds

    def output_cap(self, task: Task | None = None) -> int:
        """One reply's output-token cap: max_output_tokens, less when less of the run's token budget is left,
        and no more than the task's own cap (TASK_OUTPUT_CAPS: a JSON verdict or a few queries)."""
        left = self.budgets.max_tokens - self.input_tokens - self.output_tokens
        return max(MIN_OUTPUT_TOKENS, min(self.budgets.max_output_tokens, left, TASK_OUTPUT_CAPS.get(task or "", left)))

    def context_chars(self, overhead_chars: int = 0) -> int:
        """What a context may hold: budgets.context_chars, less when the provider could not read that
        much (plus `overhead_chars` of instructions) in PROMPT_SHARE of the time left, at its measured speed."""
        if not self.prompt_tokens_per_s:
            return self.budgets.context_chars
        readable = self.prompt_tokens_per_s * CHARS_PER_TOKEN * (self.deadline - time.monotonic()) * PROMPT_SHARE
        return max(0, min(self.budgets.context_chars, int(readable) - overhead_chars))

    def unreadable_in_time(self, request: ModelRequest) -> str:
        """Why `request` must not be sent ('' if it may): at the provider's measured speed its prompt could
        not be read before the deadline. Such a call would be abandoned while the server reads, which a
        server cannot notice (it writes nothing then), so it would stay busy after the run ended."""
        if not self.prompt_tokens_per_s:
            return ""
        tokens = prompt_chars(request) / CHARS_PER_TOKEN
        need, left = tokens / self.prompt_tokens_per_s, self.deadline - time.monotonic()
        if need <= left:
            return ""
        return (f"a prompt of about {tokens:.0f} tokens takes about {need:.1f}s to read at the provider's measured "
                f"{self.prompt_tokens_per_s:g} tokens/s; {max(left, 0):.1f}s of the wall budget are left: not sent")

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
        if self.should_stop is not None and self.should_stop():
            raise RunStopped("the asker stopped the run (its stream was closed) after this step")


def call_model(state: RunState, task: Task, messages: list[Message], *, tools_enabled: bool,
               context: tuple[ContextChunk, ...] = (), facets: Facets | None = None,
               history: tuple[tuple[str, str], ...] = ()) -> ModelTurn:
    """One model call, traced. A reply the output cap cut off (finish_reason "length") is retried once
    with a note asking for a shorter reply; if that is cut off too, the turn is returned marked
    (`turn.truncated`, its text in state.truncated, its step's error says so) and never counts as complete."""
    turn = _call_once(state, task, messages, tools_enabled=tools_enabled, context=context, facets=facets, history=history)
    if not turn.truncated:
        return turn
    retry = [*messages, UserMessage(truncated_note(state.output_cap(task)))]
    turn = _call_once(state, task, retry, tools_enabled=tools_enabled, context=context, facets=facets, history=history,
                      retry_of_truncated=True)
    if turn.truncated:
        state.truncated.add(turn.text)
    return turn


def _call_once(state: RunState, task: Task, messages: list[Message], *, tools_enabled: bool,
               context: tuple[ContextChunk, ...] = (), facets: Facets | None = None, history: tuple[tuple[str, str], ...] = (),
               retry_of_truncated: bool = False) -> ModelTurn:
    conversational = task in ("agent", "repair")  # continues the tool conversation, so tools stay declared
    stream = TextStream(state.on_text) if state.on_text is not None and task in TEXT_TASKS else None
    shares: dict[str, float] = {}  # what the provider asked of the documents' names: recorded with the call

    def shares_asked(names: Sequence[str]) -> Mapping[str, float]:
        found = document_share(state.deps, names)
        shares.update(found)
        return found

    request = ModelRequest(task=task, system=system_prompt(with_tools=tools_enabled and task == "agent"),
                           messages=tuple(messages), tools=TOOL_SPECS if conversational else (), tools_enabled=tools_enabled,
                           question=state.question, context=context, deadline=state.deadline,
                           facets=facets.summary() if facets is not None else None,
                           max_output_tokens=state.output_cap(task), history=history,
                           on_text=stream.send if stream is not None else None,
                           document_share=shares_asked if task in TEXT_TASKS else None)
    started = time.perf_counter()
    step = StepRecord(ordinal=len(state.steps), kind="model_call", name=task,
                      arguments={"provider": state.provider.name, "model": state.provider.model, "tools_enabled": tools_enabled,
                                 "messages": len(messages), "context_chunks": [c.chunk_id for c in context],
                                 "max_output_tokens": request.max_output_tokens})
    if retry_of_truncated:
        step.arguments["retry_of_truncated"] = True
    full = as_recorded(request)
    step.model_input = compact(full, state.sent)
    state.sent[step.ordinal] = full
    key = call_key(request)
    turn = state.model_cache.get(key)
    if turn is not None:  # the same call earlier in this run: its reply, no tokens spent
        step.cached = True
    else:
        try:
            if why := state.unreadable_in_time(request):
                raise DeadlineExceeded(why)
            before = relevance_cost_snapshot()
            turn = state.provider.generate(request)
            if spent := relevance_cost_since(before):
                step.arguments["relevance"] = spent  # what the relevance model cost inside this call
            if shares:
                step.arguments["document_share"] = {n: round(v, 4) for n, v in shares.items()}
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
    if stream is not None:  # what the provider did not stream itself (or a cached reply) is sent now
        if turn.tool_calls:
            stream.clear()
        else:
            stream.finish(turn.text)
    if turn.finish_reason:
        step.arguments["finish_reason"] = turn.finish_reason
    if turn.truncated:
        step.error = f"truncated: the reply reached the output cap of {request.max_output_tokens} tokens"
    if turn.tool_calls:
        step.arguments["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls]
    state.record(step)
    return turn


def relevance_cost_snapshot() -> tuple[int, int, float]:
    """The relevance model's running cost on this thread (kb.relevance.cost), to diff around a step."""
    spent = relevance.cost()
    return spent.scored, spent.cached, spent.seconds


def relevance_cost_since(before: tuple[int, int, float]) -> dict:
    """What the relevance model cost since `before`: {"pairs", "cached_pairs", "relevance_ms"}; {} when nothing was scored."""
    scored, cached, seconds = relevance_cost_snapshot()
    if (scored, cached) == before[:2]:
        return {}
    return {"pairs": scored - before[0], "cached_pairs": cached - before[1], "relevance_ms": round((seconds - before[2]) * 1000, 1)}


def prompt_chars(request: ModelRequest) -> int:
    """The characters a provider reads for `request`: instructions, conversation and tool declarations."""
    def text(m: Message) -> int:
        if isinstance(m, UserMessage):
            return len(m.text)
        if isinstance(m, AssistantMessage):
            return len(m.text or "") + len(json.dumps([[c.name, c.arguments] for c in m.tool_calls], default=str))
        return len(json.dumps(m.content, default=str))

    tools = len(json.dumps([[t.name, t.description, t.parameters] for t in request.tools])) if request.tools else 0
    return len(request.system) + sum(text(m) for m in request.messages) + tools


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
