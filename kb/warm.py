"""The knowledge base's warm-up steps (registered in `KbConfig.ready()` through tenants.process_hooks; the
project package's warm-up runs them at process start, api/project/warmup.py).

- `models` (web and worker): loads the default embedding model and those named in GROUNDED_WARMUP_MODELS
  and runs one query embedding through each local one (the first forward pass of a torch model is several
  times slower than the next); a remote model (Gemini) has nothing to load and is not called.
- `parse_helper` (worker): starts the parse sandbox's helper process (kb.parse_sandbox) once.
- `search` (web): opens the retrieval side connections and runs the search path once on an empty scope
  (tenant `NO_TENANT`, which owns nothing: row-level security shows it no row), so its modules, SQL and
  the server's catalog caches are warm.
Each returns its timings in milliseconds under the keys /healthz shows.
"""

from __future__ import annotations

import threading
import time

from django.db import connections

from kb.embedding import GeminiEmbedder, default_model_key, embed_array, get_embedder
from kb.parse_sandbox import start_helper
from kb.retrieval import search
from kb.retrieval.retrieve import submit
from tenants.conf import product_settings
from tenants.scope import Scope

NO_TENANT = 2**63 - 1  # the largest bigint: a tenant id no sequence hands out, so its scope owns no row


def model_keys() -> list[str]:
    """The default embedding model and those named in GROUNDED_WARMUP_MODELS (comma-separated keys)."""
    extra = product_settings.GROUNDED_WARMUP_MODELS
    return list(dict.fromkeys([default_model_key(), *extra]))


def warm_models() -> dict[str, float]:
    timings = {}
    for key in model_keys():
        t = time.perf_counter()
        embedder = get_embedder(key)
        if not isinstance(embedder, GeminiEmbedder):  # a remote API: nothing to load, and no call at start
            embed_array(embedder, ["warm-up: which expenses can be claimed on a business trip?"], "query")
            embedder.count_tokens("warm-up")
        timings[f"model {key} ms"] = round(1000 * (time.perf_counter() - t), 1)
    return timings


def warm_parse_helper() -> dict[str, float]:
    t = time.perf_counter()
    start_helper()
    return {"parse_helper_ms": round(1000 * (time.perf_counter() - t), 1)}


def warm_search() -> dict[str, float]:
    t = time.perf_counter()
    workers = product_settings.RETRIEVAL_PARALLEL_WORKERS
    if workers > 0:  # each side thread opens its own connection now, not in a user's search
        barrier = threading.Barrier(workers, timeout=30)

        def connect() -> None:
            barrier.wait()  # all at once: one thread per worker, not one thread doing them all
            with connections["default"].cursor() as cur:
                # A full-text probe of the chunk table, the BM25 side's: its catalog entries and
                # index metadata cached on this connection. No tenant is set: RLS shows no row.
                cur.execute("SELECT count(*) FROM (SELECT 1 FROM kb_chunk WHERE tenant_id = %s "
                            "AND search_vector @@ plainto_tsquery('english', 'warm up') LIMIT 1) AS probe", [NO_TENANT])

        for future in [submit(connect, workers=workers) for _ in range(workers)]:
            future.result(timeout=60)
    search(Scope.system(NO_TENANT, principal="warm-up"), "warm up the search path", k=1, mode="hybrid")
    return {"search_ms": round(1000 * (time.perf_counter() - t), 1)}
