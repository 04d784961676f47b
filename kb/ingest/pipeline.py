"""The ingest job: parse -> chunk -> embed -> write, for a group of documents of one corpus at a time;
a document's chunks are replaced in one transaction."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.utils import timezone

from kb.chunking import chunk_document
from kb.embedding import Embedder, get_embedder
from kb.ingest.documents import content_hash
from kb.ingest.jobs import (
    MAX_ATTEMPTS,
    TRANSIENT_ERRORS,
    claim_job,
    fail_job,
    lease_and_claim,
    note_transient,
    running_jobs,
    take_lease,
    update_job,
)
from kb.ingest.queue import enqueue_job, register_runner
from kb.ingest.vectors import ensure_index_outside_transactions, vector_cursor, vectors_for
from kb.injection import detect_injection
from kb.models import Corpus, Document, DocumentContent, DocumentStatus, IngestJob, JobStatus
from kb.parse_sandbox import ParseCancelled, parse_document
from kb.parsing import ParseError
from kb.sentences import sentence_spans
from tenants.conf import product_settings
from tenants.scope import Scope, activate

logger = logging.getLogger(__name__)


def group_max_jobs() -> int:
    return product_settings.GROUNDED_INGEST_GROUP


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
    """Run one ingest job to the end; idempotent. Returns "done", "failed", "superseded", "cancelled",
    "skipped" or "busy".

    The job also takes over other queued ingest jobs of the same corpus (up to GROUNDED_INGEST_GROUP,
    each under its own lease), so a bulk upload is embedded in full batches across documents; their
    own messages later find them done. Transient errors (database, embedder rate limits/outages) put
    the jobs back to queued and are re-raised for the task to retry; a document's own problem
    (parse error, bug) fails that document only, with the reason.

    Deleting a document deletes its jobs, which cancels them (kb.ingest.jobs.running_jobs): a queued one
    is skipped; a running one stops at its next checkpoint (the parse, polled every half second and its
    child killed; after parsing; before each embedding batch; at the write) and writes nothing.
    """
    scope = Scope.system(tenant_id, principal=f"ingest-job:{job_id}")
    if _finished(scope, job_id):  # a duplicate delivery, or a job a group already took: no lock needed
        return "skipped"
    with contextlib.ExitStack() as leases:
        job = lease_and_claim(leases, scope, job_id, IngestJob.Kind.INGEST)
        if isinstance(job, str):  # "busy" or "skipped"
            return job
        group = [job, *_claim_companions(scope, job, leases)]
        try:
            outcomes = _ingest_group(scope, group)
        except TRANSIENT_ERRORS as exc:
            for member in group:
                note_transient(scope, member.pk, exc)
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed", job_id)
            for member in group:
                fail_job(scope, member, f"internal error: {type(exc).__name__}: {exc}")
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
        if take_lease(leases, pk) and (claimed := claim_job(scope, pk, IngestJob.Kind.INGEST)) is not None:
            taken.append(claimed)
    return taken


def _load_source(scope: Scope, job: IngestJob) -> _Source:
    with activate(scope):
        document = Document.objects.for_scope(scope).select_related("corpus").filter(pk=job.document_id).first()
        data = DocumentContent.objects.for_scope(scope).filter(document_id=job.document_id).values_list("data", flat=True).first()
        if document is None or data is None:  # deleted since the job was claimed
            raise _Cancelled()
        data = bytes(data)
        Document.objects.for_scope(scope).filter(pk=document.pk).update(status=DocumentStatus.PROCESSING, updated_at=timezone.now())
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(stage="parse", error="", heartbeat_at=timezone.now())
    return _Source(document, document.corpus, data, hashlib.sha256(data).hexdigest())


def _ingest_group(scope: Scope, jobs: list[IngestJob]) -> dict[int, str]:
    """parse + chunk each document, embed all their chunks together, write each document on its own."""
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).get(pk=jobs[0].corpus_id)
    embedder = get_embedder(corpus.model_key)
    ensure_index_outside_transactions(corpus.model_key, corpus.embedding_dim)
    outcomes: dict[int, str] = {}
    prepared: list[_Prepared] = []
    for job in jobs:
        try:
            result = _prepare(scope, job, corpus, embedder)
        except _Cancelled:
            outcomes[job.pk] = _cancelled(job)
            continue
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed while parsing", job.pk)
            outcomes[job.pk] = fail_job(scope, job, f"internal error: {type(exc).__name__}: {exc}")
            continue
        if isinstance(result, str):
            outcomes[job.pk] = result
        else:
            prepared.append(result)
    vectors = vectors_for(scope, embedder, {h: s.text for p in prepared for h, s in zip(p.hashes, p.spans, strict=True)},
                          progress={p.job.pk: p.hashes for p in prepared})
    prepared = _still_running(scope, prepared, outcomes)
    sentences = _sentence_vectors(scope, embedder, prepared, vectors) if corpus.sentence_vectors else {}
    prepared = _still_running(scope, prepared, outcomes)
    for p in prepared:
        rows = _ChunkRows(spans=p.spans, hashes=p.hashes, vectors=vectors, flags=p.flags, sentences=sentences.get(p.job.pk))
        try:
            outcomes[p.job.pk] = _write_chunks(scope, p.job, p.source, embedder.model_key, p.title, p.mime_type, rows)
        except _ModelSwitched:  # a re-embed switched the corpus meanwhile: chunk and embed again, later
            update_job(scope, p.job.pk, status=JobStatus.QUEUED, stage="requeued: model switched")
            enqueue_job(p.job.pk, scope.tenant_id, IngestJob.Kind.INGEST)
            outcomes[p.job.pk] = "requeued"
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            logger.exception("ingest job %s failed while writing", p.job.pk)
            outcomes[p.job.pk] = fail_job(scope, p.job, f"internal error: {type(exc).__name__}: {exc}")
    return outcomes


class _Cancelled(Exception):
    """The job's document was deleted (its job with it) while the job ran."""


