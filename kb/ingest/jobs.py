"""Job bookkeeping shared by every job kind: the lease (a session advisory lock), claiming, progress,
transient errors and final failure."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from kb.embedding import TransientEmbeddingError
from kb.models import Document, DocumentStatus, IngestJob, JobStatus
from tenants.scope import Scope, activate

logger = logging.getLogger(__name__)


TRANSIENT_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError, TransientEmbeddingError)


MAX_ATTEMPTS = 8  # claims of one job before it is failed for good


_LEASE_CLASS = 0x6B62  # advisory-lock namespace for job leases ("kb")


def take_lease(stack: contextlib.ExitStack, job_id: int) -> bool:
    """Session advisory lock on the job: held while this process works on it, freed if it dies.
    True if this process now holds it, False if another process does (leave the job to that one).

    Released when `stack` closes (or with the database session, e.g. when the worker is killed).
    """
    conn = connections["default"]
    key = job_id % 2_147_483_647
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LEASE_CLASS, key])
        held = bool(cur.fetchone()[0])
    if held:
        def release() -> None:
            with contextlib.suppress(Exception), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_LEASE_CLASS, key])
        stack.callback(release)
    return held


def update_job(scope: Scope, job_id: int, **fields: Any) -> None:
    """Write `fields` on the job and commit at once (its own transaction) so API and admin can watch it;
    the heartbeat moves too unless `fields` sets it."""
    fields.setdefault("heartbeat_at", timezone.now())
    with activate(scope):
        IngestJob.objects.for_scope(scope).filter(pk=job_id).update(**fields)


def claim_job(scope: Scope, job_id: int, kind: str) -> IngestJob | None:
    """Mark the job running (attempt + 1) and return it, or None when there is nothing to do: no such job
    of this kind, already done or failed, or out of attempts (MAX_ATTEMPTS: then it and its document fail).
    Call it holding the job's lease (take_lease)."""
    with activate(scope):
        job = IngestJob.objects.for_scope(scope).select_for_update().filter(pk=job_id, kind=kind).first()
        if job is None or job.status in (JobStatus.DONE, JobStatus.FAILED):
            return None
        now = timezone.now()
        if job.attempts >= MAX_ATTEMPTS:
            job.status, job.finished_at = JobStatus.FAILED, now
            job.error = f"gave up after {job.attempts} attempts: {job.error}"[:2000]
            job.save(update_fields=["status", "finished_at", "error"])
            if job.document_id:
                Document.objects.for_scope(scope).filter(pk=job.document_id).update(
                    status=DocumentStatus.FAILED, error=job.error, updated_at=now)
            return None
        job.status, job.attempts, job.heartbeat_at = JobStatus.RUNNING, job.attempts + 1, now
        job.started_at = job.started_at or now
        job.save(update_fields=["status", "attempts", "heartbeat_at", "started_at"])
        return job


def lease_and_claim(stack: contextlib.ExitStack, scope: Scope, job_id: int, kind: str) -> IngestJob | str:
    """Take the job's lease (held until `stack` closes: take_lease) and claim it (claim_job): the claimed
    job, or the runner's result when there is nothing to do here: "busy" (another process holds the
    lease) or "skipped" (claim_job returned None)."""
    if not take_lease(stack, job_id):
        return "busy"
    return claim_job(scope, job_id, kind) or "skipped"


def running_jobs(scope: Scope, job_ids: list[int] | set[int]) -> set[int]:
    """Those of `job_ids` still running. Deleting a document deletes its jobs (and failing a job ends it):
    a job missing here is cancelled, and its worker stops working for it at its next checkpoint."""
    if not job_ids:
        return set()
    with activate(scope):
        return set(IngestJob.objects.for_scope(scope).filter(pk__in=list(job_ids), status=JobStatus.RUNNING)
                   .values_list("pk", flat=True))


def note_transient(scope: Scope, job_id: int, exc: Exception) -> None:
    """A running job hit a transient error (TRANSIENT_ERRORS): back to queued with the reason; the task
    retries (and the reaper would resend it). Never raises: the database may be what failed."""
    try:
        with activate(scope):  # only a job still running: group members already written stay done
            IngestJob.objects.for_scope(scope).filter(pk=job_id, status=JobStatus.RUNNING).update(
                status=JobStatus.QUEUED, stage="retrying", error=f"{type(exc).__name__}: {exc}"[:2000], heartbeat_at=timezone.now())
    except Exception:  # the database itself may be what failed
        logger.warning("could not record transient failure of job %s", job_id, exc_info=True)


def fail_job(scope: Scope, job: IngestJob, reason: str) -> str:
    """Fail a job that is not finished yet (a group member already written stays done), and its document,
    with `reason`. Returns "failed", the job's outcome."""
    now = timezone.now()
    with activate(scope):
        failed = IngestJob.objects.for_scope(scope).filter(pk=job.pk).exclude(status__in=[JobStatus.DONE, JobStatus.FAILED]).update(
            status=JobStatus.FAILED, stage="failed", error=reason[:2000], finished_at=now, heartbeat_at=now)
        if failed and job.document_id:
            Document.objects.for_scope(scope).filter(pk=job.document_id).update(
                status=DocumentStatus.FAILED, error=reason[:2000], updated_at=now)
    return "failed"

