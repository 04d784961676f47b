"""One way for tests to drop this process's cached Celery broker connections.

kombu keeps process-wide pools keyed by the broker URL (`kombu.pools`), and the Celery app caches
its own references to them. A test that closes a pool (or restarts a broker) leaves a closed pool
behind under that URL; every later send to the same URL then fails with "Acquire on closed pool".
Resetting both the registry and the app's references makes the next send connect afresh.
"""

from __future__ import annotations


def reset_celery_pools(*, close: bool = False) -> None:
    """Forget every cached broker connection; with close=True, close the app's open ones first."""
    from kombu import pools

    from api.project.celery import app

    if close and app._pool is not None:
        app._pool.force_close_all()
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
