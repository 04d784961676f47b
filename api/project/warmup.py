"""Warm-up at process start, so that no user request pays for loading the embedding model, the views
or the first search (figures: docs/ingestion.md, "The default run, measured").

A gunicorn worker runs `warm_up()` from `post_worker_init` (api/project/gunicorn_conf.py, after Django
is set up), a Celery pool process in `worker_process_init` (api/project/celery.py). A web worker
started while a sibling is warm warms before it accepts a connection (that sibling serves meanwhile);
one with no warm sibling (the server's start) warms in a thread while it accepts, so that `/healthz`
answers 503 "warming" at once, and `WarmupGate` holds every other request until the warm-up ends
(at most GATE_SECONDS): either way no request runs in a cold worker. The project's own steps come first: the database
connection and, in a web process, every view (the URLconf) and the broker connection. Then the steps
the apps registered (tenants.process_hooks: kb's embedding models, parse helper and search path, kb/warm.py).

`/healthz` reports `warm_up` and answers 503 with status "warming" while it runs (or "failed")
in the process answering. GROUNDED_WARMUP=0 turns it off (bench/embedded_stack_bench.py compares).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import current_app
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.urls import get_resolver

from kb.ingest.queue import embedded_broker_down
from tenants.conf.environment import get_bool
from tenants.process_hooks import warmup_steps

logger = logging.getLogger(__name__)

_lock = threading.Lock()
# Nothing asked for a warm-up in this process (tests, manage.py): health does not wait for one.
_state: dict[str, Any] = {"status": "off"}
# Set whenever no warm-up is running: WarmupGate waits on it.
_not_warming = threading.Event()
_not_warming.set()
# The longest a request waits for its worker's warm-up (measured: 10 s to 30 s on a loaded 2-core machine).
GATE_SECONDS = 120.0


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
        _not_warming.clear()


def _end(**fields: Any) -> None:
    with _lock:
        _state.update(fields)
        _not_warming.set()


def wait_until_warm(timeout: float = GATE_SECONDS) -> bool:
    """Block while this process warms up (at most `timeout` s); False if it is still warming then."""
    return _not_warming.wait(timeout)


class WarmupGate:
    """Middleware (first in MIDDLEWARE): while this process warms up, a request other than `/healthz`
    waits for the warm-up to end (at most GATE_SECONDS, then it is served anyway), so that it never
    runs in a cold process; `/healthz` answers at once (503 "warming"). Outside a warm-up: no wait."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info != "/healthz":
            wait_until_warm()
        return self.get_response(request)


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
        if web:
            t = time.perf_counter()
            _warm_requests()
            timings["requests_ms"] = round(1000 * (time.perf_counter() - t), 1)
        for step in warmup_steps(web=web):
            timings.update(step.run())
    except Exception as exc:  # a cold process still serves; health says why it is not warm
        logger.exception("warm-up failed")
        _end(status="failed", error=f"{type(exc).__name__}: {exc}"[:500], timings=timings)
        return state()
    _end(status="ready", seconds=round(time.time() - state()["started"], 2), timings=timings)
    logger.info("warm-up done in %.2fs: %s", _state["seconds"], timings)
    return state()


def _warm_database() -> None:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT 1")


def _warm_requests() -> None:
    """Import every view (otherwise the first request loads the URLconf and, through it, every view)
    and open the connection an upload sends its job on."""
    get_resolver().url_patterns  # noqa: B018  (imports the root URLconf and, through it, every view)
    get_resolver()._populate()
    if not current_app.conf.task_always_eager and not embedded_broker_down():
        with current_app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
