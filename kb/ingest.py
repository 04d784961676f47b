"""Ingestion services: upload, the ingest job (parse -> chunk -> embed -> write), reaper, re-embed.

Guarantees:
- A job is run by one worker at a time: a session advisory lock on the job id is the lease, and it
  dies with the worker's database session (a SIGKILLed worker frees it at once).
- Re-running or re-delivering a job never duplicates anything: a document's chunks are replaced
  in ONE transaction (delete + insert), so readers see the old set or the new, never a mix.
- Vectors are staged per batch in the EmbeddingCache (tenant, model key, sha256 of chunk text),
  committed with the job's progress: a crashed job resumes without re-embedding finished batches,
  and unchanged text is never embedded twice, across documents, re-ingests and re-embeds.
- Every read and write of tenant data runs inside `activate(scope)` (RLS). Only the reaper reads
  across tenants, through the named owner escape hatch.

Raw SQL here (not in retrieval) is the write path: chunk rows are inserted with unnest() over binary
arrays (one round trip per document) so `search_vector` is computed by PostgreSQL in the same
statement, and vectors cross the wire as binary float32, never as text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connections, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from kb import access
from kb.embedding import Embedder, TransientEmbeddingError, embed_windowed, get_embedder
from kb.models import Chunk, Corpus, Document, DocumentContent, DocumentStatus, EmbeddingCache, IngestJob, JobStatus
from kb.vector_index import HALFVEC_MAX_DIM, ensure_vector_index
from tenants.scope import Scope, activate

logger = logging.getLogger(__name__)

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError, TransientEmbeddingError)
MAX_ATTEMPTS = 8  # claims of one job before it is failed for good
_LEASE_CLASS = 0x6B62  # advisory-lock namespace for job leases ("kb")


def embed_batch_size() -> int:
    return int(os.environ.get("GROUNDED_EMBED_BATCH", "64"))


class UploadRejected(ValueError):
    """The upload is refused before anything is stored; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _ModelSwitched(Exception):
    """The corpus switched embedding model while this job embedded with the old one."""


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- Upload ---------------------------------------------------------------------------------------

def upload_document(*, scope: Scope, corpus: Corpus, filename: str, data: bytes, metadata: dict | None = None,
                    title: str | None = None) -> tuple[Document, IngestJob | None]:
    """Store an upload and queue its ingestion; returns at once (the job runs after commit).

    Same source name and same bytes: no-op, returns (document, None) (a failed document is retried).
    Changed bytes: version + 1, status pending, a new job. Raises UploadRejected(field, message).
    """
    from kb.parsing import ParseError, detect_type

    access.check_may_edit_documents(scope)
    if corpus.tenant_id != scope.tenant_id or not scope.sees_department(corpus.department_id):
        raise UploadRejected("corpus", "corpus not found")
    if not scope.may_change_department(corpus.department_id):
        raise UploadRejected("corpus", "a department-limited key or member can upload only to its departments' corpora, "
                                       "not to a tenant-wide one")
    filename = (filename or "").strip()
    if not filename:
        raise UploadRejected("filename", "a file name is required")
    if len(filename) > 500:
        raise UploadRejected("filename", "file name longer than 500 characters")
    if title is not None and len(title) > 500:
        raise UploadRejected("title", "title longer than 500 characters")
    if not data:
        raise UploadRejected("file", "the file is empty")
    if len(data) > settings.MAX_UPLOAD_BYTES:
        raise UploadRejected("file", f"the file is {len(data)} bytes; the limit is {settings.MAX_UPLOAD_BYTES} bytes")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise UploadRejected("metadata", "metadata must be a JSON object")
        try:
            json.dumps(metadata)
        except (TypeError, ValueError) as exc:
            raise UploadRejected("metadata", f"metadata is not JSON-serialisable: {exc}") from None
    try:
        mime_type = detect_type(filename, data)
    except ParseError as exc:
        raise UploadRejected("file", str(exc)) from None

    sha = hashlib.sha256(data).hexdigest()
    with activate(scope):
        document = Document.objects.for_scope(scope).select_for_update().filter(corpus=corpus, source_name=filename).first()
        if document is None:
            try:
                with transaction.atomic():
                    document = Document.objects.create(
                        tenant_id=scope.tenant_id, department_id=corpus.department_id, corpus=corpus,
                        title=title or filename, source_name=filename, mime_type=mime_type, sha256=sha,
                        size_bytes=len(data), metadata=metadata or {}, status=DocumentStatus.PENDING)
            except IntegrityError:  # a concurrent upload of the same name won the race
                document = Document.objects.for_scope(scope).select_for_update().get(corpus=corpus, source_name=filename)
            else:
                DocumentContent.objects.create(document=document, tenant_id=scope.tenant_id, data=data)
                return document, _queue_ingest(scope, document)
        if document.sha256 == sha and document.status != DocumentStatus.FAILED:
            changed = []
            if metadata is not None and metadata != document.metadata:
                document.metadata, changed = metadata, [*changed, "metadata"]
            if title and title != document.title:
                document.title, changed = title, [*changed, "title"]
            if changed:
                document.save(update_fields=[*changed, "updated_at"])
            return document, None
        if document.sha256 != sha:
            document.version += 1
        document.sha256, document.size_bytes, document.mime_type = sha, len(data), mime_type
        document.status, document.error = DocumentStatus.PENDING, ""
        if metadata is not None:
            document.metadata = metadata
        if title:
            document.title = title
        document.save()
        if not DocumentContent.objects.for_scope(scope).filter(document=document).update(data=data):
            DocumentContent.objects.create(document=document, tenant_id=scope.tenant_id, data=data)
        return document, _queue_ingest(scope, document)


