"""Deleting a document cancels its ingest, through a real Celery worker (issue 47, finding 9: a deleted 19.5 MB
upload kept the worker busy for 2.5 minutes). Its job goes with it; a queued job then does nothing, a running
one stops at its next checkpoint (the parse killed, or before the next embedding batch) and writes nothing,
and the worker takes the next job at once. The worker and fixtures are test_ingest_worker's."""

from __future__ import annotations

import hashlib
import time

import psutil
import pytest

from kb.ingest import delete_document, upload_document
from kb.models import Chunk, Document, IngestJob
from tenants.scope import activate
from tests.fakes import embedders as fake_embedders
from tests.kb.test_ingest_worker import broker, drained, jobs_done, make_corpus, sections, start_worker, wait_for  # noqa: F401
from tests.kb.test_parse_isolation import SLOW_MARKDOWN

pytestmark = [pytest.mark.worker, pytest.mark.django_db(databases=["default", "owner"], transaction=True)]


def _job(scope, job_id: int) -> IngestJob | None:
    with activate(scope):
        return IngestJob.objects.for_scope(scope).filter(pk=job_id).first()


def _gone_without_chunks(scope, document_id: int) -> bool:
    with activate(scope):
        return (not Document.objects.for_scope(scope).filter(pk=document_id).exists()
                and not Chunk.objects.for_scope(scope).filter(document_id=document_id).exists())


def _next_document_done_after(scope, corpus, deleted_at: float, worker) -> float:
    """Upload a small document and wait for it: seconds from the deletion until it is done."""
    _, job = upload_document(scope=scope, corpus=corpus, filename="next.md", data=sections("The next document is ingested."))
    wait_for(lambda: jobs_done(scope, [job.pk]), 60, "the next document", worker)
    return time.monotonic() - deleted_at


def test_deleting_a_document_while_it_parses_kills_the_parse_and_frees_the_worker(broker, start_worker):  # noqa: F811
    worker = start_worker(PARSE_MAX_SECONDS="600")  # the wall limit is not what stops it
    scope, corpus = make_corpus("hash-counting", 64)
    doc, job = upload_document(scope=scope, corpus=corpus, filename="slow.md", data=SLOW_MARKDOWN)  # minutes to parse
    wait_for(lambda: (j := _job(scope, job.pk)) is not None and j.stage == "parse", 60, "the parse to start", worker)
    time.sleep(1.0)
    delete_document(scope=scope, document=doc)
    freed = _next_document_done_after(scope, corpus, time.monotonic(), worker)
    print(f"\ndeleted while parsing: the next document was done {freed:.1f} s after the deletion")
    assert freed < 15
    assert _gone_without_chunks(scope, doc.pk)
    wait_for(lambda: b"'cancelled'" in worker.log.read_bytes(), 10, "the job's outcome in the log", worker)
    # the killed parse is gone: the worker's only descendant is the (idle) helper that parsed the next document
    descendants = psutil.Process(worker.pid).children(recursive=True)
    assert len(descendants) == 1 and "kb.parse_sandbox" in " ".join(descendants[0].cmdline()), descendants


def test_deleting_a_document_while_it_embeds_stops_before_the_next_batch(broker, start_worker):  # noqa: F811
    worker = start_worker(GROUNDED_EMBED_BATCH="4", GROUNDED_SLOW_EMBED_S="0.25")
    scope, corpus = make_corpus("hash-slow", 64)
    rules = [f"Rule {i}: the answer to question {i} is {i * 7}." for i in range(300)]
    doc, job = upload_document(scope=scope, corpus=corpus, filename="rules.md", data=sections(*rules))
    wait_for(lambda: (j := _job(scope, job.pk)) is not None and j.chunks_done >= 8, 60, "embedding to get going", worker)
    delete_document(scope=scope, document=doc)
    deleted_at = time.monotonic()
    embedded_at_delete = sum(fake_embedders.embed_counts().values())
    freed = _next_document_done_after(scope, corpus, deleted_at, worker)
    counts = fake_embedders.embed_counts()
    rule_texts = {h for h in counts if h not in _hashes_of_next_document(scope)}
    embedded_after = sum(counts[h] for h in rule_texts) - embedded_at_delete
    print(f"\ndeleted while embedding (~300 chunks, batches of 4 at 0.25 s): the next document was done {freed:.1f} s later; "
          f"{embedded_after} of its texts embedded after the deletion")
    assert embedded_after <= 8  # the batch in flight, and at most one more
    assert freed < 15
    assert _gone_without_chunks(scope, doc.pk)


def test_a_queued_job_of_a_deleted_document_does_nothing(broker, start_worker):  # noqa: F811
    """The job row goes with the document, so its message finds nothing to do (guarded since the jobs
    were cascaded; kept here with the running cases)."""
    scope, corpus = make_corpus("hash-counting", 64)
    doc, _ = upload_document(scope=scope, corpus=corpus, filename="queued.md", data=sections("Never ingested."))
    delete_document(scope=scope, document=doc)
    worker = start_worker()
    _next_document_done_after(scope, corpus, time.monotonic(), worker)
    wait_for(lambda: drained(broker), 30, "the queue to drain", worker)
    assert _gone_without_chunks(scope, doc.pk)
    assert set(fake_embedders.embed_counts()) == _hashes_of_next_document(scope)
    assert b"'skipped'" in worker.log.read_bytes()


def _hashes_of_next_document(scope) -> set[str]:
    with activate(scope):
        texts = Chunk.objects.for_scope(scope).filter(document__source_name="next.md").values_list("text", flat=True)
        return {hashlib.sha256(t.encode()).hexdigest() for t in texts}