class _ModelSwitched(Exception):
    """The corpus switched embedding model while this job embedded with the old one."""


def _cancelled(job: IngestJob) -> str:
    logger.info("ingest job %s cancelled: document %s deleted", job.pk, job.document_id)
    return "cancelled"


def _still_running(scope: Scope, prepared: list[_Prepared], outcomes: dict[int, str]) -> list[_Prepared]:
    """Checkpoint: drop the jobs cancelled meanwhile (their outcome "cancelled"); the others go on."""
    running = running_jobs(scope, {p.job.pk for p in prepared})
    for p in prepared:
        if p.job.pk not in running:
            outcomes[p.job.pk] = _cancelled(p.job)
    return [p for p in prepared if p.job.pk in running]


def _sentence_vectors(scope: Scope, embedder: Embedder, prepared: list[_Prepared],
                      vectors: dict[str, np.ndarray]) -> dict[int, list[list[tuple[int, int, str]]]]:
    """Embed every sentence of the prepared chunks (kb.sentences) into `vectors`, through the same
    cache; job id -> per chunk, its sentences as (start, end, sha256) relative to the chunk text."""
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
    vectors.update(vectors_for(scope, embedder, texts, owners={p.job.pk: [h for found in out[p.job.pk] for *_, h in found]
                                                               for p in prepared}))
    return out


def _prepare(scope: Scope, job: IngestJob, corpus: Corpus, embedder: Embedder) -> _Prepared | str:
    """Parse (kb.parse_sandbox: bounded from outside, cancelled when the job goes) and chunk one document.
    Raises _Cancelled when its document was deleted."""
    source = _load_source(scope, job)
    document = source.document
    try:
        parsed = parse_document(source.data, document.source_name, document.mime_type or None,
                                cancelled=lambda: not running_jobs(scope, {job.pk}))
    except ParseCancelled:
        raise _Cancelled() from None
    except ParseError as exc:
        return fail_job(scope, job, f"parse error: {exc}")
    if not running_jobs(scope, {job.pk}):
        raise _Cancelled()
    # A chunk may be larger than the model's window: it is embedded by windows (embed_windowed).
    target = corpus.chunk_target_tokens
    window = embedder.max_tokens - getattr(embedder, "reserved_tokens", 0)
    spans = chunk_document(parsed, target_tokens=target, overlap_tokens=min(corpus.chunk_overlap_tokens, target - 1),
                           max_tokens=max(target, window), count_tokens=_memo_counter(embedder))
    if not spans:
        return fail_job(scope, job, "parse error: the document has no text to index")
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


