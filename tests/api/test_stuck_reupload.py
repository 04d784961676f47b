"""Re-uploading a stuck document's bytes over the API resumes it (issue 29): the answer names a job, never
`jobs: [null]`, and the document then finishes (tests/kb/test_stuck_reupload.py covers the service)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from kb.models import Document, DocumentStatus, IngestJob, JobStatus
from tenants.scope import activate
from tests.api.test_documents import upload
from tests.factories import whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])
BODY = b"# Per diem\n\nField staff receive a per diem of 35 EUR.\n\n# Kit\n\nSafety boots are replaced every year.\n"


def _worker_died(job_id: int, document_id: int, scope) -> None:
    IngestJob.objects.for_scope(scope).filter(pk=job_id).update(status=JobStatus.RUNNING, attempts=1, stage="embed",
                                                                heartbeat_at=timezone.now() - timedelta(minutes=20))
    Document.objects.for_scope(scope).filter(pk=document_id).update(status=DocumentStatus.PROCESSING)


def _job_never_stored(job_id: int, document_id: int, scope) -> None:
    IngestJob.objects.for_scope(scope).filter(pk=job_id).delete()


@pytest.mark.parametrize("stuck", [_worker_died, _job_never_stored], ids=["worker-killed-mid-ingest", "job-never-stored"])
def test_reuploading_a_stuck_documents_bytes_returns_its_job_and_the_document_finishes(world, stuck,
                                                                                      django_capture_on_commit_callbacks):
    editor = world.client("a-editor")
    first = upload(editor, world.shared.id, ("per-diem.md", BODY))  # its job is sent nowhere: no commit runs it
    assert first.status_code == 202, first.content
    document_id, job_id = first.json()["documents"][0]["id"], first.json()["jobs"][0]
    assert job_id is not None
    scope = whole_tenant(world.a)
    with activate(scope):
        stuck(job_id, document_id, scope)
    assert editor.get(f"/api/v1/documents/{document_id}/").json()["status"] in {"pending", "processing"}

    with django_capture_on_commit_callbacks(execute=True):
        again = upload(editor, world.shared.id, ("per-diem.md", BODY))
    assert again.status_code == 202, again.content
    assert again.json()["documents"][0]["id"] == document_id
    resumed = again.json()["jobs"][0]
    assert resumed is not None, again.json()  # was [null], and the document stayed processing
    assert resumed == job_id if stuck is _worker_died else resumed != job_id  # its own job again, or a new one
    detail = editor.get(f"/api/v1/documents/{document_id}/").json()
    assert detail["status"] == "ready" and detail["chunk_count"] >= 1, detail
    assert editor.get(f"/api/v1/jobs/{resumed}/").json()["status"] == "done"
    hits = editor.post("/api/v1/search/", {"query": "per diem field staff"}, format="json").json()["hits"]
    assert any("35 EUR" in h["text"] for h in hits), hits

    chunks = detail["chunk_count"]
    with django_capture_on_commit_callbacks(execute=True):
        ready = upload(editor, world.shared.id, ("per-diem.md", BODY))
    assert ready.status_code == 202 and ready.json()["jobs"] == [None]  # ready: nothing to do
    assert editor.get(f"/api/v1/documents/{document_id}/").json()["chunk_count"] == chunks  # chunks exactly once
