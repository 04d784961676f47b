"""Re-uploading a stuck document's bytes resumes it (issue 29): a worker killed mid-ingest, or a
database stopped between the upload and its job, no longer leaves it `processing` for good."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from kb.ingest import upload_document
from kb.models import Chunk, Corpus, Document, DocumentStatus, IngestJob, JobStatus
from tenants.scope import activate

pytestmark = pytest.mark.django_db(databases=["default", "owner"])
BODY = b"# Travel\n\nHotel nights are reimbursed up to 180 EUR.\n\n# Leave\n\nEmployees get 25 days of annual leave.\n"


@pytest.fixture
def corpus(tenant, scope):
    with activate(scope):
        return Corpus.objects.create(tenant=tenant, name="Policies", embedding_model="hash", embedding_dim=64,
                                     chunk_target_tokens=40, chunk_overlap_tokens=0)


def _upload(scope, corpus, capture):
    with capture(execute=True):
        return upload_document(scope=scope, corpus=corpus, filename="policy.md", data=BODY)


def _state(scope, document):
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(pk=document.pk)
        return doc.status, Chunk.objects.for_scope(scope).filter(document_id=doc.pk).count()


def test_the_same_bytes_again_resume_a_document_whose_worker_died(scope, corpus, django_capture_on_commit_callbacks):
    # The upload's job is sent nowhere (as if the worker took it and was killed mid-ingest).
    with activate(scope):
        document, job = upload_document(scope=scope, corpus=corpus, filename="policy.md", data=BODY)
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).update(
            status=JobStatus.RUNNING, attempts=1, stage="embed", heartbeat_at=timezone.now() - timedelta(minutes=20))
        Document.objects.for_scope(scope).filter(pk=document.pk).update(status=DocumentStatus.PROCESSING)
    assert _state(scope, document) == (DocumentStatus.PROCESSING, 0)
    again, resumed = _upload(scope, corpus, django_capture_on_commit_callbacks)
    assert again.pk == document.pk and resumed is not None and resumed.pk == job.pk  # the job, not null
    status, chunks = _state(scope, document)
    assert status == DocumentStatus.READY and chunks == 2
    again, job_again = _upload(scope, corpus, django_capture_on_commit_callbacks)
    assert job_again is None and _state(scope, document) == (DocumentStatus.READY, 2)  # ready: a no-op, chunks once


def test_the_same_bytes_again_queue_a_job_for_a_document_left_without_one(scope, corpus, django_capture_on_commit_callbacks):
    with activate(scope):
        document, job = upload_document(scope=scope, corpus=corpus, filename="policy.md", data=BODY)
        IngestJob.objects.for_scope(scope).filter(pk=job.pk).delete()  # the database stopped before the job was stored
    again, resumed = _upload(scope, corpus, django_capture_on_commit_callbacks)
    assert resumed is not None and resumed.pk != job.pk
    assert _state(scope, document) == (DocumentStatus.READY, 2)


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_the_reaper_resends_a_silent_running_job_sooner_than_a_waiting_queued_one(scope, corpus):
    from kb.ingest import resume_stuck_jobs

    with activate(scope):
        _, running = upload_document(scope=scope, corpus=corpus, filename="a.md", data=BODY)
        other = Corpus.objects.create(tenant_id=scope.tenant_id, name="Other", embedding_model="hash", embedding_dim=64)
        _, waiting = upload_document(scope=scope, corpus=other, filename="b.md", data=BODY)  # (not taken along with the first)
    with activate(scope):  # (eager here: both ingested at the commit above; now made to look stuck and waiting)
        old = timezone.now() - timedelta(seconds=100)
        IngestJob.objects.for_scope(scope).filter(pk=running.pk).update(status=JobStatus.RUNNING, heartbeat_at=old)
        IngestJob.objects.for_scope(scope).filter(pk=waiting.pk).update(status=JobStatus.QUEUED, heartbeat_at=old)
    assert resume_stuck_jobs(older_than=600, running_older_than=90) == [running.pk]  # resent (and, eager here, run)
    with activate(scope):
        assert IngestJob.objects.for_scope(scope).get(pk=running.pk).status == JobStatus.DONE
    assert resume_stuck_jobs(older_than=50) == [waiting.pk]  # a queued job only after its own, longer wait


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_a_command_that_waits_for_its_jobs_runs_them_itself_when_no_worker_runs(tmp_path, tenant, scope):
    """`manage.py ingest_folder` (and load_demo, evaluate, reembed_corpus) outside `scripts/run`: the
    embedded broker is not running, so its jobs run in the command instead of waiting for no worker."""
    from io import StringIO

    from django.core.management import call_command

    from api.project.celery import app

    eager, broker = app.conf.task_always_eager, app.conf.broker_url
    app.conf.task_always_eager, app.conf.broker_url = False, f"redis+socket://{tmp_path}/no-broker.sock"  # a command on its own
    try:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "leave.md").write_text("# Leave\n\nTwenty-five days of paid leave per year.")
        call_command("ingest_folder", str(tmp_path / "docs"), tenant=tenant.slug, corpus="Handbook", create=True,
                     model="hash:16", no_progress=True, wait=True, stdout=StringIO())
        assert app.conf.task_always_eager
    finally:
        app.conf.task_always_eager, app.conf.broker_url = eager, broker
    with activate(scope):
        assert list(Document.objects.for_scope(scope).values_list("status", flat=True)) == [DocumentStatus.READY]
