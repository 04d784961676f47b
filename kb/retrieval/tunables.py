"""Retrieval tunables with their measured defaults (docs/retrieval.md); each may be overridden in Django settings."""

from __future__ import annotations

import re

from django.conf import settings

DEFAULTS = {
    # Scopes up to this many rows (per model) are always scanned exactly.
    "RETRIEVAL_EXACT_MAX_ROWS": 4000,
    # Above it, HNSW is used when its expected work is smaller: it visits about
    # ef_search + fetch / selectivity index tuples (selectivity = scope rows / rows in the model's
    # index), each costing about HNSW_TUPLE_COST exact-scan rows.
    "RETRIEVAL_HNSW_TUPLE_COST": 10.0,
    "RETRIEVAL_HNSW_EF_SEARCH": 40,
    "RETRIEVAL_HNSW_FETCH": 40,  # in-scope rows taken from the relaxed-order scan before re-sorting
    "RETRIEVAL_HNSW_MAX_SCAN_TUPLES": 40000,
    # Use the per-tenant / per-department partial HNSW indexes kb.vector_index builds for large scopes.
    "RETRIEVAL_SCOPE_INDEXES": True,
    # Reciprocal rank fusion: score = sum(weight / (RRF_K + rank)).
    "RETRIEVAL_RRF_K": 60,
    "RETRIEVAL_KEYWORD_WEIGHT": 1.0,
    "RETRIEVAL_VECTOR_WEIGHT": 0.1,
    # How many candidates each side contributes to fusion / MMR.
    "RETRIEVAL_CANDIDATES": 50,
    # Keyword candidates come from the rarest query lexemes covering at most this share of the
    # chunks (1 = every lexeme: exact BM25 top-n, no cap either)
    "RETRIEVAL_BM25_CANDIDATE_SHARE": 0.1,
    # ... and at most this many chunks (estimated from document frequencies): the cost of keyword
    # search is per candidate (heap row + tsvector), so large corpora need an absolute cap too.
    "RETRIEVAL_BM25_MAX_CANDIDATES": 1000,
    "RETRIEVAL_BM25_K1": 1.2,
    "RETRIEVAL_BM25_B": 0.75,
    "RETRIEVAL_TERM_STATS_TTL_S": 300,
    # Run the ranking and hit-row statements as prepared statements of the connection (generic
    # plans, no planning per search). Off behind a transaction-pooling proxy (PgBouncer
    # pool_mode=transaction), where a session's prepared statements are not its own.
    "RETRIEVAL_PREPARED_STATEMENTS": True,
    # A vector search of a scope this process resolved before builds its plan from the corpus rows
    # it saw then and sends the corpus statement with its ranking (one round trip; checked, and
    # searched again when the corpora changed: kb.retrieval.plan._resolve).
    "RETRIEVAL_REUSE_PLANS": True,
    # Not here: RETRIEVAL_PARALLEL_WORKERS, the side connections on which a hybrid search runs BM25, is an
    # environment variable (declared in kb/project/config.py, read as settings.RETRIEVAL_PARALLEL_WORKERS).
}


def _setting(name: str):
    return getattr(settings, name, DEFAULTS[name])


MAX_K = 200


MAX_ARMS = 8  # a scope of more departments is not split into per-department arms (planning grows per arm)


# Lexemes a query resolves to (per language); BM25 and the sentence re-rank score its rarest
# MAX_SCORED_TERMS of them (one tf column each), not the first in the tsvector's (alphabetical)
# order, which dropped a long question's words from late in the alphabet whatever their weight.
MAX_QUERY_TERMS = 64
MAX_SCORED_TERMS = 32


_MODEL_KEY = re.compile(r"^[A-Za-z0-9._/-]+:[0-9]+$")

