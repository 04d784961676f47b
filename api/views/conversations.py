"""Conversations: start, list, read, delete (hide), and ask the next turn (JSON or Server-Sent Events).

Thin: each handler is one call of agents.conversations under the caller's scope, authenticated on
every request (a key revoked mid-thread gets 401 on its next message)."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agents import conversations
from agents.access import access_conversation
from agents.budgets import spend_daily_run
from agents.models import Citation, Run
from agents.services import InvalidQuestion
from api import serializers as s
from api.permissions import ASK
from api.views.agents import ask_events, chosen_corpora, run_detail
from api.views.base import ScopedAPIView
from kb.models import Chunk
from tenants.scope import Scope, activate


def _send(*, scope: Scope, conversation_id: int, **kwargs) -> Run:
    """The next turn (agents.conversations.send_message, which spends the tenant's daily run budget unless
    told `spend_budget=False`: api.errors answers 429 past it); a bad message or strategy is a 400 on its field."""
    try:
        return conversations.send_message(scope=scope, conversation_id=conversation_id, message=kwargs.pop("question"), **kwargs)
    except InvalidQuestion as exc:
        field = exc.field or ("strategy" if "strategy" in str(exc) else "message")
        raise ValidationError({field: [str(exc)]}) from None


def conversation_detail(scope: Scope, conversation) -> dict:
    """The conversation with its turns and their citations (with the cited chunks still visible). Inside activate(scope)."""
    runs = conversations.conversation_turns(scope, conversation)
    cites: dict[int, list] = {}
    for c in Citation.objects.for_scope(scope).filter(run_id__in=[r.id for r in runs]).order_by("run_id", "ordinal"):
        cites.setdefault(c.run_id, []).append(c)
    chunk_ids = {c.chunk_id for cs in cites.values() for c in cs}
    chunks = {c.id: c for c in Chunk.objects.for_scope(scope).filter(id__in=chunk_ids).select_related("document")}
    return s.ConversationDetailSerializer(conversation, context={"runs": runs, "citations": cites, "chunks": chunks}).data


class ConversationList(ScopedAPIView):
    """The caller's own conversations, newest first (`?q=`: those whose title or questions contain the
    text); POST starts a new one."""

    roles = ASK

    @extend_schema(parameters=[OpenApiParameter("q", str, description="text in the title, or in a question asked in it")],
                   responses=s.ConversationSerializer(many=True))
    def get(self, request: Request) -> Response:
        text = request.query_params.get("q") or ""
        if "\x00" in text or len(text) > 200:
            raise ValidationError({"q": ["at most 200 characters, without NUL"]})
        with self.reading():  # the read replica where tenants.replicas allows it
            return self.paginated(conversations.find_conversations(self.scope, text), s.ConversationSerializer)

    @extend_schema(request=s.ConversationSerializer, responses={201: s.ConversationSerializer})
    def post(self, request: Request) -> Response:
        ser = s.ConversationSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        conversation = conversations.start_conversation(scope=self.scope, title=ser.validated_data.get("title", ""))
        return Response(s.ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)


class ConversationDetail(ScopedAPIView):
    """One of the caller's conversations with its turns; PATCH renames it; DELETE hides it from its owner
    (its runs stay for audit)."""

    roles = ASK

    @extend_schema(responses=s.ConversationDetailSerializer)
    def get(self, request: Request, conversation_id: int) -> Response:
        return self.read_one(lambda scope: conversation_detail(scope, access_conversation(scope, conversation_id)), replica=True)

    @extend_schema(request=s.ConversationRenameSerializer, responses=s.ConversationSerializer)
    def patch(self, request: Request, conversation_id: int) -> Response:
        with activate(self.scope):
            access_conversation(self.scope, conversation_id)  # 404 before the body is read
        ser = s.ConversationRenameSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            conversation = conversations.rename_conversation(scope=self.scope, conversation_id=conversation_id,
                                                             title=ser.validated_data["title"])
        except InvalidQuestion as exc:
            raise ValidationError({"title": [str(exc)]}) from None
        return Response(s.ConversationSerializer(conversation).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, conversation_id: int) -> Response:
        conversations.hide_conversation(scope=self.scope, conversation_id=conversation_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConversationMessages(ScopedAPIView):
    """Ask the conversation's next turn: the follow-up is made standalone against the thread (the
    run's `question`; what was typed is its `message`) and answered; returns the run like ask."""

    roles = ASK

    @extend_schema(request=s.MessageRequestSerializer, responses=s.RunDetailSerializer)
    def post(self, request: Request, conversation_id: int) -> Response:
        with activate(self.scope):
            access_conversation(self.scope, conversation_id)  # 404 before the body is read or the daily budget spent
        ser = s.MessageRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        run = _send(scope=self.scope, conversation_id=conversation_id, question=ser.validated_data["message"],
                    strategy=ser.validated_data["strategy"], corpus_ids=ser.validated_data.get("corpus_ids"))
        with activate(self.scope):
            return Response(run_detail(self.scope, run))


class ConversationMessagesStream(ScopedAPIView):
    """Like messages, as Server-Sent Events (the events of ask/stream; `done` adds conversation_id, turn
    and the standalone question)."""

    roles = ASK

    @extend_schema(request=s.MessageRequestSerializer,
                   responses={(200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description="SSE stream")})
    def post(self, request: Request, conversation_id: int) -> StreamingHttpResponse:
        with activate(self.scope):
            access_conversation(self.scope, conversation_id)
        ser = s.MessageRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        chosen = chosen_corpora(self.scope, ser.validated_data.get("corpus_ids"))
        spend_daily_run(self.scope.tenant_id)  # past the budget: 429 (api.errors) now, not an error event after the 200

        def asker(**kwargs) -> Run:
            return _send(conversation_id=conversation_id, spend_budget=False, corpus_ids=chosen, **kwargs)

        events = ask_events(self.scope, ser.validated_data["message"], ser.validated_data["strategy"], asker=asker)
        response = StreamingHttpResponse(events, content_type="text/event-stream", status=status.HTTP_200_OK)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
