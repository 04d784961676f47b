"""The answer loop and its strategies. State lives in one dataclass; each step's outcome is a closed union.

    classic   one search, one generation
    agentic   the model drives the tools until it answers or a budget is spent
    pipeline  rewrite into sub-queries, fan out, merge, judge sufficiency, refine, synthesise
    auto      classic for single-fact questions; agentic for multi-part ones or when classic is not grounded
              (the pipeline instead of agentic with a provider whose probe found it ignores tools)

Every model call and tool call (agents.steps) becomes a StepRecord, handed to `on_step` as it
happens and stored with the run by agents.services. Nothing here writes to the database.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agents import judge as judge_model
from agents.citations import MARKER, CitationCheck, check_citations, is_not_enough_evidence, neutralise_markers
from agents.document_runs import document_answer
from agents.judge import CONTEXT_RRF_K, pool_size, reranked
from agents.lexical import contained_share, shingles, split_question
from agents.messages import AssistantMessage, ContextChunk, ProviderError, ToolCall, UserMessage
from agents.planning import Facets, fuse
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
)
from agents.steps import ANSWER_RESERVE, RunState, StepRecord, call_model, call_tool, execute_calls
from agents.sufficiency import answering_chunks, seen_chunk

__all__ = ["ANSWER_RESERVE", "STRATEGIES", "LoopResult", "RunState", "StepRecord", "decide_outcome", "run_strategy"]

Strategy = Literal["auto", "classic", "agentic", "pipeline"]
STRATEGIES: tuple[str, ...] = ("auto", "classic", "agentic", "pipeline")


# --- Step outcomes (closed union) -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CallTools:
    """The model asked for these tools: run them (execute_calls), then take another step."""
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The model answered in text (possibly empty, possibly before any search: run_agentic decides)."""
    text: str


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """A budget ran out before the step (`reason` names which); no model call was made."""
    reason: str


NextStep = CallTools | FinalAnswer | BudgetSpent


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
    return any(s.kind == "tool_call" and s.name in ("search", "read", "search_pages", "summarise_document") and not s.error
               for s in state.steps)


def answer_from_evidence(state: RunState, why: str) -> str:
    """The fallback when the model would not retrieve: the chunks already retrieved (e.g. by auto's
    classic attempt), else one search for the question made by the code, then an answer call over them."""
    state.fallback = why
    ids = [c.chunk_id for c in sorted(state.retrieved.values(), key=lambda c: -c.score)]
    if not ids and not state.spent_time_or_tokens():
        ids = strategy_search(state, state.question, state.budgets.max_context_chunks, "fallback")
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


def answer_context(state: RunState, chunk_ids: list[int]) -> tuple[str, tuple[ContextChunk, ...]]:
    """The context shown to an answer or judge call (of the loop, or of a conversation turn answered from
    its thread), rendered and as the chunk list recorded with the call (call_model's `context`). Both hold the
    same chunks: at most max_context_chunks, no more than fit in context_chars, so the trace (and the
    evaluation reading it) never lists a chunk the model was not shown."""
    chunks = [state.retrieved[c] for c in reranked(state, chunk_ids) if c in state.retrieved][: state.budgets.max_context_chunks]
    room = state.context_chars(overhead_chars=len(system_prompt(with_tools=False)) + len(answer_prompt(state.question, "")))
    shown = fitting_chunks(chunks, max_chars_per_chunk=state.budgets.chunk_chars, max_total_chars=room)
    rendered = render_context(shown, max_chars_per_chunk=state.budgets.chunk_chars, max_total_chars=room)
    return rendered, tuple(ContextChunk(c.chunk_id, neutralise_markers(c.text), c.title, c.locator, c.score, c.flags, c.metadata)
                           for c in shown)


def synthesise(state: RunState, chunk_ids: list[int], note: str = "") -> str:
    rendered, structured = answer_context(state, chunk_ids)
    turn = call_model(state, "answer", [UserMessage(answer_prompt(state.question, rendered, missing_note=note))],
                      tools_enabled=False, context=structured)
    return turn.text


def strategy_search(state: RunState, query: str, k: int, tag: str, filters: dict | None = None) -> list[int]:
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


def strategy_facets(state: RunState) -> dict:
    """The metadata facets of the caller's scope, fetched by the strategy (traced like a tool call)."""
    if state.tool_calls >= state.budgets.max_tool_calls:
        return {}
    state.tool_calls += 1
    outcome = call_tool(state, ToolCall(id=f"facets-{state.tool_calls}", name="facets", arguments={}))
    return {} if outcome.error else dict(outcome.content)