def _write_chunks(scope: Scope, job: IngestJob, source: _Source, model_key: str, title: str, mime_type: str,
                  rows: _ChunkRows) -> str:
    """Replace the document's chunks in ONE transaction and finish the job."""
    now = timezone.now()
    with activate(scope):
        document = Document.objects.for_scope(scope).select_for_update().filter(pk=source.document.pk).first()
        if document is None:  # deleted meanwhile (its jobs went with it)
            return _cancelled(job)
        if document.sha256 != source.sha256:  # a newer upload replaced the bytes; its own job writes
            IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
                status=JobStatus.DONE, stage="superseded", finished_at=now, heartbeat_at=now)
            return "superseded"
        corpus = Corpus.objects.for_scope(scope).select_for_update().get(pk=source.corpus.pk)
        if corpus.model_key != model_key:
            raise _ModelSwitched()
        with vector_cursor() as cur:
            cur.execute("DELETE FROM kb_chunk WHERE tenant_id = %s AND document_id = %s", [scope.tenant_id, document.pk])
            removed = cur.rowcount
            spans = rows.spans
            cur.execute(
                """
                INSERT INTO kb_chunk (tenant_id, department_id, corpus_id, document_id, ordinal, text, locator, page,
                                      char_start, char_end, token_count, content_hash, embedding, embedding_model,
                                      search_vector, flags, created_at)
                SELECT %(tenant)s, %(department)s, %(corpus)s, %(document)s, u.ordinal, u.text, u.locator, u.page,
                       u.char_start, u.char_end, u.token_count, u.content_hash, u.embedding, %(model)s,
                       to_tsvector(%(language)s::regconfig, %(title)s || ' ' || u.locator || ' ' || u.text), u.flags::jsonb, now()
                FROM unnest(%(ordinal)s::int[], %(text)s::text[], %(locator)s::text[], %(page)s::int[],
                            %(char_start)s::int[], %(char_end)s::int[], %(token_count)s::int[], %(hash)s::text[],
                            %(embedding)b::vector[], %(flags)s::text[])
                     AS u(ordinal, text, locator, page, char_start, char_end, token_count, content_hash, embedding, flags)
                RETURNING id, ordinal
                """,
                {
                    "tenant": scope.tenant_id, "department": document.department_id, "corpus": corpus.pk,
                    "document": document.pk, "model": model_key, "title": title, "language": corpus.language,
                    "ordinal": list(range(len(spans))), "text": [s.text for s in spans],
                    "locator": [s.locator or "" for s in spans], "page": [s.page for s in spans],
                    "char_start": [s.char_start for s in spans], "char_end": [s.char_end for s in spans],
                    "token_count": [s.token_count for s in spans], "hash": rows.hashes,
                    "embedding": [rows.vectors[h] for h in rows.hashes], "flags": [json.dumps(f) for f in rows.flags],
                },
            )
            if rows.sentences is not None:
                chunk_ids = dict((ordinal, pk) for pk, ordinal in cur.fetchall())
                _write_sentences(cur, scope, model_key, chunk_ids, rows, corpus.language)
        Document.objects.for_scope(scope).filter(pk=document.pk).update(
            status=DocumentStatus.READY, error="", chunk_count=len(spans), title=title[:500], mime_type=mime_type, updated_at=now)
        Corpus.objects.for_scope(scope).filter(pk=corpus.pk).update(chunk_count=max(0, corpus.chunk_count - removed + len(spans)))
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
            status=JobStatus.DONE, stage="done", chunks_total=len(spans), chunks_done=len(spans), error="",
            finished_at=now, heartbeat_at=now)
    return "done"


def _write_sentences(cur: Any, scope: Scope, model_key: str, chunk_ids: dict[int, int], rows: _ChunkRows,
                     language: str) -> None:
    """The sentence vectors and lexemes of a document's freshly written chunks (chunk ordinal -> id)."""
    flat = [(chunk_ids[i], j, s, e, h) for i, found in enumerate(rows.sentences or []) for j, (s, e, h) in enumerate(found)]
    if flat:
        insert_sentences(cur, scope, model_key, language, [(r[0], r[1], r[2], r[3], rows.vectors[r[4]]) for r in flat])


def insert_sentences(cur: Any, scope: Scope, model_key: str, language: str, sentences: list[tuple[int, int, int, int, Any]]) -> None:
    """Write sentence rows (chunk id, ordinal, char start, char end, vector) of written chunks, their lexemes
    computed from the chunk's text under `language` (ingestion and corpus imports alike)."""
    cur.execute(
        """
        INSERT INTO kb_chunksentence (tenant_id, chunk_id, ordinal, char_start, char_end, embedding, embedding_model, lexemes)
        SELECT %(tenant)s, u.chunk_id, u.ordinal, u.char_start, u.char_end, u.embedding, %(model)s,
               tsvector_to_array(to_tsvector(%(language)s::regconfig, substr(c.text, u.char_start + 1, u.char_end - u.char_start)))
        FROM unnest(%(chunk)s::bigint[], %(ordinal)s::int[], %(start)s::int[], %(end)s::int[], %(embedding)b::vector[])
             AS u(chunk_id, ordinal, char_start, char_end, embedding)
        JOIN kb_chunk c ON c.id = u.chunk_id AND c.tenant_id = %(tenant)s
        """,
        {"tenant": scope.tenant_id, "model": model_key, "language": language, "chunk": [r[0] for r in sentences],
         "ordinal": [r[1] for r in sentences], "start": [r[2] for r in sentences], "end": [r[3] for r in sentences],
         "embedding": [r[4] for r in sentences]},
    )


register_runner(IngestJob.Kind.INGEST, run_ingest_job)
