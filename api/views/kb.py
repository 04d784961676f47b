"""Corpora, documents, ingestion jobs and search."""

from __future__ import annotations

from django.db.models import Count, Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api import serializers as s
from api.permissions import EDIT_DOCUMENTS, MANAGE, READ_KB
from api.views.base import ScopedAPIView
from kb import access, retrieval
from kb.access import access_corpus, access_document, access_job, visible_corpora, visible_documents, visible_jobs
from kb.ingest import UploadRejected, delete_document, reingest_document, start_reembed, upload_document
from kb.ingest.corpora import save_corpus
from kb.models import Corpus, Document, DocumentStatus, IngestJob, JobStatus
from tenants.scope import NotVisible, activate


class CorpusList(ScopedAPIView):
    """List the corpora the caller sees; admins create them."""

    read_roles = READ_KB
    write_roles = MANAGE

    @extend_schema(responses=s.CorpusSerializer(many=True))
    def get(self, request: Request) -> Response:
        with self.reading():  # the read replica where tenants.replicas allows it
            qs = visible_corpora(self.scope).annotate(document_count=Count("documents"))
            return self.paginated(qs, s.CorpusSerializer)

    @extend_schema(request=s.CorpusSerializer, responses={201: s.CorpusSerializer})
    def post(self, request: Request) -> Response:
        with activate(self.scope):
            data = dict(self.valid_body(s.CorpusSerializer, context={"scope": self.scope}))
            corpus = Corpus.objects.create(tenant_id=self.scope.tenant_id, **data)
            corpus.document_count = 0
            return Response(s.CorpusSerializer(corpus).data, status=status.HTTP_201_CREATED)


class CorpusDetail(ScopedAPIView):
    """One corpus; admins rename/describe/re-department or delete it (with its documents)."""

    read_roles = READ_KB
    write_roles = MANAGE

    @extend_schema(responses=s.CorpusSerializer)
    def get(self, request: Request, corpus_id: int) -> Response:
        with activate(self.scope):
            corpus = access_corpus(self.scope, corpus_id)
            corpus.document_count = visible_documents(self.scope).filter(corpus=corpus).count()
            return Response(s.CorpusSerializer(corpus).data)

    @extend_schema(request=s.CorpusSerializer, responses=s.CorpusSerializer)
    def patch(self, request: Request, corpus_id: int) -> Response:
        with activate(self.scope):
            corpus = access_corpus(self.scope, corpus_id)
            access.check_may_change(self.scope, corpus, "corpus")
            data = self.valid_body(s.CorpusSerializer, corpus, partial=True, context={"scope": self.scope})
            changed = [field for field, value in data.items() if getattr(corpus, field) != value]
            for field, value in data.items():
                setattr(corpus, field, value)
            save_corpus(scope=self.scope, corpus=corpus, changed=changed)
            corpus.document_count = visible_documents(self.scope).filter(corpus=corpus).count()
            return Response(s.CorpusSerializer(corpus).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, corpus_id: int) -> Response:
        with activate(self.scope):
            corpus = access_corpus(self.scope, corpus_id)
            access.check_may_change(self.scope, corpus, "corpus")
            corpus.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class CorpusReembed(ScopedAPIView):
    """Re-embed a corpus into another model: searches keep the old vectors until the job switches
    every chunk (and sentence) in one transaction (docs/ingestion.md). 202 with the job, or 200
    with the corpus when it already uses that model."""

    roles = MANAGE

    @extend_schema(request=s.ReembedSerializer, responses={202: s.IngestJobSerializer, 200: s.CorpusSerializer})
    def post(self, request: Request, corpus_id: int) -> Response:
        with activate(self.scope):
            corpus = access_corpus(self.scope, corpus_id)
        access.check_may_change(self.scope, corpus, "corpus")
        job = start_reembed(scope=self.scope, corpus=corpus, model_key=self.valid_body(s.ReembedSerializer)["model_key"])
        with activate(self.scope):
            if job is None:
                corpus = access_corpus(self.scope, corpus_id)
                corpus.document_count = visible_documents(self.scope).filter(corpus=corpus).count()
                return Response(s.CorpusSerializer(corpus).data)
            return Response(s.IngestJobSerializer(access_job(self.scope, job.id)).data, status=status.HTTP_202_ACCEPTED)


def _with_latest_job(qs, scope):
    return qs.prefetch_related(Prefetch("jobs", queryset=IngestJob.objects.for_scope(scope).order_by("-id"), to_attr="all_jobs"))


def _documents_out(docs) -> list[dict]:
    for d in docs:
        if hasattr(d, "all_jobs"):
            d.latest_jobs = d.all_jobs[:1]
    return list(s.DocumentSerializer(docs, many=True).data)


def _choice(value: str, allowed: list[str], field: str) -> str:
    if value not in allowed:
        raise ValidationError({field: [f"one of {', '.join(allowed)}"]})
    return value


def _rejected_field(field: str, index: int) -> str:
    return f"files[{index}]" if field in {"file", "files", "data", "filename", "content"} else field


