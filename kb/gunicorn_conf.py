"""gunicorn settings: `gunicorn -c python:kb.gunicorn_conf kb.wsgi:application`.

Threaded workers (gthread): an `ask/stream` SSE response holds one thread for the length of a run
while the other threads keep serving, and the agent loop spends most of its time waiting on the
model API, not on the CPU. Everything is overridable from the environment.
"""

from __future__ import annotations

import multiprocessing
import os


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


bind = os.environ.get("GUNICORN_BIND", f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}")
workers = _int("WEB_CONCURRENCY", min(2 * multiprocessing.cpu_count() + 1, 9))
worker_class = "gthread"
threads = _int("GUNICORN_THREADS", 8)
timeout = _int("GUNICORN_TIMEOUT", 120)  # the longest agent run we let a request take
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so a slow leak (e.g. a model SDK's caches) can't grow forever.
max_requests = _int("GUNICORN_MAX_REQUESTS", 2000)
max_requests_jitter = 200
limit_request_line = 8190
limit_request_field_size = 16380
# The TLS proxy in front sets X-Forwarded-*; trust it only from these addresses.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-")
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
proc_name = "grounded-web"
# gunicorn's control socket defaults to one path per user, shared by every instance on the machine.
control_socket_disable = os.environ.get("GUNICORN_CONTROL_SOCKET", "") == ""
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "") or None


def post_worker_init(worker) -> None:
    """Before the worker accepts a connection: join the embedded PostgreSQL (its start-up is not
    thread-safe; with DATABASE_URL this does nothing), then warm up (kb/warmup.py: the embedding
    model, the database and side connections, the search path), so that no request meets a cold
    worker. Here rather than in post_fork, which runs before the worker has loaded Django."""
    from django.conf import settings

    if getattr(settings, "EMBEDDED_DATABASE", False):
        from kb.embedded_db import ensure_server

        ensure_server()
    import threading

    from kb import warmup

    if warmup.enabled():
        # In a thread, this one telling the arbiter the worker is alive meanwhile: a model load on a
        # loaded machine must not reach `timeout` and get the worker killed and forked again.
        thread = threading.Thread(target=warmup.warm_up, name="warm-up", daemon=True)
        thread.start()
        while thread.is_alive():
            worker.notify()
            thread.join(timeout=1.0)
        done = warmup.state()
        worker.log.info("warm-up %s in %ss: %s", done["status"], done.get("seconds"), done.get("timings") or done.get("error"))
