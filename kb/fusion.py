"""Reciprocal-rank fusion: the one implementation (retrieval's hybrid search, the sentence re-rank and
the agents' merge of several searches all fuse through it).

An item's score is the sum over the ranked lists that hold it of weight / (rrf_k + rank), ranks counted
from 1 (Cormack et al., 2009). Pure: no database, no settings.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def rrf_scores(ranked_lists: Iterable[tuple[Sequence[K], float]], *, rrf_k: float) -> dict[K, float]:
    """{item: fused score} over (ranked items, weight) pairs; an item listed twice in one list counts at its first rank."""
    scores: dict[K, float] = {}
    for items, weight in ranked_lists:
        seen: set[K] = set()
        for rank, item in enumerate(items, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (rrf_k + rank)
    return scores
