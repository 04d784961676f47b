"""gunicorn settings: `gunicorn -c python:api.project.gunicorn_conf api.project.wsgi:application`.

Threaded workers (gthread): an `ask/stream` SSE response holds one thread for the length of a run
while the other threads keep serving, and the agent loop spends most of its time waiting on the
model API, not on the CPU. Everything is overridable from the environment (declared in tenants/conf/environment.py,
checked here first: a bad or unknown variable stops gunicorn before it forks a worker).
"""

from __future__ import annotations

# gunicorn reads every global of this module as one of its settings: import names and modules whose
# names are not settings ("config" is one, hence the names from tenants.conf.environment).
import multiprocessing
import os
import threading

from django.conf import settings

from tenants.conf.environment import check_environment, get_int, get_str

check_environment()

bind = get_str("GUNICORN_BIND")  # default: HOST:PORT
workers = get_int("WEB_CONCURRENCY")
worker_class = "gthread"
threads = get_int("GUNICORN_THREADS")
timeout = get_int("GUNICORN_TIMEOUT")  # the longest agent run we let a request take
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so a slow leak (e.g. a model SDK's caches) can't grow forever.
max_requests = get_int("GUNICORN_MAX_REQUESTS")
max_requests_jitter = 200
limit_request_line = 8190
limit_request_field_size = 16380
# The TLS proxy in front sets X-Forwarded-*; trust it only from these addresses.
forwarded_allow_ips = get_str("FORWARDED_ALLOW_IPS")
accesslog = get_str("GUNICORN_ACCESS_LOG")
errorlog = "-"
loglevel = get_str("GUNICORN_LOG_LEVEL")
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
proc_name = "grounded-web"
# gunicorn's control socket defaults to one path per user, shared by every instance on the machine.
control_socket_disable = get_str("GUNICORN_CONTROL_SOCKET") == ""
control_socket = get_str("GUNICORN_CONTROL_SOCKET") or None


# The pids of this server's warm workers (0: a free slot), in memory the arbiter shares with every worker
# it forks: a worker warms up before it serves only while a sibling is warm and serves meanwhile.
_warm_workers = multiprocessing.Array("q", 64)


def _set_warm(pid: int, warm: bool) -> None:
    with _warm_workers.get_lock():
        slots = _warm_workers.get_obj()
        pids = list(slots)
        if not warm:
            for i, slot in enumerate(pids):
                if slot == pid:
                    slots[i] = 0
        elif pid not in pids and 0 in pids:  # all slots taken: this worker just isn't counted
            slots[pids.index(0)] = pid


def _a_sibling_is_warm() -> bool:
    with _warm_workers.get_lock():
        return any(pid not in (0, os.getpid()) for pid in _warm_workers.get_obj())


def post_worker_init(worker) -> None:
    """After the worker has loaded Django: join the embedded PostgreSQL (its start-up is not
    thread-safe; with DATABASE_URL this does nothing), then warm up (api/project/warmup.py: the embedding
    model, the database and side connections, the search path), so that no request runs in a cold
    worker. Here rather than in post_fork, which runs before the worker has loaded Django.

    With a warm sibling (a worker recycled or restarted), the warm-up ends before this worker accepts
    a connection: the sibling serves meanwhile. With none (the server's start), nothing could answer
    until a worker is warm, so the warm-up runs in a thread while this worker accepts: `/healthz` answers
    503 "warming" at once, and warmup.WarmupGate holds every other request until the warm-up ends."""
    if settings.EMBEDDED_DATABASE:  # api/project/settings.py always defines it
        # Embedded mode only (pgserver is of no use with DATABASE_URL); the module reads settings at import,
        # which must come after check_environment() has vetted them.
        from kb.embedded.postgres import ensure_server

        ensure_server()

    from api.project import warmup  # imports models: only in a worker, which has loaded Django by now (the arbiter never does)

    if not warmup.enabled():
        return
    if not _a_sibling_is_warm():
        warmup.begin()  # "warming" (and the gate closed) from this worker's first request on
        threading.Thread(target=_warm_up, args=(worker, warmup), name="warm-up", daemon=True).start()
        return
    # In a thread, this one telling the arbiter the worker is alive meanwhile: a model load on a
    # loaded machine must not reach `timeout` and get the worker killed and forked again.
    thread = threading.Thread(target=_warm_up, args=(worker, warmup), name="warm-up", daemon=True)
    thread.start()
    while thread.is_alive():
        worker.notify()
        thread.join(timeout=1.0)


def _warm_up(worker, warmup) -> None:
    done = warmup.warm_up()
    if done["status"] == "ready":
        _set_warm(os.getpid(), True)
    worker.log.info("warm-up %s in %ss: %s", done["status"], done.get("seconds"), done.get("timings") or done.get("error"))


def child_exit(server, worker) -> None:
    """In the arbiter, for every worker that exits (SIGKILL included): no longer counted as warm."""
    _set_warm(worker.pid, False)
