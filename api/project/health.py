"""GET /healthz: database, pgvector version, the database wall's key, broker, this process's warm-up (api/project/warmup.py). 200 when all
are up and the warm-up (if one was started) is done; 503 otherwise, with status "warming" while it runs.

Apps add informational sections through tenants.process_hooks.HEALTH_REPORTS (agents adds "providers": each
configured answer provider's probed capabilities). A report never blocks on a network call and
never turns the status to 503; one that raises is reported as its error.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import DatabaseError, connections
from django.http import HttpRequest, JsonResponse

from api.project import warmup
from kb.embedded.redis_broker import client_url
from tenants.db_wall import key_matches
from tenants.process_hooks import HEALTH_REPORTS

logger = logging.getLogger(__name__)
# The sections of the report that make it degraded when not "ok" (and their errors), named in its log line.
_CHECKS = ("database", "database_error", "pgvector", "database_wall", "broker", "broker_error", "warm_up")


def healthz(request: HttpRequest) -> JsonResponse:
    report: dict = {"database": "down", "pgvector": None, "broker": "eager" if settings.CELERY_TASK_ALWAYS_EAGER else "down"}
    ok = True
    try:
        with connections["default"].cursor() as cur:
            cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cur.fetchone()
        report["database"] = "ok"
        report["pgvector"] = row[0] if row else None
        ok = ok and row is not None
        # A wall key other than the one `migrate` installed (or clocks minutes apart) would hide every row from this process.
        try:
            report["database_wall"] = ("ok" if key_matches() else
                                       "key mismatch: run migrate with this process's DATABASE_WALL_KEY(_FILE), and check the clocks")
            ok = ok and report["database_wall"] == "ok"
        except DatabaseError:  # not migrated yet: the old policies still accept this code's statements
            report["database_wall"] = "not installed: run migrate"
    except Exception as exc:  # report, don't raise: this is the health endpoint
        report["database_error"] = exc.__class__.__name__
        ok = False
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        try:
            redis.Redis.from_url(client_url(settings.CELERY_BROKER_URL), socket_timeout=2, socket_connect_timeout=2).ping()
            report["broker"] = "ok"
        except Exception as exc:
            report["broker_error"] = exc.__class__.__name__
            ok = False

    warm = warmup.state()
    if warm["status"] != "off":
        report["warm_up"] = warm
        ok = ok and warm["status"] == "ready"
    for name, make in HEALTH_REPORTS.items():
        try:
            report[name] = make()
        except Exception as exc:
            report[name] = {"error": exc.__class__.__name__}
    report["status"] = "ok" if ok else ("warming" if warm["status"] == "warming" else "degraded")
    if report["status"] == "degraded":  # (Django's own "Service Unavailable" line is filtered: settings.LOGGING)
        logger.warning("/healthz degraded: %s", {k: v for k, v in report.items() if k in _CHECKS and v != "ok"})
    return JsonResponse(report, status=200 if ok else 503)
