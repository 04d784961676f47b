"""Re-embedding a corpus into another model in the background; searches keep the old model until the
job switches atomically."""

from __future__ import annotations

import contextlib
import logging

from django.db import OperationalError, connections
from django.utils import timezone

from kb import access
from kb.embedding import Embedder, get_embedder
from kb.ingest.jobs import TRANSIENT_ERRORS, fail_job, lease_and_claim, note_transient, update_job
from kb.ingest.queue import enqueue_job, register_runner
from kb.ingest.vectors import ensure_index_outside_transactions, vectors_for
from kb.models import Chunk, Corpus, IngestJob, JobStatus
from kb.vector_index import HALFVEC_MAX_DIM
from tenants.scope import Scope, activate

logger = logging.getLogger(__name__)


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
        job = lease_and_claim(leases, scope, job_id, IngestJob.Kind.REEMBED)
        if isinstance(job, str):  # "busy" or "skipped"
            return job
        try:
            return _reembed(scope, job)
        except TRANSIENT_ERRORS as exc:
            note_transient(scope, job_id, exc)
            raise
        except Exception as exc:
            logger.exception("re-embed job %s failed", job_id)
            return fail_job(scope, job, f"internal error: {type(exc).__name__}: {exc}")


def _reembed(scope: Scope, job: IngestJob) -> str:
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).get(pk=job.corpus_id)
    if not corpus.next_embedding_model or not corpus.next_embedding_dim:
        update_job(scope, job.pk, status=JobStatus.DONE, stage="nothing to do", finished_at=timezone.now())
        return "skipped"
    target = f"{corpus.next_embedding_model}:{corpus.next_embedding_dim}"
    embedder = get_embedder(target)
    ensure_index_outside_transactions(target, embedder.dim)
    # Sentence vectors move with their chunks: a search re-ranks by sentences of the chunks' model
    # only, so sentences left on the old model would switch the re-rank off without a word.
    total = _count_texts(scope, corpus.pk)
    update_job(scope, job.pk, stage="embed", chunks_total=total, chunks_done=total - _count_missing(scope, corpus.pk, target))
    while True:
        page = _missing_texts(scope, corpus.pk, target, limit=1024)
        if not page:
            break
        vectors_for(scope, embedder, dict(page))
        update_job(scope, job.pk, chunks_done=total - _count_missing(scope, corpus.pk, target))
    if corpus.sentence_vectors:
        _stage_sentences(scope, job, corpus.pk, target, embedder)
    return _switch_model(scope, job, corpus.pk, target, embedder, sentences=corpus.sentence_vectors)


def _stage_sentences(scope: Scope, job: IngestJob, corpus_id: int, target: str, embedder: Embedder) -> None:
    """Stage the vectors of the corpus's stored sentences, a page of chunks at a time (a sentence's
    cache key is computed from its chunk's text, so paging by chunk keeps each page's work its own);
    progress counts chunks whose sentences are staged."""
    with activate(scope):
        total = Chunk.objects.for_scope(scope).filter(corpus_id=corpus_id).count()
    update_job(scope, job.pk, stage="embed sentences", chunks_total=total, chunks_done=0)
    done, last = 0, 0
    while True:
        with activate(scope):
            ids = list(Chunk.objects.for_scope(scope).filter(corpus_id=corpus_id, pk__gt=last).order_by("pk")
                       .values_list("pk", flat=True)[:256])
        if not ids:
            return
        sha, text, source = _TEXTS[True]
        with activate(scope), connections["default"].cursor() as cur:
            cur.execute(f"SELECT DISTINCT ON (x.sha) x.sha, x.text FROM (SELECT {sha} AS sha, {text} AS text FROM {source} "  # noqa: S608  (fragments from the fixed _TEXTS table)
                        "WHERE c.tenant_id = %s AND c.id = ANY(%s)) x WHERE NOT EXISTS (SELECT 1 FROM kb_embeddingcache e "
                        "WHERE e.tenant_id = %s AND e.model_key = %s AND e.text_sha256 = x.sha) ORDER BY x.sha",
                        [scope.tenant_id, ids, scope.tenant_id, target])
            page = cur.fetchall()
        if page:
            vectors_for(scope, embedder, dict(page))
        done, last = done + len(ids), ids[-1]
        update_job(scope, job.pk, chunks_done=done)