def run_classic(state: RunState) -> str:
    ids = strategy_search(state, state.question, state.budgets.max_context_chunks, "classic")
    state.iterations += 1
    return synthesise(state, ids)


def run_pipeline(state: RunState, first: list[int] | None = None) -> str:
    """Plan, search, judge, hop, answer.

    Round 1 searches the planner's sub-queries (agents.planning: narrowed where the question names
    facet values or dates), the model's rewrite and the whole question; every search is as deep as
    classic's. After each round but the last the judge says whether every part of the question is
    answered and, if not, which searches would answer the rest: for a question that describes an
    entity without naming it, a search for the name the evidence gives (the hop). The final context
    fills every slot from the best of all searches (`_context_order`). `first`: the whole question's
    search already made (by auto), reused instead of searching it again."""
    facets = Facets.from_tool(strategy_facets(state))
    searched: set[str] = set()
    narrowed: list[tuple[list[int], int]] = []  # (results, their share of the context)
    lists: list[list[int]] = []
    anchor: list[int] = []  # the whole question's results: the first half of the context after narrowed ones
    if first is not None:
        anchor = first
        searched.add(json.dumps([state.question, None], sort_keys=True))
    queries = planned_queries(state, facets)
    rounds = min(state.budgets.pipeline_rounds, state.budgets.max_iterations)
    judged: list[int] | None = None  # the context the last judgement read
    depth = min(state.budgets.max_k, state.budgets.max_context_chunks)
    for round_no in range(1, rounds + 1):
        state.iterations += 1
        share = _share(state, sum(1 for _, filters in queries if filters))
        for query, filters in queries:
            key = json.dumps([query, filters], sort_keys=True)
            if key in searched:
                continue  # a follow-up asked for again: its results are in already
            searched.add(key)
            ids = strategy_search(state, query, depth, f"pipeline{round_no}", filters)
            if filters and not ids and ("date_after" in filters or "date_before" in filters):
                undated = {n: v for n, v in filters.items() if n not in ("date_after", "date_before")} or None
                ids = strategy_search(state, query, depth, f"pipeline{round_no}", undated)  # a time zone can move a day
            # Narrowed sub-queries are more specific than the whole question: their results come first.
            if filters:
                narrowed.append((ids, share))
            elif query == state.question:
                anchor = ids
            else:
                lists.append(ids)
        if round_no == rounds:
            break  # the last round skips the judge
        if reason := state.spent():
            state.budget_reason = reason
            break
        judged = _context_order(state, narrowed, anchor, lists, facets)
        verdict = judge(state, judged, facets)
        if verdict.get("sufficient"):
            break
        left = state.budgets.max_tool_calls - state.tool_calls
        queries = _parsed_queries(verdict.get("missing", []), facets)[: min(MAX_FOLLOW_UPS, left)]
        if all(json.dumps([q, f], sort_keys=True) in searched for q, f in queries):
            break  # nothing new to search: more rounds would find the same
        judged = None  # another round searches: the context is ordered again
    # Ending after a judgement, no search has changed the results the judge's context was ordered from.
    ids = judged if judged is not None else _context_order(state, narrowed, anchor, lists, facets)
    return synthesise(state, ids, budget_note(state.budget_reason) if state.budget_reason else "")


def planned_queries(state: RunState, facets: Facets) -> list[tuple[str, dict | None]]:
    """Round 1's searches: the planner's sub-queries, the model's rewrite, then the whole question."""
    planned = [(sub.text, sub.filters()) for sub in state.planner.plan(state.question, facets)]
    whole = json.dumps([state.question, None], sort_keys=True)
    out = [k for k in dict.fromkeys(json.dumps(q, sort_keys=True) for q in [*planned, *rewrite(state, facets)]) if k != whole]
    return [(query, filters) for query, filters in map(json.loads, [*out[:MAX_SUBQUERIES], whole])]


