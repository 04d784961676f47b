"""Feedback on answers: the asker gives it on its own run; auditors list it (audit review)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agents.access import access_own_run, visible_feedback
from agents.feedback import give_feedback
from agents.models import Rating
from agents.review import principal_names
from api import serializers as s
from api.permissions import ASK, AUDIT
from api.views.base import ScopedAPIView, date_bound
from tenants.scope import activate


class RunFeedback(ScopedAPIView):
    """Thumbs up or down, with an optional comment, on an answer the caller itself asked for (stored
    append-only: a change of mind is a new row)."""

    roles = ASK

    @extend_schema(request=s.FeedbackSerializer, responses={201: s.FeedbackSerializer})
    def post(self, request: Request, run_id: int) -> Response:
        with activate(self.scope):
            access_own_run(self.scope, run_id)  # 404 before the body is read
        ser = s.FeedbackSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        feedback = give_feedback(scope=self.scope, run_id=run_id, rating=ser.validated_data["rating"],
                                 comment=ser.validated_data.get("comment", ""))
        with activate(self.scope):
            names = principal_names(self.scope.tenant_id, [feedback.principal])
        return Response(s.FeedbackSerializer(feedback, context={"principal_names": names}).data, status=status.HTTP_201_CREATED)


class FeedbackList(ScopedAPIView):
    """Feedback on the runs the caller may audit, newest first (auditors and admins), each with
    `principal_name` (agents.review.principal_names)."""

    roles = AUDIT

    @extend_schema(parameters=[OpenApiParameter("rating", str, enum=Rating.values),
                               OpenApiParameter("since", str, description="ISO date or datetime (inclusive)"),
                               OpenApiParameter("until", str, description="ISO date or datetime (inclusive)")],
                   responses=s.FeedbackSerializer(many=True))
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            qs = visible_feedback(self.scope)
            if rating := request.query_params.get("rating"):
                if rating not in Rating.values:
                    raise ValidationError({"rating": [f"one of {', '.join(Rating.values)}"]})
                qs = qs.filter(rating=rating)
            if since := date_bound(request.query_params.get("since"), "since", end=False):
                qs = qs.filter(created_at__gte=since)
            if until := date_bound(request.query_params.get("until"), "until", end=True):
                qs = qs.filter(created_at__lte=until)
            paginator = self.pagination_class()
            page = paginator.paginate_queryset(qs, request, view=self) or []
            names = principal_names(self.scope.tenant_id, [f.principal for f in page])
            return paginator.get_paginated_response(s.FeedbackSerializer(page, many=True, context={"principal_names": names}).data)
