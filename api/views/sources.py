"""Sources: where a corpus's documents live, and their syncs. Same roles as corpora: readers list
them, admins add, change, pause, delete and sync them. Credentials go in, never out."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api import serializers as s
from api.permissions import MANAGE, READ_KB
from api.views.base import ScopedAPIView
from kb.access import access_corpus, access_source, visible_source_items, visible_source_syncs, visible_sources
from kb.models import SourceItem
from kb.sources.services import source_create, source_delete, source_update
from kb.sources.sync import request_sync
from tenants.scope import NotVisible, activate


def _out(source) -> dict:
    return s.SourceSerializer(source).data


class SourceList(ScopedAPIView):
    """List the sources of the corpora the caller sees; admins add them."""

    read_roles = READ_KB
    write_roles = MANAGE

    @extend_schema(parameters=[OpenApiParameter("corpus", int)], responses=s.SourceSerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            qs = visible_sources(self.scope).select_related("last_sync")
            if request.query_params.get("corpus"):
                qs = qs.filter(corpus=access_corpus(self.scope, request.query_params["corpus"]))
            return self.paginated(qs, s.SourceSerializer)

    @extend_schema(request=s.SourceSerializer, responses={201: s.SourceSerializer})
    def post(self, request: Request) -> Response:
        data = self.valid_body(s.SourceSerializer)
        with activate(self.scope):
            try:
                corpus = access_corpus(self.scope, data["corpus_id"])
            except NotVisible:
                raise ValidationError({"corpus": ["corpus not found"]}) from None
            source = source_create(scope=self.scope, corpus=corpus, name=data["name"], kind=data["kind"], config=data["config"],
                                   credentials=data.get("credentials"), department_rules=data.get("department_rules") or [],
                                   schedule_minutes=data["schedule_minutes"], paused=data["paused"])
            return Response(_out(source), status=status.HTTP_201_CREATED)


class SourceDetail(ScopedAPIView):
    """One source with its last sync; admins change (new credentials replace the old), pause or delete it."""

    read_roles = READ_KB
    write_roles = MANAGE

    @extend_schema(responses=s.SourceSerializer)
    def get(self, request: Request, source_id: int) -> Response:
        return self.read_one(lambda scope: _out(access_source(scope, source_id)))

    @extend_schema(request=s.SourcePatchSerializer, responses=s.SourceSerializer)
    def patch(self, request: Request, source_id: int) -> Response:
        with activate(self.scope):
            source = access_source(self.scope, source_id)  # first: a foreign id is "not found" whatever the body
            changes = {k: v for k, v in self.valid_body(s.SourcePatchSerializer, partial=True).items() if k in
                       {"name", "config", "credentials", "department_rules", "schedule_minutes", "paused"}}
            if "department_rules" in changes:
                changes["department_rules"] = [dict(r) for r in changes["department_rules"]]
            source = source_update(scope=self.scope, source=source, **changes)
            return Response(_out(access_source(self.scope, source.pk)))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, source_id: int) -> Response:
        return self.delete_one(lambda scope: source_delete(scope=scope, source=access_source(scope, source_id)))


class SourceSyncNow(ScopedAPIView):
    """Sync now: 202 with the new sync, or 200 with the one already queued or running (joined)."""

    roles = MANAGE

    @extend_schema(request=None, responses={202: s.SyncRequestResultSerializer, 200: s.SyncRequestResultSerializer})
    def post(self, request: Request, source_id: int) -> Response:
        with activate(self.scope):
            source = access_source(self.scope, source_id)
        sync, created = request_sync(scope=self.scope, source=source)
        with activate(self.scope):
            fresh = visible_source_syncs(self.scope).get(pk=sync.pk)
            return Response({"sync": s.SourceSyncSerializer(fresh).data, "joined": not created},
                            status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


class SourceSyncList(ScopedAPIView):
    """A source's syncs, newest first, with their summaries."""

    roles = READ_KB

    @extend_schema(responses=s.SourceSyncSerializer(many=True))
    def get(self, request: Request, source_id: int) -> Response:
        with activate(self.scope):
            source = access_source(self.scope, source_id)
            return self.paginated(visible_source_syncs(self.scope).filter(source=source), s.SourceSyncSerializer)


class SourceItemList(ScopedAPIView):
    """What the last syncs saw upstream, with per-item errors (only items of departments the caller sees)."""

    roles = READ_KB

    @extend_schema(parameters=[OpenApiParameter("state", str, enum=SourceItem.State.values)],
                   responses=s.SourceItemSerializer(many=True))
    def get(self, request: Request, source_id: int) -> Response:
        with activate(self.scope):
            source = access_source(self.scope, source_id)
            qs = visible_source_items(self.scope).filter(source=source)
            if request.query_params.get("state"):
                state = request.query_params["state"]
                if state not in SourceItem.State.values:
                    raise ValidationError({"state": [f"one of {', '.join(SourceItem.State.values)}"]})
                qs = qs.filter(state=state)
            return self.paginated(qs, s.SourceItemSerializer)