def reingest_document(*, scope: Scope, document: Document) -> IngestJob:
    """Parse, chunk and embed the stored bytes again (e.g. after a parser upgrade); returns the new job."""
    access.check_may_change(scope, document, "document")
    with activate(scope):
        locked = Document.objects.for_scope(scope).select_for_update().get(pk=document.pk)
        Document.objects.for_scope(scope).filter(pk=locked.pk).update(status=DocumentStatus.PENDING, error="",
                                                                     updated_at=timezone.now())
        return _queue_ingest(scope, locked)


def delete_document(*, scope: Scope, document: Document) -> None:
    """Delete a document with its chunks, content and jobs; the corpus's chunk count follows."""
    access.check_may_change(scope, document, "document")
    with activate(scope):
        Corpus.objects.for_scope(scope).select_for_update().filter(pk=document.corpus_id).first()  # serialise with writers
        locked = Document.objects.for_scope(scope).select_for_update().filter(pk=document.pk).first()
        if locked is None:
            return
        removed = Chunk.objects.for_scope(scope).filter(document_id=locked.pk).count()
        locked.delete()
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_corpus SET chunk_count = GREATEST(0, chunk_count - %s) WHERE id = %s", [removed, locked.corpus_id])


def _queue_ingest(scope: Scope, document: Document) -> IngestJob:
    job = IngestJob.objects.create(tenant_id=scope.tenant_id, corpus_id=document.corpus_id, document=document,
                                   kind=IngestJob.Kind.INGEST, status=JobStatus.QUEUED, stage="queued")
    enqueue_job(job.id, scope.tenant_id, job.kind)
    return job


def enqueue_job(job_id: int, tenant_id: int, kind: str) -> None:
    """Send the job's task after the surrounding transaction commits (at once outside one).

    robust: a broker outage must not fail the upload; the job stays queued and the reaper resends it.
    """
    from kb import tasks

    task = tasks.reembed_corpus_task if kind == IngestJob.Kind.REEMBED else tasks.ingest_document_task

    def send() -> None:
        if task.app.conf.task_always_eager:
            _run_in_process(kind, job_id, tenant_id)
        else:
            task.delay(job_id, tenant_id)

    transaction.on_commit(send, robust=True)


EAGER_RETRIES = 4


def _run_in_process(kind: str, job_id: int, tenant_id: int) -> None:
    """No broker (embedded mode): run the job's service here, retrying transient errors like the task
    would (Celery's eager retry re-raises instead of retrying). A final failure stays on the job row
    for the reaper; it never fails the request that queued it."""
    run = run_reembed_job if kind == IngestJob.Kind.REEMBED else run_ingest_job
    for attempt in range(EAGER_RETRIES + 1):
        try:
            run(job_id=job_id, tenant_id=tenant_id)
            return
        except TRANSIENT_ERRORS as exc:
            if attempt == EAGER_RETRIES:
                logger.error("job %s still failing after %d in-process attempts: %s", job_id, attempt + 1, exc)
                return
            time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0))


# --- Job lease and bookkeeping -------------------------------------------------------------------

