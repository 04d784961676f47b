"""The one scoped entry point for searching chunks.

Contract (other modules rely on it): `search(scope, query, k=..., mode=..., filters=...)` returns a
`SearchResult`. The scope comes from the authenticated caller; `filters` can only narrow it. A filter
naming something outside the scope yields no hits (never an error that reveals existence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tenants.scope import Scope

Mode = Literal["vector", "keyword", "hybrid"]


@dataclass(frozen=True)
class SearchFilters:
    """Narrowing filters. None means "no narrowing" for that dimension."""

    corpus_ids: tuple[int, ...] | None = None
    document_ids: tuple[int, ...] | None = None
    department_ids: tuple[int, ...] | None = None
    metadata: dict[str, str | int | float | bool] | None = None  # equality on Document.metadata keys
    published_after: str | None = None  # ISO date/datetime on Document.metadata["published_at"]
    published_before: str | None = None


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    document_id: int
    corpus_id: int
    corpus_name: str
    document_title: str
    locator: str
    page: int | None
    ordinal: int
    text: str
    content_hash: str
    score: float
    metadata: dict = field(default_factory=dict)
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    applied_filter: dict  # the effective filter actually applied (scope ∩ narrowing), for the trace
    path: str = ""  # e.g. "exact", "hnsw(ef=100)", "keyword", "hybrid"
    timings_ms: dict = field(default_factory=dict)


def search(scope: Scope, query: str, *, k: int = 10, mode: Mode = "hybrid", filters: SearchFilters | None = None,
           max_distance: float | None = None, mmr_lambda: float | None = None) -> SearchResult:
    """Search the chunks `scope` may see. Must not be given a tenant id from anywhere but the scope."""
    raise NotImplementedError("retrieval is being built")
