"""A corpus saved to its portable file and loaded back (kb.transfer; docs/export.md), for tenant admins.

GET  corpora/<id>/export/  the corpus file (gzip'd JSON lines) as an attachment; `include_bytes=false`
                           leaves the original files out. 404 for a corpus the caller cannot see,
                           403 for one it may not change, 409 while it is ingesting or re-embedding.
POST corpora/import/       multipart `file` (+ optional `name`, `department`, `reembed`): a new corpus
                           of the caller's tenant (never one the file names). 201 with the corpus;
                           200 with `created: false` when the same content was imported before;
                           400 naming the problem (the file, its digest, dimension, model, a line
                           too long, not gzip, ...) with nothing written.
"""

from __future__ import annotations

import tempfile

from django.http import FileResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api import serializers as s
from api.permissions import MANAGE
from api.serializers.common import department_or_400, id_field
from api.views.base import ScopedAPIView
from kb import access
from kb.access import access_corpus, visible_documents
from kb.transfer import ExportRefused, FileRejected, export_corpus, import_corpus
from tenants.scope import activate

SPOOL_BYTES = 32 * 1024 * 1024  # an export larger than this is spooled to a temporary file


class CorpusBusy(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class ImportRequestSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=False, help_text="a corpus file (.jsonl.gz) from an export")
    name = serializers.CharField(max_length=200, required=False, help_text="default: the exported corpus's name")
    department = id_field(required=False, allow_null=True, help_text="default: tenant-wide")
    reembed = serializers.RegexField(r"^[A-Za-z0-9._/-]{1,100}:[0-9]{1,5}$", required=False,
                                     help_text="'<model>:<dim>': embed the texts with this model instead of keeping the file's vectors")


class ImportResultSerializer(serializers.Serializer):
    created = serializers.BooleanField(help_text="false: this content was imported before; nothing was written")
    message = serializers.CharField()
    documents = serializers.IntegerField()
    chunks = serializers.IntegerField()
    sentences = serializers.IntegerField()
    reembedded = serializers.BooleanField()
    corpus = s.CorpusSerializer()


class CorpusExport(ScopedAPIView):
    """The corpus as one portable, versioned file: documents, chunks, sentence vectors, embeddings, manifest."""

    roles = MANAGE
    pins_writes = False

    @extend_schema(parameters=[OpenApiParameter("include_bytes", bool, description="include the original files (default true)")],
                   responses={(200, "application/gzip"): OpenApiResponse(OpenApiTypes.BINARY, description="the corpus file")})
    def get(self, request: Request, corpus_id: int) -> FileResponse:
        raw = request.query_params.get("include_bytes", "true").lower()
        if raw not in ("true", "false", "1", "0"):
            raise ValidationError({"include_bytes": ["true or false"]})
        with activate(self.scope):
            corpus = access_corpus(self.scope, corpus_id)
        access.check_may_export_corpus(self.scope, corpus)
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115  (FileResponse closes it)
        try:
            export_corpus(scope=self.scope, corpus=corpus, out=spool, include_bytes=raw in ("true", "1"))
        except ExportRefused as exc:
            spool.close()
            raise CorpusBusy(str(exc)) from None
        spool.seek(0)
        response = FileResponse(spool, content_type="application/gzip")
        response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=f"corpus-{corpus.pk}.jsonl.gz")
        return response


class CorpusImport(ScopedAPIView):
    """Load a corpus file into the caller's tenant as a new corpus, without re-embedding (idempotent)."""

    roles = MANAGE
    parser_classes = [MultiPartParser]

    @extend_schema(request={"multipart/form-data": ImportRequestSerializer},
                   responses={201: ImportResultSerializer, 200: ImportResultSerializer})
    def post(self, request: Request) -> Response:
        body = self.valid_body(ImportRequestSerializer)
        department_id = body.get("department")
        with activate(self.scope):
            try:
                department_or_400(self.scope, department_id)
            except serializers.ValidationError as exc:
                raise ValidationError({"department": exc.detail}) from None
        upload = body["file"]
        try:
            result = import_corpus(scope=self.scope, stream=upload.file, name=body.get("name"), department_id=department_id,
                                   reembed=body.get("reembed"))
        except FileRejected as exc:
            raise ValidationError({exc.field: [exc.message]}) from None
        with activate(self.scope):
            corpus = access_corpus(self.scope, result.corpus_id)
            corpus.document_count = visible_documents(self.scope).filter(corpus=corpus).count()
            data = {"created": result.created, "message": result.describe(), "documents": result.documents,
                    "chunks": result.chunks, "sentences": result.sentences, "reembedded": result.reembedded,
                    "corpus": s.CorpusSerializer(corpus).data}
        return Response(data, status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)
