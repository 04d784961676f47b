"""What a search is asked and what it answers: the narrowing filters, a hit (and its columns), the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = get_args(Mode)


def search_mode(value: object) -> Mode:
    """`value` as a search Mode; ValueError naming the modes when it is none of them."""
    for mode in MODES:
        if value == mode:
            return mode
    raise ValueError(f"mode must be one of {', '.join(MODES)}, not {value!r}")


@dataclass(frozen=True)
class SearchFilters:
    """Narrowing filters. None means "no narrowing" for that dimension."""

    corpus_ids: tuple[int, ...] | None = None
    document_ids: tuple[int, ...] | None = None
    # Only chunks of these departments (intersected with the scope). Tenant-wide chunks (no
    # department) are excluded unless include_tenant_wide is set.
    department_ids: tuple[int, ...] | None = None
    # Equality on Document.metadata keys; a list value means "any of these" (one source may go by
    # several names).
    metadata: dict[str, str | int | float | bool | list | tuple] | None = None
    # On Document.dated_at (the metadata value under its corpus's date_key): ISO date or date-time,
    # after inclusive, before exclusive. Undated documents never match a date filter.
    date_after: str | None = None
    date_before: str | None = None
    include_tenant_wide: bool = False


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
    distance: float | None = None  # cosine distance when the hit came from the vector side
    keyword_score: float | None = None  # BM25 score when it came from the keyword side
    embedding_model: str = ""


# A hit's columns and the join that gives them, in the order SearchHit is read from them (the ranking
# statements that return their hits' rows, and postprocess.hydrate).
HIT_COLS = ("c.id, c.document_id, c.corpus_id, c.locator, c.page, c.ordinal, c.text, c.content_hash, c.flags, "
            "c.embedding_model, d.title, d.metadata")
HIT_JOIN = "JOIN kb_document d ON d.id = c.document_id AND d.tenant_id = c.tenant_id"


@dataclass(frozen=True)
class SearchResult:
    hits: list[SearchHit]
    applied_filter: dict  # the effective filter actually applied (scope ∩ narrowing), for the trace
    path: str = ""  # e.g. "exact", "hnsw(ef=100)", "keyword", "hybrid"
    timings_ms: dict = field(default_factory=dict)