def _take_lease(stack: contextlib.ExitStack, job_id: int) -> bool:
    """Session advisory lock on the job: held while this process works on it, freed if it dies.

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


def _update_job(scope: Scope, job_id: int, **fields: Any) -> None:
    """Commit progress at once (its own transaction) so API and admin can watch it."""
    fields.setdefault("heartbeat_at", timezone.now())
    with activate(scope):
        IngestJob.objects.for_scope(scope).filter(pk=job_id).update(**fields)


def _claim(scope: Scope, job_id: int, kind: str) -> IngestJob | None:
    """Mark the job running (attempt + 1) or return None when there is nothing to do."""
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


def _note_transient(scope: Scope, job_id: int, exc: Exception) -> None:
    """Back to queued with the reason; the task retries (and the reaper would resend it)."""
    try:
        with activate(scope):  # only a job still running: group members already written stay done
            IngestJob.objects.for_scope(scope).filter(pk=job_id, status=JobStatus.RUNNING).update(
                status=JobStatus.QUEUED, stage="retrying", error=f"{type(exc).__name__}: {exc}"[:2000], heartbeat_at=timezone.now())
    except Exception:  # the database itself may be what failed
        logger.warning("could not record transient failure of job %s", job_id, exc_info=True)


def _fail(scope: Scope, job: IngestJob, reason: str) -> str:
    """Fail a job that is not finished yet (a group member already written stays done), and its document."""
    now = timezone.now()
    with activate(scope):
        failed = IngestJob.objects.for_scope(scope).filter(pk=job.pk).exclude(status__in=[JobStatus.DONE, JobStatus.FAILED]).update(
            status=JobStatus.FAILED, stage="failed", error=reason[:2000], finished_at=now, heartbeat_at=now)
        if failed and job.document_id:
            Document.objects.for_scope(scope).filter(pk=job.document_id).update(
                status=DocumentStatus.FAILED, error=reason[:2000], updated_at=now)
    return "failed"


# --- Ingest job -----------------------------------------------------------------------------------

def group_max_jobs() -> int:
    return max(1, int(os.environ.get("GROUNDED_INGEST_GROUP", "32")))


@dataclass(frozen=True)
class _Source:
    document: Document
    corpus: Corpus
    data: bytes
    sha256: str


@dataclass
class _Prepared:
    """A parsed and chunked document, waiting for its vectors."""

    job: IngestJob
    source: _Source
    title: str
    mime_type: str
    spans: list
    hashes: list[str]
    flags: list[list[str]]


@dataclass
class _ChunkRows:
    spans: list
    hashes: list[str]
    vectors: dict[str, np.ndarray]
    flags: list[list[str]]
    # Per chunk: (start, end, sha256) of each sentence whose vector is in `vectors`; None: no sentence vectors.
    sentences: list[list[tuple[int, int, str]]] | None = None


def run_ingest_job(*, job_id: int, tenant_id: int) -> str:
    """Run one ingest job to the end; idempotent. Returns "done", "failed", "superseded", "skipped" or "busy".

    The job also takes over other queued ingest jobs of the same corpus (up to GROUNDED_INGEST_GROUP,
    each under its own lease), so a bulk upload is embedded in full batches across documents; their
    own messages later find them done. Transient errors (database, embedder rate limits/outages) put
    the jobs back to queued and are re-raised for the task to retry; a document's own problem
    (parse error, bug) fails that document only, with the reason.
    """
    scope = Scope.system(tenant_id, principal=f"ingest-job:{job_id}")
    if _finished(scope, job_id):  # a duplicate delivery, or a job a group already took: no lock needed
        return "skipped"
    with contextlib.ExitStack() as leases:
        if not _take_lease(leases, job_id):
            return "busy"
        job = _claim(scope, job_id, IngestJob.Kind.INGEST)
        if job is None:
            return "skipped"
        group = [job, *_claim_companions(scope, job, leases)]
        try:
            outcomes = _ingest_group(scope, group)
        except TRANSIENT_ERRORS as exc:
            for member in group:
                _note_transient(scope, member.pk, exc)
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed", job_id)
            for member in group:
                _fail(scope, member, f"internal error: {type(exc).__name__}: {exc}")
            return "failed"
        return outcomes[job.pk]


def _finished(scope: Scope, job_id: int) -> bool:
    with activate(scope):
        status = IngestJob.objects.for_scope(scope).filter(pk=job_id).values_list("status", flat=True).first()
    return status in (JobStatus.DONE, JobStatus.FAILED, None)


def _claim_companions(scope: Scope, job: IngestJob, leases: contextlib.ExitStack) -> list[IngestJob]:
    limit = group_max_jobs() - 1
    if limit <= 0:
        return []
    with activate(scope):
        candidates = list(IngestJob.objects.for_scope(scope)
                          .filter(corpus_id=job.corpus_id, kind=IngestJob.Kind.INGEST, status=JobStatus.QUEUED,
                                  attempts__lt=MAX_ATTEMPTS)
                          .exclude(pk=job.pk).order_by("pk").values_list("pk", flat=True)[:limit * 2])
    taken: list[IngestJob] = []
    for pk in candidates:
        if len(taken) >= limit:
            break
        if _take_lease(leases, pk) and (claimed := _claim(scope, pk, IngestJob.Kind.INGEST)) is not None:
            taken.append(claimed)
    return taken


def _load_source(scope: Scope, job: IngestJob) -> _Source:
    with activate(scope):
        document = Document.objects.for_scope(scope).select_related("corpus").get(pk=job.document_id)
        data = bytes(DocumentContent.objects.for_scope(scope).values_list("data", flat=True).get(document_id=document.pk))
        Document.objects.for_scope(scope).filter(pk=document.pk).update(status=DocumentStatus.PROCESSING, updated_at=timezone.now())
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(stage="parse", error="", heartbeat_at=timezone.now())
    return _Source(document, document.corpus, data, hashlib.sha256(data).hexdigest())


def _ingest_group(scope: Scope, jobs: list[IngestJob]) -> dict[int, str]:
    """parse + chunk each document, embed all their chunks together, write each document on its own."""
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).get(pk=jobs[0].corpus_id)
    embedder = get_embedder(corpus.model_key)
    _ensure_index_outside_transactions(corpus.model_key, corpus.embedding_dim)
    outcomes: dict[int, str] = {}
    prepared: list[_Prepared] = []
    for job in jobs:
        try:
            result = _prepare(scope, job, corpus, embedder)
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed while parsing", job.pk)
            outcomes[job.pk] = _fail(scope, job, f"internal error: {type(exc).__name__}: {exc}")
            continue
        if isinstance(result, str):
            outcomes[job.pk] = result
        else:
            prepared.append(result)
    vectors = _vectors_for(scope, embedder, {h: s.text for p in prepared for h, s in zip(p.hashes, p.spans, strict=True)},
                           progress={p.job.pk: p.hashes for p in prepared})
    sentences = _sentence_vectors(scope, embedder, prepared, vectors) if corpus.sentence_vectors else {}
    for p in prepared:
        rows = _ChunkRows(spans=p.spans, hashes=p.hashes, vectors=vectors, flags=p.flags, sentences=sentences.get(p.job.pk))
        try:
            outcomes[p.job.pk] = _write_chunks(scope, p.job, p.source, embedder.model_key, p.title, p.mime_type, rows)
        except _ModelSwitched:  # a re-embed switched the corpus meanwhile: chunk and embed again, later
            _update_job(scope, p.job.pk, status=JobStatus.QUEUED, stage="requeued: model switched")
            enqueue_job(p.job.pk, scope.tenant_id, IngestJob.Kind.INGEST)
            outcomes[p.job.pk] = "requeued"
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed while writing", p.job.pk)
            outcomes[p.job.pk] = _fail(scope, p.job, f"internal error: {type(exc).__name__}: {exc}")
    return outcomes


def _sentence_vectors(scope: Scope, embedder: Embedder, prepared: list[_Prepared],
                      vectors: dict[str, np.ndarray]) -> dict[int, list[list[tuple[int, int, str]]]]:
    """Embed every sentence of the prepared chunks (kb.sentences) into `vectors`, through the same
    cache; job id -> per chunk, its sentences as (start, end, sha256) relative to the chunk text."""
    from kb.sentences import sentence_spans

    out: dict[int, list[list[tuple[int, int, str]]]] = {}
    texts: dict[str, str] = {}
    for p in prepared:
        per_chunk = []
        for span in p.spans:
            found = []
            for s, e in sentence_spans(span.text):
                h = content_hash(span.text[s:e])
                texts.setdefault(h, span.text[s:e])
                found.append((s, e, h))
            per_chunk.append(found)
        out[p.job.pk] = per_chunk
    if prepared:
        with activate(scope):  # a stage of its own in the job's progress, and a fresh heartbeat for the reaper
            IngestJob.objects.for_scope(scope).filter(pk__in=[p.job.pk for p in prepared]).update(
                stage="embed sentences", heartbeat_at=timezone.now())
    vectors.update(_vectors_for(scope, embedder, texts))
    return out


def _prepare(scope: Scope, job: IngestJob, corpus: Corpus, embedder: Embedder) -> _Prepared | str:
    from kb.chunking import chunk_document
    from kb.injection import detect_injection
    from kb.parsing import ParseError, parse

    source = _load_source(scope, job)
    document = source.document
    try:
        parsed = parse(source.data, document.source_name, document.mime_type or None)
    except ParseError as exc:
        return _fail(scope, job, f"parse error: {exc}")
    # A chunk may be larger than the model's window: it is embedded by windows (embed_windowed).
    target = corpus.chunk_target_tokens
    window = embedder.max_tokens - getattr(embedder, "reserved_tokens", 0)
    spans = chunk_document(parsed, target_tokens=target, overlap_tokens=min(corpus.chunk_overlap_tokens, target - 1),
                           max_tokens=max(target, window), count_tokens=_memo_counter(embedder))
    if not spans:
        return _fail(scope, job, "parse error: the document has no text to index")
    title = parsed.title if document.title == document.source_name and parsed.title else document.title
    return _Prepared(job=job, source=source, title=title, mime_type=parsed.mime_type, spans=spans,
                     hashes=[content_hash(s.text) for s in spans], flags=[detect_injection(s.text) for s in spans])


def _memo_counter(embedder: Embedder):
    """count_tokens with a per-document memo (overlap and repeated lines are counted once)."""
    seen: dict[str, int] = {}
    count = embedder.count_tokens

    def counter(text: str) -> int:
        n = seen.get(text)
        if n is None:
            n = seen[text] = count(text)
        return n

    return counter


def _ensure_index_outside_transactions(model_key: str, dim: int) -> None:
    # Never while this thread holds an open transaction: the build could wait on our own locks.
    if dim <= HALFVEC_MAX_DIM and not connections["default"].in_atomic_block and not connections["owner"].in_atomic_block:
        ensure_vector_index(model_key, dim)


def _vectors_for(scope: Scope, embedder: Embedder, texts: dict[str, str],
                 progress: dict[int, list[str]] | None = None) -> dict[str, np.ndarray]:
    """sha256 -> vector for every text ({sha256: text}): cache first, then the embedder in batches,
    each batch written to the cache and committed together with the progress of the jobs
    (`progress`: job id -> its chunks' hashes) whose chunks it completed."""
    with activate(scope):
        vectors = _cache_lookup(scope, embedder.model_key, list(texts))
    missing = [h for h in texts if h not in vectors]
    users: dict[str, list[int]] = {}
    done: dict[int, int] = {}
    now = timezone.now()
    if progress:
        with activate(scope):
            for job_id, hashes in progress.items():
                done[job_id] = sum(1 for h in hashes if h in vectors)
                for h in hashes:
                    users.setdefault(h, []).append(job_id)
                IngestJob.objects.for_scope(scope).filter(pk=job_id).update(
                    stage="embed", chunks_total=len(hashes), chunks_done=done[job_id], heartbeat_at=now)
    size = embed_batch_size()
    for start in range(0, len(missing), size):
        batch = missing[start:start + size]
        array = embed_windowed(embedder, [texts[h] for h in batch], "document")
        if array.shape != (len(batch), embedder.dim) or not np.isfinite(array).all():
            raise ValueError(f"embedder {embedder.model_key} returned {array.shape} for {len(batch)} texts")
        array = np.ascontiguousarray(array, dtype=np.float32)
        touched = {job_id for h in batch for job_id in users.get(h, ())}
        with activate(scope):
            _cache_store(scope, embedder.model_key, batch, array)
            for h in batch:
                for job_id in users.get(h, ()):
                    done[job_id] += 1
            now = timezone.now()
            for job_id in touched:
                IngestJob.objects.for_scope(scope).filter(pk=job_id).update(chunks_done=done[job_id], heartbeat_at=now)
            if progress:  # the group's other jobs are alive too (the reaper watches heartbeats)
                IngestJob.objects.for_scope(scope).filter(pk__in=list(progress)).exclude(pk__in=touched).update(heartbeat_at=now)
        vectors.update(zip(batch, array, strict=True))
    return vectors


def _write_chunks(scope: Scope, job: IngestJob, source: _Source, model_key: str, title: str, mime_type: str,
                  rows: _ChunkRows) -> str:
    """Replace the document's chunks in ONE transaction and finish the job."""
    now = timezone.now()
    with activate(scope):
        document = Document.objects.for_scope(scope).select_for_update().filter(pk=source.document.pk).first()
        if document is None:  # deleted meanwhile (its jobs went with it)
            return "deleted"
        if document.sha256 != source.sha256:  # a newer upload replaced the bytes; its own job writes
            IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
                status=JobStatus.DONE, stage="superseded", finished_at=now, heartbeat_at=now)
            return "superseded"
        corpus = Corpus.objects.for_scope(scope).select_for_update().get(pk=source.corpus.pk)
        if corpus.model_key != model_key:
            raise _ModelSwitched()
        with _vector_cursor() as cur:
            cur.execute("DELETE FROM kb_chunk WHERE document_id = %s", [document.pk])
            removed = cur.rowcount
            spans = rows.spans
            cur.execute(
                """
                INSERT INTO kb_chunk (tenant_id, department_id, corpus_id, document_id, ordinal, text, locator, page,
                                      char_start, char_end, token_count, content_hash, embedding, embedding_model,
                                      search_vector, flags, created_at)
                SELECT %(tenant)s, %(department)s, %(corpus)s, %(document)s, u.ordinal, u.text, u.locator, u.page,
                       u.char_start, u.char_end, u.token_count, u.content_hash, u.embedding, %(model)s,
                       to_tsvector('english', %(title)s || ' ' || u.locator || ' ' || u.text), u.flags::jsonb, now()
                FROM unnest(%(ordinal)s::int[], %(text)s::text[], %(locator)s::text[], %(page)s::int[],
                            %(char_start)s::int[], %(char_end)s::int[], %(token_count)s::int[], %(hash)s::text[],
                            %(embedding)b::vector[], %(flags)s::text[])
                     AS u(ordinal, text, locator, page, char_start, char_end, token_count, content_hash, embedding, flags)
                RETURNING id, ordinal
                """,
                {
                    "tenant": scope.tenant_id, "department": document.department_id, "corpus": corpus.pk,
                    "document": document.pk, "model": model_key, "title": title,
                    "ordinal": list(range(len(spans))), "text": [s.text for s in spans],
                    "locator": [s.locator or "" for s in spans], "page": [s.page for s in spans],
                    "char_start": [s.char_start for s in spans], "char_end": [s.char_end for s in spans],
                    "token_count": [s.token_count for s in spans], "hash": rows.hashes,
                    "embedding": [rows.vectors[h] for h in rows.hashes], "flags": [json.dumps(f) for f in rows.flags],
                },
            )
            if rows.sentences is not None:
                chunk_ids = dict((ordinal, pk) for pk, ordinal in cur.fetchall())
                _write_sentences(cur, scope, model_key, chunk_ids, rows)
        Document.objects.for_scope(scope).filter(pk=document.pk).update(
            status=DocumentStatus.READY, error="", chunk_count=len(spans), title=title[:500], mime_type=mime_type, updated_at=now)
        Corpus.objects.for_scope(scope).filter(pk=corpus.pk).update(chunk_count=max(0, corpus.chunk_count - removed + len(spans)))
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
            status=JobStatus.DONE, stage="done", chunks_total=len(spans), chunks_done=len(spans), error="",
            finished_at=now, heartbeat_at=now)
    return "done"