# What the embedding cache is keyed by (sha256 of the text), per chunk or per stored sentence; a
# sentence's text is its span of the chunk's (kb.sentences), hashed as ingestion hashed it.
_SENTENCE_TEXT = "substr(c.text, s.char_start + 1, s.char_end - s.char_start)"


_TEXTS = {
    False: ("c.content_hash", "c.text", "kb_chunk c"),
    True: (f"encode(sha256(convert_to({_SENTENCE_TEXT}, 'UTF8')), 'hex')", _SENTENCE_TEXT,
           "kb_chunksentence s JOIN kb_chunk c ON c.id = s.chunk_id AND c.tenant_id = s.tenant_id"),
}


def _count_texts(scope: Scope, corpus_id: int) -> int:
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("SELECT count(DISTINCT content_hash) FROM kb_chunk WHERE tenant_id = %s AND corpus_id = %s",
                    [scope.tenant_id, corpus_id])
        return cur.fetchone()[0]


def _missing_sql(select: str, sentences: bool, tail: str = "") -> str:
    """Parameters: tenant, corpus, tenant, model key, then the tail's."""
    sha, text, source = _TEXTS[sentences]
    return (f"SELECT {select} FROM (SELECT {sha} AS sha, {text} AS text FROM {source} "  # noqa: S608  (fragments from _TEXTS; select and tail are literals of the callers)
            "WHERE c.tenant_id = %s AND c.corpus_id = %s) x "
            "WHERE NOT EXISTS (SELECT 1 FROM kb_embeddingcache e WHERE e.tenant_id = %s AND e.model_key = %s "
            f"AND e.text_sha256 = x.sha){tail}")


def _missing_texts(scope: Scope, corpus_id: int, model_key: str, *, limit: int, sentences: bool = False) -> list[tuple[str, str]]:
    """(sha256, text) of the corpus's chunks (or stored sentences) with no vector of `model_key` in the cache yet."""
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute(_missing_sql("DISTINCT ON (x.sha) x.sha, x.text", sentences, " ORDER BY x.sha LIMIT %s"),
                    [scope.tenant_id, corpus_id, scope.tenant_id, model_key, limit])
        return cur.fetchall()


def _count_missing(scope: Scope, corpus_id: int, model_key: str) -> int:
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute(_missing_sql("count(DISTINCT x.sha)", False), [scope.tenant_id, corpus_id, scope.tenant_id, model_key])
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
                    vectors_for(scope, embedder, dict(late))
                with connections["default"].cursor() as cur:
                    cur.execute(
                        "UPDATE kb_chunk c SET embedding = e.embedding, embedding_model = %s FROM kb_embeddingcache e "
                        "WHERE c.tenant_id = %s AND c.corpus_id = %s AND e.tenant_id = c.tenant_id AND e.model_key = %s "
                        "AND e.text_sha256 = c.content_hash AND c.embedding_model IS DISTINCT FROM %s",
                        [target, scope.tenant_id, corpus_id, target, target])
                    cur.execute("SELECT count(*) FROM kb_chunk WHERE tenant_id = %s AND corpus_id = %s AND embedding_model <> %s",
                                [scope.tenant_id, corpus_id, target])
                    if cur.fetchone()[0]:
                        raise OperationalError("re-embed switch left chunks on the old model; retrying")
                    if sentences:
                        cur.execute(
                            f"UPDATE kb_chunksentence s SET embedding = e.embedding, embedding_model = %s "  # noqa: S608  (_TEXTS fragment)
                            f"FROM kb_chunk c, kb_embeddingcache e WHERE s.tenant_id = %s AND c.id = s.chunk_id "
                            f"AND c.tenant_id = s.tenant_id AND c.corpus_id = %s "
                            f"AND e.tenant_id = s.tenant_id AND e.model_key = %s AND e.text_sha256 = {_TEXTS[True][0]} "
                            f"AND s.embedding_model IS DISTINCT FROM %s", [target, scope.tenant_id, corpus_id, target, target])
                        cur.execute("SELECT count(*) FROM kb_chunksentence s JOIN kb_chunk c ON c.id = s.chunk_id "
                                    "AND c.tenant_id = s.tenant_id WHERE s.tenant_id = %s AND c.corpus_id = %s "
                                    "AND s.embedding_model <> %s", [scope.tenant_id, corpus_id, target])
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
            vectors_for(scope, embedder, dict(page))
    raise OperationalError("re-embed could not catch up with concurrent ingestion")


register_runner(IngestJob.Kind.REEMBED, run_reembed_job)