def _share(state: RunState, n_queries: int) -> int:
    """Results per search when `n_queries` searches fill the context: an equal share, at least 5."""
    return min(state.budgets.max_k, max(5, -(-state.budgets.max_context_chunks // max(n_queries, 1))))


def _context_order(state: RunState, narrowed: list[tuple[list[int], int]], anchor: list[int],
                   others: list[list[int]], facets: Facets | None = None) -> list[int]:
    """The pipeline's context, in this order until every slot is filled.

    With narrowed searches (the question names facet values or dates): for each fact the question
    states, the narrowed result whose sentence best answers it (sufficiency.answering_chunks); each
    narrowed search's share of its results, fused (they match what the question names); then every
    other search's results, the whole question's among them, fused; then the rest of the narrowed
    results.

    Without: the first half of the whole question's results (never less than classic's best); the
    best OTHER_TOP results of every other search (parts, rewrites, hops), fused: what the whole
    question's search ranked low or missed; then the rest of the whole question's results, then the
    rest of the others'."""
    firsts, rests = [ids[:share] for ids, share in narrowed], [ids[share:] for ids, share in narrowed]
    if narrowed:  # the narrowed searches lead; the whole question is one more search among the others
        pool = [state.retrieved[c] for c in dict.fromkeys(c for ids, _ in narrowed for c in ids) if c in state.retrieved]
        lead = answering_chunks(state.question, [seen_chunk(c) for c in pool], facets.values() if facets else ())
        return _merged(state, [lead], firsts, [anchor, *others], rests)
    half = -(-state.budgets.max_context_chunks // 2)
    return _merged(state, [anchor[:half]], [ids[:OTHER_TOP] for ids in others], [anchor[half:]],
                   [ids[OTHER_TOP:] for ids in others])


def _merged(state: RunState, *groups: list[list[int]]) -> list[int]:
    """Each group's search results fused by reciprocal rank (a chunk that a narrowed search and the
    search of a fact the question states both rank comes first), groups in order, de-duplicated by
    chunk, by identical text and by near-copies (NEAR_COPY)."""
    seen_hashes: set[str] = set()
    kept: list[frozenset[str]] = []
    out: list[int] = []
    ranked = [cid for lists in groups for cid in fuse(lists, rrf_k=CONTEXT_RRF_K, key=lambda c: c)]
    for cid in ranked:
        if len(out) >= pool_size(state):
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
MAX_SUBQUERIES = 8  # round 1's sub-queries besides the whole question (per facet value named, per fact, per part)
MAX_FOLLOW_UPS = 3  # searches a judgement may add per round (never more than the tool calls left)
OTHER_TOP = 2  # results of each part, rewrite or hop search placed right after the whole question's best
# A chunk whose word 5-grams are this share (of the smaller) inside a chunk already in the context
# is not given one of its few slots: the same text published twice, or a short last chunk that
# repeats its predecessor's overlap.
NEAR_COPY = 0.8


def rewrite(state: RunState, facets: Facets) -> list[tuple[str, dict | None]]:
    """The model's sub-queries, with optional narrowing to facet values and dates."""
    turn = call_model(state, "rewrite", [UserMessage(rewrite_prompt(state.question, facets))], tools_enabled=False,
                      facets=facets)
    proposed = {} if turn.truncated else parse_json_object(turn.text)  # a cut-off list is not the model's list
    return _parsed_queries(proposed.get("queries", [])[:MAX_SUBQUERIES], facets)


def _proposed_filters(item: dict, facets: Facets) -> dict:
    """The filters of one proposed search object: metadata values the facets list under their key, ISO dates."""
    filters: dict = {}
    asked = item.get("metadata")
    narrowing: dict[str, list[str]] = {}
    for key, values in asked.items() if isinstance(asked, dict) else []:
        known = facets.enumerations.get(key, {})
        listed = [values] if isinstance(values, str) else values if isinstance(values, list) else []
        kept = [v for v in listed if isinstance(v, str) and v in known]
        if kept:
            narrowing[key] = kept
    if narrowing:
        filters["metadata"] = narrowing
    for name in ("date_after", "date_before"):
        value = item.get(name)
        if isinstance(value, str) and _ISO_DAY.match(value):
            filters[name] = value
    return filters


def _parsed_queries(items: list, facets: Facets) -> list[tuple[str, dict | None]]:
    """A model's proposed searches: strings, or {query, metadata, date_after, date_before} objects
    whose metadata values must be values the facets listed under that key; duplicates dropped."""
    out: dict[str, tuple[str, dict | None]] = {}
    query: object
    filters: dict | None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            query, filters = item, None
        elif isinstance(item, dict):
            query, filters = item.get("query"), _proposed_filters(item, facets)
        else:
            continue
        if not isinstance(query, str) or not query.strip():
            continue
        out.setdefault(json.dumps([query.strip(), filters or None], sort_keys=True), (query.strip(), filters or None))
    return list(out.values())


def judge(state: RunState, chunk_ids: list[int], facets: Facets) -> dict:
    rendered, structured = answer_context(state, chunk_ids)
    turn = call_model(state, "judge", [UserMessage(judge_prompt(state.question, rendered, facets))], tools_enabled=False,
                      context=structured, facets=facets)
    data = {} if turn.truncated else parse_json_object(turn.text)  # a cut-off verdict is no verdict
    if not isinstance(data.get("sufficient"), bool):
        return {"sufficient": False, "why": "unreadable judgement", "missing": []}
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
    """Run the requested strategy. Exceptions propagate (the caller stores a failed run).

    A document request (summarise X, which pages ... X) is answered by agents.document_runs. `auto`
    decides per question: a question with several parts goes straight to the pipeline; any other is
    searched once, as classic would, and the judge reads that evidence: sufficient, and it is
    answered from it (classic's cost plus one judge call); not, and the pipeline continues from that
    search (hops, sub-queries), never searching it twice."""
    if (answer := document_answer(state, strategy)) is not None:
        return finish_run(state, state.strategy, answer)
    if strategy == "auto":
        return run_auto(state)
    if strategy == "agentic" and not state.tools_ok:
        # A provider found to ignore tool declarations never runs the agentic strategy: the pipeline needs no tool calls.
        state.strategy = "pipeline"
        return finish_run(state, "pipeline", run_pipeline(state))
    runner = {"classic": run_classic, "agentic": run_agentic, "pipeline": run_pipeline}.get(strategy)
    if runner is None:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    state.strategy = strategy
    return finish_run(state, strategy, runner(state))


def run_auto(state: RunState) -> LoopResult:
    state.strategy = "pipeline"  # the strategy running: a failed run is stored with it
    if is_multi_part(state.question):
        return finish_run(state, "pipeline", run_pipeline(state))
    first = strategy_search(state, state.question, min(state.budgets.max_k, state.budgets.max_context_chunks), "auto")
    state.iterations += 1
    verdict = judge(state, first, Facets())
    if verdict.get("sufficient") or state.spent():
        state.strategy = "classic"
        return finish_run(state, "classic", synthesise(state, first))
    return finish_run(state, "pipeline", run_pipeline(state, first=first))


def finish_run(state: RunState, strategy: str, answer: str) -> LoopResult:
    """The result of a run that produced `answer` with `strategy`: its citations checked against the chunks the
    run retrieved, the parts the cited chunks do not support (the judge), and the outcome decided from both."""
    state.strategy = strategy
    citations = check_citations(answer, state.retrieved)
    cited = [seen_chunk(state.retrieved[c.chunk_id]) for c in citations if c.verified]
    uncited = judge_model.unsupported_parts(state.question, MARKER.sub("", answer), cited,
                                [seen_chunk(c) for c in state.retrieved.values()]) if cited else []
    outcome = decide_outcome(answer, citations, truncated=answer in state.truncated, budget_reason=state.budget_reason,
                             unsupported=uncited)
    return LoopResult(answer=answer, strategy=strategy, outcome=outcome, citations=citations, budget_reason=state.budget_reason)


def is_grounded(citations: list[CitationCheck], unsupported: Sequence[str] = ()) -> bool:
    """At least one citation, every citation verified against a chunk this run retrieved, and no part
    of the question the answer speaks to without a cited chunk that supports it
    (agents.judge.unsupported_parts)."""
    return bool(citations) and all(c.verified for c in citations) and not unsupported


def decide_outcome(answer: str, citations: list[CitationCheck], *, truncated: bool = False, budget_reason: str = "",
                   unsupported: Sequence[str] = ()) -> str:
    """What the run's text is (agents.models.Outcome values):

        truncated            cut off by the output cap even after its retry: never complete, never grounded
        not_enough_evidence  the model said so (a statement, not an answer)
        unverified           text without a citation, with one that failed verification, or speaking to a
                             part of the question (`unsupported`) no cited chunk supports: not an answer
        budget_exhausted     grounded, but a budget ended the research early
        answered             grounded: at least one citation, every one verified, every part it answers cited

    The loop never decides `withheld`: agents.services withholds unverified and truncated text
    when the tenant asks for strict citations."""
    if truncated:
        return "truncated"
    if is_not_enough_evidence(answer):
        return "not_enough_evidence"
    if not is_grounded(citations, unsupported):
        return "unverified"
    return "budget_exhausted" if budget_reason else "answered"