def _write_sentences(cur: Any, scope: Scope, model_key: str, chunk_ids: dict[int, int], rows: _ChunkRows) -> None:
    """The sentence vectors and lexemes of a document's freshly written chunks (chunk ordinal -> id)."""
    flat = [(chunk_ids[i], j, s, e, h) for i, found in enumerate(rows.sentences or []) for j, (s, e, h) in enumerate(found)]
    if not flat:
        return
    cur.execute(
        """
        INSERT INTO kb_chunksentence (tenant_id, chunk_id, ordinal, char_start, char_end, embedding, embedding_model, lexemes)
        SELECT %(tenant)s, u.chunk_id, u.ordinal, u.char_start, u.char_end, u.embedding, %(model)s,
               tsvector_to_array(to_tsvector('english', substr(c.text, u.char_start + 1, u.char_end - u.char_start)))
        FROM unnest(%(chunk)s::bigint[], %(ordinal)s::int[], %(start)s::int[], %(end)s::int[], %(embedding)b::vector[])
             AS u(chunk_id, ordinal, char_start, char_end, embedding)
        JOIN kb_chunk c ON c.id = u.chunk_id
        """,
        {"tenant": scope.tenant_id, "model": model_key, "chunk": [r[0] for r in flat], "ordinal": [r[1] for r in flat],
         "start": [r[2] for r in flat], "end": [r[3] for r in flat], "embedding": [rows.vectors[r[4]] for r in flat]},
    )


