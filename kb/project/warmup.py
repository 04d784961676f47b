"""Warm-up at process start, so that no user request pays for loading the embedding model, the views
or the first search (figures: docs/ingestion.md, "The default run, measured").

A gunicorn worker runs `warm_up()` in `post_worker_init` (after Django is set up, before it accepts
a connection: a worker is never given a request while cold), a Celery pool process in
`worker_process_init`. It loads the embedding models (the default one and GROUNDED_WARMUP_MODELS)
and runs one query embedding through each local one (the first forward pass of a torch model is
several times slower than the next) and opens the database connection; a web worker also imports
every view (the URLconf), connects to the broker, opens the retrieval side connections and runs
the search path once on an empty scope (tenant `NO_TENANT`, which owns nothing: row
level security shows it no row) so its modules, SQL and the server's catalog caches are warm.

`/healthz` reports `warm_up` and answers 503 with status "warming" while it runs (or "failed")
in the process answering. GROUNDED_WARMUP=0 turns it off (bench/embedded_stack_bench.py compares).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections
from django.urls import get_resolver

from kb.embedding import GeminiEmbedder, default_model_key, embed_array, get_embedder
from kb.ingest.queue import _embedded_broker_down
from kb.parse_sandbox import start_helper
from kb.project.celery import app
from kb.project.config import get_bool, get_list
from kb.retrieval import search
from kb.retrieval.side_connections import submit
from tenants.scope import Scope

logger = logging.getLogger(__name__)

NO_TENANT = 2**63 - 1  # the largest bigint: a tenant id no sequence hands out, so its scope owns no row
_lock = threading.Lock()
# Nothing asked for a warm-up in this process (tests, manage.py): health does not wait for one.
_state: dict[str, Any] = {"status": "off"}


def enabled() -> bool:
    return get_bool("GROUNDED_WARMUP")


def state() -> dict[str, Any]:
    """This process's warm-up: {"status": "off" | "warming" | "ready" | "failed", ...}."""
    with _lock:
        return dict(_state)


def begin() -> None:
    """Mark the warm-up as started: from here until `warm_up` ends, /healthz answers 503 "warming"."""
    with _lock:
        _state.clear()
        _state.update(status="warming", started=time.time())


def model_keys() -> list[str]:
    """The default embedding model and those named in GROUNDED_WARMUP_MODELS (comma-separated keys)."""
    extra = get_list("GROUNDED_WARMUP_MODELS")
    return list(dict.fromkeys([default_model_key(), *extra]))


def warm_up(*, web: bool = True) -> dict[str, Any]:
    """Warm this process (see the module docstring); returns and records what it did, with timings.
    `web`: also the request side (URLs and views, the broker connection, the search path).

    Never raises: a failure is logged and recorded ("failed"), and the process serves anyway, cold.
    """
    begin()
    timings: dict[str, float] = {}
    try:
        t = time.perf_counter()
        _warm_database()
        timings["database_ms"] = round(1000 * (time.perf_counter() - t), 1)
        for key in model_keys():
            t = time.perf_counter()
            _warm_model(key)
            timings[f"model {key} ms"] = round(1000 * (time.perf_counter() - t), 1)
        if not web:  # a worker: the parse sandbox's helper process (kb.parse_sandbox), started once
            t = time.perf_counter()
            start_helper()
            timings["parse_helper_ms"] = round(1000 * (time.perf_counter() - t), 1)
        if web:
            t = time.perf_counter()
            _warm_requests()
            timings["requests_ms"] = round(1000 * (time.perf_counter() - t), 1)
            t = time.perf_counter()
            _warm_search()
            timings["search_ms"] = round(1000 * (time.perf_counter() - t), 1)
    except Exception as exc:  # a cold process still serves; health says why it is not warm
        logger.exception("warm-up failed")
        with _lock:
            _state.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:500], timings=timings)
        return state()
    with _lock:
        _state.update(status="ready", seconds=round(time.time() - _state["started"], 2), timings=timings)
    logger.info("warm-up done in %.2fs: %s", _state["seconds"], timings)
    return state()


def _warm_database() -> None:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT 1")


def _warm_model(model_key: str) -> None:
    embedder = get_embedder(model_key)
    if isinstance(embedder, GeminiEmbedder):  # a remote API: nothing to load, and no call at start
        return
    embed_array(embedder, ["warm-up: which expenses can be claimed on a business trip?"], "query")
    embedder.count_tokens("warm-up")


def _warm_requests() -> None:
    """Import every view (otherwise the first request loads the URLconf and, through it, every view)
    and open the connection an upload sends its job on."""
    get_resolver().url_patterns  # noqa: B018  (imports the root URLconf and, through it, every view)
    get_resolver()._populate()
    if not app.conf.task_always_eager and not _embedded_broker_down():
        with app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)


def _warm_search() -> None:
    workers = settings.RETRIEVAL_PARALLEL_WORKERS
    if workers > 0:  # each side thread opens its own connection now, not in a user's search
        barrier = threading.Barrier(workers, timeout=30)

        def connect() -> None:
            barrier.wait()  # all at once: one thread per worker, not one thread doing them all
            with connections["default"].cursor() as cur:
                # A full-text probe of the chunk table, the BM25 side's: its catalog entries and
                # index metadata cached on this connection. No tenant is set: RLS shows no row.
                cur.execute("SELECT count(*) FROM (SELECT 1 FROM kb_chunk "
                            "WHERE search_vector @@ plainto_tsquery('english', 'warm up') LIMIT 1) AS probe")

        for future in [submit(connect, workers=workers) for _ in range(workers)]:
            future.result(timeout=60)
    search(Scope.system(NO_TENANT, principal="warm-up"), "warm up the search path", k=1, mode="hybrid")
