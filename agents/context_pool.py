"""A strategy's candidate pool made into a context: how many candidates a strategy hands over, and
their order after the relevance model (agents.judge) has read them, traced as a step of the run.

Without a relevance model the pool is the context's size and its order is the strategy's own.
"""

from __future__ import annotations

import json
import time

from agents import judge
from agents.planning import fuse
from agents.steps import RunState, StepRecord, relevance_cost_since, relevance_cost_snapshot
from agents.sufficiency import seen_chunk

CONTEXT_RRF_K = 60  # reciprocal-rank constant of every fusion of a context's lists


def reranked(state: RunState, chunk_ids: list[int]) -> list[int]:
    """`chunk_ids` (a strategy's candidate pool, best first) reordered with the relevance model
    (agents.judge.rerank) when one is configured, traced as a `rerank` model-call step with its cost;
    unchanged without one. The pool's first judge.POOL candidates are read; the rest keep their place after them."""
    if not judge.enabled() or not chunk_ids:
        return chunk_ids
    pool = [c for c in chunk_ids if c in state.retrieved][: judge.POOL]
    before = relevance_cost_snapshot()
    started = time.perf_counter()
    order = judge.rerank(state.question, [seen_chunk(state.retrieved[c]) for c in pool])
    step = StepRecord(ordinal=len(state.steps), kind="model_call", name="rerank",
                      arguments={"model": judge.model_name(), "candidates": pool, **relevance_cost_since(before)},
                      chunk_ids=[cid for cid, _ in order], output=json.dumps([[cid, round(p, 4)] for cid, p in order]),
                      latency_ms=(time.perf_counter() - started) * 1000)
    state.record(step)
    # The model's order fused with the strategy's (reciprocal rank): a passage that answers the whole
    # question rises, and one the strategy placed for a part or a hop (which the whole question's
    # reading ranks low) is not cut for it.
    head = fuse([pool, [cid for cid, _ in order]], rrf_k=CONTEXT_RRF_K, key=lambda c: c)
    read = set(head)
    return [*head, *(c for c in chunk_ids if c not in read)]


def pool_size(state: RunState) -> int:
    """How many candidates a strategy hands to the context: the context's size, or the rerank's pool when a model reranks."""
    size = state.budgets.max_context_chunks
    return max(size, judge.POOL) if judge.enabled() else size