# --- Vector I/O -----------------------------------------------------------------------------------

@contextlib.contextmanager
def _vector_cursor(alias: str = "default") -> Iterator[Any]:
    """A raw psycopg cursor on the Django connection (same transaction), with binary numpy<->vector
    adapters registered on this cursor only (the ORM's own vector handling is left untouched)."""
    from pgvector.psycopg.vector import VectorBinaryDumper, VectorBinaryLoader, VectorDumper
    from psycopg.types import TypeInfo

    conn = connections[alias]
    conn.ensure_connection()
    raw = conn.connection
    info = getattr(raw, "_grounded_vector_info", None)
    if info is None:
        info = TypeInfo.fetch(raw, "vector")
        raw._grounded_vector_info = info
    import psycopg

    # A server-side-binding cursor: Django's default ClientCursor cannot carry binary parameters or results.
    with psycopg.Cursor(raw) as cur:
        info.register(cur)
        cur.adapters.register_dumper(np.ndarray, type("VectorText", (VectorDumper,), {"oid": info.oid}))
        cur.adapters.register_dumper(np.ndarray, type("VectorBinary", (VectorBinaryDumper,), {"oid": info.oid}))
        cur.adapters.register_loader(info.oid, VectorBinaryLoader)
        yield cur


def _cache_lookup(scope: Scope, model_key: str, hashes: list[str]) -> dict[str, np.ndarray]:
    if not hashes:
        return {}
    with _vector_cursor() as cur:
        cur.execute("SELECT text_sha256, embedding FROM kb_embeddingcache "
                    "WHERE tenant_id = %s AND model_key = %s AND text_sha256 = ANY(%s)",
                    [scope.tenant_id, model_key, hashes], binary=True)
        return {h: v.to_numpy() for h, v in cur.fetchall()}


