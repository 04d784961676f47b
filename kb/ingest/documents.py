"""Document services: upload (new version or no-op), re-ingest and delete, each checked by kb.access and
queueing its job in the same transaction."""

from __future__ import annotations

import enum
import hashlib
import json
from pathlib import PurePath
from typing import Final, Literal

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from kb import access
from kb.ingest.dates import document_date
from kb.ingest.queue import enqueue_job
from kb.metadata import metadata_problem
from kb.models import Chunk, Corpus, Document, DocumentContent, DocumentStatus, IngestJob, JobStatus
from kb.parsing import ParseError, declared_type, detect_type
from tenants.conf import product_settings
from tenants.scope import Scope, activate


class UploadRejected(ValueError):
    """The upload is refused before anything is stored; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Default(enum.Enum):
    """A default that None cannot stand for (None is "tenant-wide")."""

    CORPUS_DEPARTMENT = "the corpus's department"


_CORPUS_DEPARTMENT: Final = _Default.CORPUS_DEPARTMENT


def upload_document(*, scope: Scope, corpus: Corpus, filename: str, data: bytes, metadata: dict | None = None,
                    title: str | None = None, department_id: int | None | Literal[_Default.CORPUS_DEPARTMENT] = _CORPUS_DEPARTMENT,
                    mime_type: str | None = None) -> tuple[Document, IngestJob | None]:
    """Store an upload and queue its ingestion; returns at once (the job runs after commit).

    Same source name and same bytes: no-op, returns (document, None) (a failed document is retried; one
    still pending or processing, e.g. after its worker died, is resumed and its job returned).
    Changed bytes: version + 1, status pending, a new job. Raises UploadRejected(field, message).
    `department_id` (sources' mapping rules) places a new document of a tenant-wide corpus in a
    department (None: tenant-wide); a corpus with a department keeps its documents there. `mime_type`
    is what upstream declared (a web server), used when the name has no known extension.
    """
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
    if len(data) > product_settings.MAX_UPLOAD_BYTES:
        raise UploadRejected("file", f"the file is {len(data)} bytes; the limit is {product_settings.MAX_UPLOAD_BYTES} bytes")
    if metadata is not None:
        if problem := metadata_problem(metadata):  # the rule the API and the admin check first (kb.metadata)
            raise UploadRejected("metadata", problem)
        try:
            json.dumps(metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UploadRejected("metadata", f"metadata is not JSON-serialisable: {exc}") from None
    if department_id is _CORPUS_DEPARTMENT:
        department_id = corpus.department_id
    elif department_id != corpus.department_id and (corpus.department_id is not None or not scope.may_change_department(department_id)):
        raise UploadRejected("department", "a document goes into its corpus's department, or a department the caller may change")
    try:
        mime_type = detect_type(filename, data) if mime_type is None else declared_type(filename, data, mime_type)
    except ParseError as exc:
        raise UploadRejected("file", str(exc)) from None

    sha = hashlib.sha256(data).hexdigest()
    with activate(scope):
        document = Document.objects.for_scope(scope).select_for_update().filter(corpus=corpus, source_name=filename).first()
        if document is None:
            try:
                with transaction.atomic():
                    document = Document.objects.create(
                        tenant_id=scope.tenant_id, department_id=department_id, corpus=corpus,
                        title=title or filename, source_name=filename, mime_type=mime_type, sha256=sha,
                        size_bytes=len(data), metadata=metadata or {}, status=DocumentStatus.PENDING,
                        dated_at=document_date(metadata, corpus.date_key))
            except IntegrityError:  # a concurrent upload of the same name won the race
                document = Document.objects.for_scope(scope).select_for_update().get(corpus=corpus, source_name=filename)
            else:
                DocumentContent.objects.create(document=document, tenant_id=scope.tenant_id, data=data)
                return document, _queue_ingest(scope, document)
        if document.sha256 == sha and document.status != DocumentStatus.FAILED:
            changed: list[str] = []
            if metadata is not None and metadata != document.metadata:
                document.metadata, changed = metadata, [*changed, "metadata", "dated_at"]
                document.dated_at = document_date(metadata, corpus.date_key)
            if title and title != document.title:
                document.title, changed = title, [*changed, "title"]
            if changed:
                document.save(update_fields=[*changed, "updated_at"])
            if document.status in (DocumentStatus.PENDING, DocumentStatus.PROCESSING):
                return document, _resume_ingest(scope, document)
            return document, None
        if document.sha256 != sha:
            document.version += 1
        document.sha256, document.size_bytes, document.mime_type = sha, len(data), mime_type
        document.status, document.error = DocumentStatus.PENDING, ""
        if metadata is not None:
            document.metadata = metadata
            document.dated_at = document_date(metadata, corpus.date_key)
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
    """Delete a document with its chunks, content and jobs; the corpus's chunk count follows. Its jobs going
    cancels them: a queued one's message finds nothing to do, a running one stops at its next checkpoint
    (its parse killed, or before its next embedding batch) and writes nothing (kb.ingest.pipeline)."""
    access.check_may_change(scope, document, "document")
    with activate(scope):
        Corpus.objects.for_scope(scope).select_for_update().filter(pk=document.corpus_id).first()  # serialise with writers
        locked = Document.objects.for_scope(scope).select_for_update().filter(pk=document.pk).first()
        if locked is None:
            return
        removed = Chunk.objects.for_scope(scope).filter(document_id=locked.pk).count()
        locked.delete()
        with connections["default"].cursor() as cur:
            cur.execute("UPDATE kb_corpus SET chunk_count = GREATEST(0, chunk_count - %s) WHERE tenant_id = %s AND id = %s",
                        [removed, scope.tenant_id, locked.corpus_id])


def move_document(*, scope: Scope, document: Document, department_id: int | None, source_name: str | None = None) -> int:
    """Move a document and its chunks to another department of its tenant-wide corpus (and, for a
    file moved upstream, to its new name) in one transaction, without re-embedding; returns the
    number of chunks moved."""
    access.check_may_change(scope, document, "document")
    if department_id != document.department_id:
        scope.check_may_change(department_id, "document")
    with activate(scope):
        locked = Document.objects.for_scope(scope).select_for_update().select_related("corpus").get(pk=document.pk)
        if department_id != locked.department_id and locked.corpus.department_id is not None:
            raise UploadRejected("department", "a document goes into its corpus's department")
        fields: dict[str, object] = {"department_id": department_id, "updated_at": timezone.now()}
        if source_name:
            fields["source_name"] = source_name
        Document.objects.for_scope(scope).filter(pk=locked.pk).update(**fields)
        return Chunk.objects.for_scope(scope).filter(document_id=locked.pk).update(department_id=department_id)


def _resume_ingest(scope: Scope, document: Document) -> IngestJob:
    """The same bytes uploaded again while the document is not ready: send its unfinished job again (safe:
    a job still alive holds its lease and the duplicate returns "busy"; one whose worker died is taken
    up), or queue a new one if it has none (the database stopped between the upload and its job)."""
    job = (IngestJob.objects.for_scope(scope).filter(document=document, kind=IngestJob.Kind.INGEST,
                                                     status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).order_by("-id").first())
    if job is None:
        return _queue_ingest(scope, document)
    enqueue_job(job.id, scope.tenant_id, job.kind)
    return job


def _queue_ingest(scope: Scope, document: Document) -> IngestJob:
    job = IngestJob.objects.create(tenant_id=scope.tenant_id, corpus_id=document.corpus_id, document=document,
                                   kind=IngestJob.Kind.INGEST, status=JobStatus.QUEUED, stage="queued")
    enqueue_job(job.id, scope.tenant_id, job.kind)
    return job


def source_name_for(path: PurePath, root: PurePath) -> str:
    """Stable source name of a file under a folder: its relative POSIX path."""
    return path.relative_to(root).as_posix()

