"""The original file of a document, for a caller who can see the document (the chat page's source panel)."""

from __future__ import annotations

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request

from api.permissions import READ_KB
from api.views.base import ScopedAPIView
from kb.access import access_document
from kb.models import DocumentContent
from tenants.scope import NotVisible, activate


class DocumentFile(ScopedAPIView):
    """The document's uploaded bytes, as an attachment (never rendered inline: an HTML upload cannot run
    in the site's origin). 404 alike for a document the caller cannot see and one without stored bytes."""

    roles = READ_KB

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="the file")})
    def get(self, request: Request, document_id: int) -> HttpResponse:
        with activate(self.scope):
            document = access_document(self.scope, document_id)
            content = DocumentContent.objects.for_scope(self.scope).filter(document_id=document.pk).values_list("data", flat=True).first()
        if content is None:
            raise NotVisible("document file not found")
        name = (document.source_name.replace("\\", "/").rsplit("/", 1)[-1] or f"document-{document.pk}").replace("\x00", "")
        response = HttpResponse(bytes(content), content_type=document.mime_type or "application/octet-stream")
        response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=name)
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "sandbox"
        return response