def _cache_store(scope: Scope, model_key: str, hashes: list[str], array: np.ndarray) -> None:
    with _vector_cursor() as cur:
        cur.execute("INSERT INTO kb_embeddingcache (tenant_id, model_key, text_sha256, embedding, created_at) "
                    "SELECT %s, %s, u.h, u.e, now() FROM unnest(%s::text[], %b::vector[]) AS u(h, e) "
                    "ON CONFLICT (tenant_id, model_key, text_sha256) DO NOTHING",
                    [scope.tenant_id, model_key, hashes, list(array)])


# --- Reaper ---------------------------------------------------------------------------------------

def resume_stuck_jobs(*, older_than: float = 600, limit: int = 500) -> list[int]:
    """Resend jobs whose worker died (running, heartbeat older than `older_than` seconds) or whose
    message was lost (queued and untouched as long). Across tenants: maintenance, owner connection.

    Resending is always safe: a job still alive holds its lease and the duplicate returns "busy".
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=older_than)
    stale = (IngestJob.objects.unscoped_dangerously(using="owner")
             .annotate(last_seen=Coalesce("heartbeat_at", "started_at", "created_at"))
             .filter(Q(status__in=[JobStatus.RUNNING, JobStatus.QUEUED]), last_seen__lt=cutoff)
             .order_by("last_seen"))
    jobs = list(stale.values_list("id", "tenant_id", "kind")[:limit])
    if not jobs:
        return []
    # Touch them so a reaper running again soon does not resend them twice.
    IngestJob.objects.unscoped_dangerously(using="owner").filter(pk__in=[j[0] for j in jobs]).update(heartbeat_at=now)
    for job_id, tenant_id, kind in jobs:
        enqueue_job(job_id, tenant_id, kind)
    logger.info("reaper resent %d jobs", len(jobs))
    return [j[0] for j in jobs]


# --- Re-embed -------------------------------------------------------------------------------------

def start_reembed(*, scope: Scope, corpus: Corpus, model_key: str) -> IngestJob | None:
    """Queue re-embedding of all the corpus's chunks into `model_key`; searches keep the old model
    until the job switches atomically. Returns the (possibly already running) job, None if nothing to do."""
    access.check_may_change(scope, corpus, "corpus")
    embedder = get_embedder(model_key)  # unknown keys fail here, before anything is stored
    if embedder.dim > HALFVEC_MAX_DIM:
        raise ValueError(f"{model_key}: {embedder.dim}-d vectors cannot be indexed (max {HALFVEC_MAX_DIM})")
    model, _, _ = embedder.model_key.partition(":")
    with activate(scope):
        locked = Corpus.objects.for_scope(scope).select_for_update().get(pk=corpus.pk)
        running = IngestJob.objects.for_scope(scope).filter(
            corpus=locked, kind=IngestJob.Kind.REEMBED, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).first()
        if running is not None and locked.next_embedding_model == model and locked.next_embedding_dim == embedder.dim:
            return running
        if locked.model_key == embedder.model_key:
            Corpus.objects.for_scope(scope).filter(pk=locked.pk).update(next_embedding_model="", next_embedding_dim=None)
            return None
        Corpus.objects.for_scope(scope).filter(pk=locked.pk).update(next_embedding_model=model, next_embedding_dim=embedder.dim)
        job = IngestJob.objects.create(tenant_id=scope.tenant_id, corpus=locked, kind=IngestJob.Kind.REEMBED,
                                       status=JobStatus.QUEUED, stage="queued")
        enqueue_job(job.id, scope.tenant_id, job.kind)
    return job


def run_reembed_job(*, job_id: int, tenant_id: int) -> str:
    """Embed every chunk text of the corpus into its next model (staged in the cache, per batch),
    then switch chunks and corpus in ONE transaction. Idempotent and resumable."""
    scope = Scope.system(tenant_id, principal=f"reembed-job:{job_id}")
    with contextlib.ExitStack() as leases:
        if not _take_lease(leases, job_id):
            return "busy"
        job = _claim(scope, job_id, IngestJob.Kind.REEMBED)
        if job is None:
            return "skipped"
        try:
            return _reembed(scope, job)
        except TRANSIENT_ERRORS as exc:
            _note_transient(scope, job_id, exc)
            raise
        except Exception as exc:
            logger.exception("re-embed job %s failed", job_id)
            return _fail(scope, job, f"internal error: {type(exc).__name__}: {exc}")


def _reembed(scope: Scope, job: IngestJob) -> str:
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).get(pk=job.corpus_id)
    if not corpus.next_embedding_model or not corpus.next_embedding_dim:
        _update_job(scope, job.pk, status=JobStatus.DONE, stage="nothing to do", finished_at=timezone.now())
        return "skipped"
    target = f"{corpus.next_embedding_model}:{corpus.next_embedding_dim}"
    embedder = get_embedder(target)
    _ensure_index_outside_transactions(target, embedder.dim)
    # Sentence vectors move with their chunks: a search re-ranks by sentences of the chunks' model
    # only, so sentences left on the old model would switch the re-rank off without a word.
    total = _count_texts(scope, corpus.pk)
    _update_job(scope, job.pk, stage="embed", chunks_total=total, chunks_done=total - _count_missing(scope, corpus.pk, target))
    while True:
        page = _missing_texts(scope, corpus.pk, target, limit=1024)
        if not page:
            break
        _vectors_for(scope, embedder, dict(page))
        _update_job(scope, job.pk, chunks_done=total - _count_missing(scope, corpus.pk, target))
    if corpus.sentence_vectors:
        _stage_sentences(scope, job, corpus.pk, target, embedder)
    return _switch_model(scope, job, corpus.pk, target, embedder, sentences=corpus.sentence_vectors)


def _stage_sentences(scope: Scope, job: IngestJob, corpus_id: int, target: str, embedder: Embedder) -> None:
    """Stage the vectors of the corpus's stored sentences, a page of chunks at a time (a sentence's
    cache key is computed from its chunk's text, so paging by chunk keeps each page's work its own);
    progress counts chunks whose sentences are staged."""
    with activate(scope):
        total = Chunk.objects.for_scope(scope).filter(corpus_id=corpus_id).count()
    _update_job(scope, job.pk, stage="embed sentences", chunks_total=total, chunks_done=0)
    done, last = 0, 0
    while True:
        with activate(scope):
            ids = list(Chunk.objects.for_scope(scope).filter(corpus_id=corpus_id, pk__gt=last).order_by("pk")
                       .values_list("pk", flat=True)[:256])
        if not ids:
            return
        sha, text, source = _TEXTS[True]
        with activate(scope), connections["default"].cursor() as cur:
            cur.execute(f"SELECT DISTINCT ON (x.sha) x.sha, x.text FROM (SELECT {sha} AS sha, {text} AS text FROM {source} "
                        "WHERE c.id = ANY(%s)) x WHERE NOT EXISTS (SELECT 1 FROM kb_embeddingcache e WHERE e.tenant_id = %s "
                        "AND e.model_key = %s AND e.text_sha256 = x.sha) ORDER BY x.sha", [ids, scope.tenant_id, target])
            page = cur.fetchall()
        if page:
            _vectors_for(scope, embedder, dict(page))
        done, last = done + len(ids), ids[-1]
        _update_job(scope, job.pk, chunks_done=done)


# What the embedding cache is keyed by (sha256 of the text), per chunk or per stored sentence; a
# sentence's text is its span of the chunk's (kb.sentences), hashed as ingestion hashed it.
_SENTENCE_TEXT = "substr(c.text, s.char_start + 1, s.char_end - s.char_start)"
_TEXTS = {
    False: ("c.content_hash", "c.text", "kb_chunk c"),
    True: (f"encode(sha256(convert_to({_SENTENCE_TEXT}, 'UTF8')), 'hex')", _SENTENCE_TEXT,
           "kb_chunksentence s JOIN kb_chunk c ON c.id = s.chunk_id"),
}


def _count_texts(scope: Scope, corpus_id: int) -> int:
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("SELECT count(DISTINCT content_hash) FROM kb_chunk WHERE corpus_id = %s", [corpus_id])
        return cur.fetchone()[0]


def _missing_sql(select: str, sentences: bool, tail: str = "") -> str:
    sha, text, source = _TEXTS[sentences]
    return (f"SELECT {select} FROM (SELECT {sha} AS sha, {text} AS text FROM {source} WHERE c.corpus_id = %s) x "
            "WHERE NOT EXISTS (SELECT 1 FROM kb_embeddingcache e WHERE e.tenant_id = %s AND e.model_key = %s "
            f"AND e.text_sha256 = x.sha){tail}")


def _missing_texts(scope: Scope, corpus_id: int, model_key: str, *, limit: int, sentences: bool = False) -> list[tuple[str, str]]:
    """(sha256, text) of the corpus's chunks (or stored sentences) with no vector of `model_key` in the cache yet."""
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute(_missing_sql("DISTINCT ON (x.sha) x.sha, x.text", sentences, " ORDER BY x.sha LIMIT %s"),
                    [corpus_id, scope.tenant_id, model_key, limit])
        return cur.fetchall()


