"""Side connections: run one read-only statement script beside the caller's, on another connection.

A hybrid search runs two independent ranking queries (vector and BM25). On one connection they
run one after the other; PostgreSQL can run them at once on two (measured in docs/retrieval.md:
a hybrid search costs about the larger of the two instead of their sum). Worker threads here each
keep their own Django connection (connections are per thread) for the life of the process, so
no search pays for connecting.

Only for statements that need no transaction shared with the caller: search() uses it when it
is not inside the caller's transaction, where every statement script is its own transaction
anyway (and sets the RLS tenant first), so the side connection sees exactly what the caller's
would. A failure on a side connection closes it (the next task reconnects) and is raised to
the caller, which runs the work itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from django.db import connections

T = TypeVar("T")

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool): a forked child makes its own


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kb-side"))
        return _pool[1]


def submit(fn: Callable[..., T], *args: object, using: str = "default", workers: int = 2) -> Future[T]:
    """Run `fn(*args)` on a worker thread, whose `connections[using]` is its own connection."""

    def run() -> T:
        try:
            return fn(*args)
        except Exception:
            connections[using].close()  # possibly broken: reconnect on the next task
            raise

    return _executor(workers).submit(run)

