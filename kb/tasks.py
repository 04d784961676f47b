"""Thin Celery tasks: ids + tenant id in, one service call, retries on transient errors.

acks_late + reject_on_worker_lost: a message is acknowledged only after its service returned, so a
worker killed mid-job leaves it for redelivery; the services are idempotent, so redelivery is safe.
"""

from __future__ import annotations

from typing import TypedDict

from celery import shared_task

from kb import ingest
from kb.sources.sync import run_sync, schedule_due_sources


class _RetryOptions(TypedDict):
    acks_late: bool
    reject_on_worker_lost: bool
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int


_RETRY: _RetryOptions = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": ingest.TRANSIENT_ERRORS,
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(name="kb.ingest_document", **_RETRY)
def ingest_document_task(job_id: int, tenant_id: int) -> str:
    return ingest.run_ingest_job(job_id=job_id, tenant_id=tenant_id)


@shared_task(name="kb.reembed_corpus", **_RETRY)
def reembed_corpus_task(job_id: int, tenant_id: int) -> str:
    return ingest.run_reembed_job(job_id=job_id, tenant_id=tenant_id)


@shared_task(name="kb.reap_stuck_jobs", acks_late=True)
def reap_stuck_jobs_task(older_than: float = 600, running_older_than: float | None = None) -> int:
    return len(ingest.resume_stuck_jobs(older_than=older_than, running_older_than=running_older_than))


@shared_task(name="kb.sync_source", **_RETRY)
def sync_source_task(sync_id: int, tenant_id: int) -> str:
    return run_sync(sync_id=sync_id, tenant_id=tenant_id)


@shared_task(name="kb.schedule_source_syncs", acks_late=True)
def schedule_source_syncs_task() -> int:
    return len(schedule_due_sources())