def _count_missing(scope: Scope, corpus_id: int, model_key: str) -> int:
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute(_missing_sql("count(DISTINCT x.sha)", False), [corpus_id, scope.tenant_id, model_key])
        return cur.fetchone()[0]


def _switch_model(scope: Scope, job: IngestJob, corpus_id: int, target: str, embedder: Embedder, *,
                  sentences: bool = False) -> str:
    """ONE transaction: every chunk of the corpus (and every stored sentence of them) takes its
    staged vector, the corpus its new model."""
    model, _, dim = target.partition(":")
    kinds = [False, True] if sentences else [False]
    for _ in range(5):
        now = timezone.now()
        with activate(scope):
            corpus = Corpus.objects.for_scope(scope).select_for_update().get(pk=corpus_id)  # ingest writes wait
            if f"{corpus.next_embedding_model}:{corpus.next_embedding_dim}" != target:
                IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
                    status=JobStatus.DONE, stage="cancelled", finished_at=now, heartbeat_at=now)
                return "superseded"
            late = [t for kind in kinds for t in _missing_texts(scope, corpus_id, target, limit=257, sentences=kind)]
            if len(late) <= 256:  # chunks ingested meanwhile: few, embed them under the lock
                if late:
                    _vectors_for(scope, embedder, dict(late))
                with connections["default"].cursor() as cur:
                    cur.execute(
                        "UPDATE kb_chunk c SET embedding = e.embedding, embedding_model = %s FROM kb_embeddingcache e "
                        "WHERE c.corpus_id = %s AND e.tenant_id = c.tenant_id AND e.model_key = %s "
                        "AND e.text_sha256 = c.content_hash AND c.embedding_model IS DISTINCT FROM %s",
                        [target, corpus_id, target, target])
                    cur.execute("SELECT count(*) FROM kb_chunk WHERE corpus_id = %s AND embedding_model <> %s", [corpus_id, target])
                    if cur.fetchone()[0]:
                        raise OperationalError("re-embed switch left chunks on the old model; retrying")
                    if sentences:
                        cur.execute(
                            f"UPDATE kb_chunksentence s SET embedding = e.embedding, embedding_model = %s "
                            f"FROM kb_chunk c, kb_embeddingcache e WHERE c.id = s.chunk_id AND c.corpus_id = %s "
                            f"AND e.tenant_id = s.tenant_id AND e.model_key = %s AND e.text_sha256 = {_TEXTS[True][0]} "
                            f"AND s.embedding_model IS DISTINCT FROM %s", [target, corpus_id, target, target])
                        cur.execute("SELECT count(*) FROM kb_chunksentence s JOIN kb_chunk c ON c.id = s.chunk_id "
                                    "WHERE c.corpus_id = %s AND s.embedding_model <> %s", [corpus_id, target])
                        if cur.fetchone()[0]:
                            raise OperationalError("re-embed switch left sentences on the old model; retrying")
                Corpus.objects.for_scope(scope).filter(pk=corpus_id).update(
                    embedding_model=model, embedding_dim=int(dim), next_embedding_model="", next_embedding_dim=None)
                total = Chunk.objects.for_scope(scope).filter(corpus_id=corpus_id).count()
                IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
                    status=JobStatus.DONE, stage="done", chunks_total=total, chunks_done=total, error="",
                    finished_at=now, heartbeat_at=now)
                return "done"
        # Many chunks arrived meanwhile: stage them outside the lock, then try again.
        for kind in kinds:
            page = _missing_texts(scope, corpus_id, target, limit=4096, sentences=kind)
            _vectors_for(scope, embedder, dict(page))
    raise OperationalError("re-embed could not catch up with concurrent ingestion")


def embedding_cache_size(*, scope: Scope, model_key: str) -> int:
    with activate(scope):
        return EmbeddingCache.objects.for_scope(scope).filter(model_key=model_key).count()


def source_name_for(path: PurePath, root: PurePath) -> str:
    """Stable source name of a file under a folder: its relative POSIX path."""
    return path.relative_to(root).as_posix()