class DocumentList(ScopedAPIView):
    """List documents with status and ingestion progress; editors upload one or more files (202: ingestion is queued)."""

    read_roles = READ_KB
    write_roles = EDIT_DOCUMENTS
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(parameters=[OpenApiParameter("corpus", int), OpenApiParameter("status", str, enum=DocumentStatus.values)],
                   responses=s.DocumentSerializer(many=True))
    def get(self, request: Request) -> Response:
        with self.reading():  # the read replica where tenants.replicas allows it
            qs = _with_latest_job(visible_documents(self.scope), self.scope)
            if request.query_params.get("corpus"):
                qs = qs.filter(corpus=access_corpus(self.scope, request.query_params["corpus"]))
            if request.query_params.get("status"):
                qs = qs.filter(status=_choice(request.query_params["status"], DocumentStatus.values, "status"))
            paginator = self.pagination_class()
            page: list[Document] = paginator.paginate_queryset(qs, request, view=self) or []
            return paginator.get_paginated_response(_documents_out(page))

    @extend_schema(request={"multipart/form-data": s.UploadSerializer}, responses={202: s.UploadResultSerializer})
    def post(self, request: Request) -> Response:
        """202 at once with the documents (pending) and their job ids (None: same bytes, nothing to do);
        the worker parses, chunks and embeds, and `GET /jobs/{id}/` shows its progress per batch."""
        form = request.data
        if not isinstance(form, dict):  # not from this view's parsers (multipart, form): they give a QueryDict
            raise ValidationError({"body": ["expected a multipart form"]})
        ser = s.UploadSerializer(data={"corpus": form.get("corpus"), "files": request.FILES.getlist("files"),
                                       **{k: form[k] for k in ("metadata", "title") if k in form}})
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        documents, jobs = [], []
        # All files or none: a rejected file rolls back the others (and their queued jobs).
        with activate(self.scope):
            try:
                corpus = access_corpus(self.scope, data["corpus"])
            except NotVisible:
                raise ValidationError({"corpus": ["corpus not found"]}) from None
            for i, f in enumerate(data["files"]):
                try:
                    doc, job = upload_document(scope=self.scope, corpus=corpus, filename=f.name, data=f.read(),
                                               metadata=data.get("metadata") or None, title=data.get("title"))
                except UploadRejected as exc:
                    raise ValidationError({_rejected_field(exc.field, i): [exc.message]}) from None
                documents.append(doc)
                jobs.append(job.id if job else None)
        with activate(self.scope):
            fresh = list(_with_latest_job(visible_documents(self.scope), self.scope).filter(id__in=[d.id for d in documents]))
            fresh.sort(key=lambda d: [x.id for x in documents].index(d.id))
            return Response({"documents": _documents_out(fresh), "jobs": jobs}, status=status.HTTP_202_ACCEPTED)


class DocumentDetail(ScopedAPIView):
    """One document with its progress; editors delete it (chunks go with it; audit rows stay)."""

    read_roles = READ_KB
    write_roles = EDIT_DOCUMENTS

    @extend_schema(responses=s.DocumentSerializer)
    def get(self, request: Request, document_id: int) -> Response:
        return self.read_one(lambda scope: s.DocumentSerializer(access_document(scope, document_id), context={"scope": scope}).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, document_id: int) -> Response:
        return self.delete_one(lambda scope: delete_document(scope=scope, document=access_document(scope, document_id)))


class DocumentReingest(ScopedAPIView):
    """Parse, chunk and embed the stored bytes again (a new version); returns the job."""

    roles = EDIT_DOCUMENTS

    @extend_schema(request=None, responses={202: s.IngestJobSerializer})
    def post(self, request: Request, document_id: int) -> Response:
        with activate(self.scope):
            job = reingest_document(scope=self.scope, document=access_document(self.scope, document_id))
        with activate(self.scope):
            return Response(s.IngestJobSerializer(access_job(self.scope, job.id)).data, status=status.HTTP_202_ACCEPTED)


class JobList(ScopedAPIView):
    """Ingestion jobs with progress, newest first."""

    roles = READ_KB

    @extend_schema(parameters=[OpenApiParameter("status", str, enum=JobStatus.values), OpenApiParameter("document", int)],
                   responses=s.IngestJobSerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            qs = visible_jobs(self.scope)
            if request.query_params.get("status"):
                qs = qs.filter(status=_choice(request.query_params["status"], JobStatus.values, "status"))
            if request.query_params.get("document"):
                qs = qs.filter(document=access_document(self.scope, request.query_params["document"]))
            return self.paginated(qs, s.IngestJobSerializer)


class JobDetail(ScopedAPIView):
    roles = READ_KB

    @extend_schema(responses=s.IngestJobSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        return self.read_one(lambda scope: s.IngestJobSerializer(access_job(scope, job_id)).data)


class Search(ScopedAPIView):
    """Search the chunks the caller may see; filters only narrow."""

    roles = READ_KB
    pins_writes = False  # a POST that writes nothing

    @extend_schema(request=s.SearchRequestSerializer, responses=s.SearchResponseSerializer)
    def post(self, request: Request) -> Response:
        data = self.valid_body(s.SearchRequestSerializer)
        f = data.get("filters") or {}
        filters = retrieval.SearchFilters(
            corpus_ids=tuple(f["corpus_ids"]) if "corpus_ids" in f else None,
            document_ids=tuple(f["document_ids"]) if "document_ids" in f else None,
            department_ids=tuple(f["department_ids"]) if "department_ids" in f else None,
            metadata=f.get("metadata") or None,
            date_after=f["date_after"].isoformat() if f.get("date_after") else None,
            date_before=f["date_before"].isoformat() if f.get("date_before") else None,
        )
        # search() sets the RLS tenant itself; outside a transaction it can run its hybrid rankings at once.
        result = retrieval.search(self.scope, data["query"], k=data["k"], mode=data["mode"], filters=filters, rerank=data["rerank"])
        return Response(search_result_json(result))


def search_result_json(result) -> dict:
    return {
        "hits": [{**{f: getattr(h, f) for f in ("chunk_id", "document_id", "corpus_id", "corpus_name", "document_title", "locator",
                                                "page", "ordinal", "text", "score", "metadata")}, "flags": list(h.flags)}
                 for h in result.hits],
        "applied_filter": result.applied_filter,
        "path": result.path,
        "timings_ms": result.timings_ms,
    }
