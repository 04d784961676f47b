"""Sending jobs: the task by name after commit (a broker), or the job's service in this process (eager mode);
and the reaper that resends jobs whose worker died or whose message was lost."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from datetime import timedelta

from celery import current_app as celery_app
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from kb.ingest.jobs import TRANSIENT_ERRORS
from kb.models import IngestJob, JobStatus
from tenants.scope import across_tenants

logger = logging.getLogger(__name__)


TASK_NAMES: dict[str, str] = {IngestJob.Kind.INGEST: "kb.ingest_document", IngestJob.Kind.REEMBED: "kb.reembed_corpus"}  # kb.tasks
# kind -> the service that runs a job of that kind in process (registered by kb.ingest.pipeline and
# kb.ingest.reembed, which import this module: the queue does not import the work it queues).
RUNNERS: dict[str, Callable[..., str]] = {}


def register_runner(kind: str, run: Callable[..., str]) -> None:
    RUNNERS[kind] = run


def enqueue_job(job_id: int, tenant_id: int, kind: str) -> None:
    """Send the job's task (by name: kb.tasks) after the surrounding transaction commits (at once
    outside one); in eager mode (CELERY_TASK_ALWAYS_EAGER), run it in this process instead.

    robust: a broker outage must not fail the upload; the job stays queued and the reaper resends it.
    """

    def send() -> None:
        if celery_app.conf.task_always_eager:
            _run_in_process(kind, job_id, tenant_id)
        elif embedded_broker_down():
            if not _warned:
                _warned.append(job_id)
                logger.warning("job %s (and any queued after it) stays queued: the embedded broker is not running "
                               "(scripts/run starts it with a worker; CELERY_TASK_ALWAYS_EAGER=1 runs jobs in the "
                               "process that queues them)", job_id)
        else:
            celery_app.send_task(TASK_NAMES[kind], args=[job_id, tenant_id])

    transaction.on_commit(send, robust=True)


_warned: list[int] = []  # once per process


def run_jobs_here_without_a_worker() -> bool:
    """For commands that wait for their jobs (ingest_folder --wait, load_demo, evaluate, reembed_corpus
    --wait): when the embedded broker is not running (no `scripts/run` beside them), run the jobs in
    this process rather than queue them for a worker that is not there. True if it switched."""
    if celery_app.conf.task_always_eager or not embedded_broker_down():
        return False
    celery_app.conf.task_always_eager = True
    logger.info("no embedded broker running: jobs run in this process")
    return True


def embedded_broker_down() -> bool:
    """The broker is a unix socket (the embedded Redis) that does not exist: sending would only wait
    out kombu's retries. The job stays queued; a worker started later gets it from the reaper."""
    url = celery_app.conf.broker_url or ""
    return url.startswith("redis+socket://") and not os.path.exists(url.removeprefix("redis+socket://"))


EAGER_RETRIES = 4


def _run_in_process(kind: str, job_id: int, tenant_id: int) -> None:
    """Eager mode (tests, benches): run the job's service here, retrying transient errors like the task
    would (Celery's eager retry re-raises instead of retrying). A final failure stays on the job row
    for the reaper; it never fails the request that queued it."""
    run = RUNNERS[kind]
    for attempt in range(EAGER_RETRIES + 1):
        try:
            run(job_id=job_id, tenant_id=tenant_id)
            return
        except TRANSIENT_ERRORS as exc:
            if attempt == EAGER_RETRIES:
                logger.error("job %s still failing after %d in-process attempts: %s", job_id, attempt + 1, exc)
                return
            time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))  # noqa: S311  (retry jitter, not a secret)


def resume_stuck_jobs(*, older_than: float = 600, running_older_than: float | None = None, limit: int = 500) -> list[int]:
    """Resend jobs whose worker died (running, heartbeat older than `running_older_than` seconds,
    default `older_than`) or whose message was lost (queued and untouched for `older_than`). A running
    job beats at every progress step, so its silence says more, sooner, than a queued job's (which may
    just be waiting its turn). Across tenants: maintenance, owner connection.

    Resending is always safe: a job still alive holds its lease and the duplicate returns "busy".
    """
    now = timezone.now()
    queued_cutoff = now - timedelta(seconds=older_than)
    running_cutoff = now - timedelta(seconds=older_than if running_older_than is None else running_older_than)
    stale = (IngestJob.objects.unscoped_dangerously(using="owner")
             .annotate(last_seen=Coalesce("heartbeat_at", "started_at", "created_at"))
             .filter(Q(status=JobStatus.RUNNING, last_seen__lt=running_cutoff) | Q(status=JobStatus.QUEUED, last_seen__lt=queued_cutoff))
             .order_by("last_seen"))
    with across_tenants("maintenance: the reaper resends stuck jobs of every tenant"):
        jobs = list(stale.values_list("id", "tenant_id", "kind")[:limit])
        if not jobs:
            return []
        # Touch them so a reaper running again soon does not resend them twice.
        IngestJob.objects.unscoped_dangerously(using="owner").filter(pk__in=[j[0] for j in jobs]).update(heartbeat_at=now)
    for job_id, tenant_id, kind in jobs:
        enqueue_job(job_id, tenant_id, kind)
    logger.info("reaper resent %d jobs", len(jobs))
    return [j[0] for j in jobs]

