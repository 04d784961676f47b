"""Feedback in audit review: read-only, filterable (rating, date, corpus, comment text), exportable as
CSV, with the counts per corpus above the list; and the run list's feedback filter and column.

Rows come from the staff user's scope (agents.access.visible_feedback) like every audit view."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from agents.admin_base import ReadOnlyAuditAdmin, csv_cell, name_principals
from agents.feedback import feedback_per_corpus, run_corpora
from agents.models import Citation, Feedback, Rating
from kb.models import Corpus, Document
from tenants.admin_base import scoped_queryset, scoped_view


class RunFeedbackFilter(admin.SimpleListFilter):
    """The run list narrowed to answers that got a thumbs down / up, or no feedback."""

    title = "feedback"
    parameter_name = "feedback"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [("down", "thumbs down"), ("up", "thumbs up"), ("none", "no feedback")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in Rating.values:
            return queryset.filter(feedback__rating=self.value()).distinct()
        if self.value() == "none":
            return queryset.filter(feedback__isnull=True)
        return queryset


class CorpusFilter(admin.SimpleListFilter):
    """Feedback on answers that cited a document of one corpus."""

    title = "corpus"
    parameter_name = "corpus"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [(c.pk, c.name) for c in scoped_queryset(request, Corpus).order_by("name")[:200]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        corpus_id = self.value()
        if not (corpus_id and corpus_id.isdigit()):
            return queryset
        documents = scoped_queryset(request, Document).filter(corpus_id=int(corpus_id)).values("pk")
        runs = scoped_queryset(request, Citation).filter(document_id__in=documents).values("run_id")
        return queryset.filter(run_id__in=runs)


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyAuditAdmin):
    """Thumbs up/down with comments, per answer; read-only (feedback is append-only)."""

    list_display = ["id", "created_at", "rating_col", "comment", "run_link", "short_question", "given_by", "corpora"]
    list_filter = ["rating", ("created_at", admin.DateFieldListFilter), CorpusFilter]
    search_fields = ["comment", "run__question"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scoped_queryset(request, Feedback).select_related("run").order_by("-created_at", "-id")

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        if "\x00" in term or len(term) > 500:
            return queryset.none(), False
        return queryset.filter(Q(comment__icontains=term) | Q(run__question__icontains=term)), False

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        names = run_corpora(scoped_queryset(request, Citation), scoped_queryset(request, Document), [f.run_id for f in rows])
        name_principals(request, rows)
        for f in rows:
            f.corpus_names = names.get(f.run_id, [])
        return changelist

    @admin.display(description="rating", ordering="rating")
    def rating_col(self, obj) -> str:
        return "▲ up" if obj.rating == Rating.UP else "▼ down"

    @admin.display(description="run")
    def run_link(self, obj) -> str:
        return format_html('<a href="{}">run {}</a>', reverse("admin:agents_run_change", args=[obj.run_id]), obj.run_id)

    @admin.display(description="question")
    def short_question(self, obj) -> str:
        return obj.run.question[:90] + ("…" if len(obj.run.question) > 90 else "")

    @admin.display(description="given by", ordering="principal")
    def given_by(self, obj) -> str:
        return getattr(obj, "principal_name", obj.principal)

    @admin.display(description="corpora cited")
    def corpora(self, obj) -> str:
        return ", ".join(getattr(obj, "corpus_names", [])) or "—"

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [path("export.csv", wrap(scoped_view(self.export_csv)), name="agents_feedback_export_csv"), *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        query = request.GET.urlencode()
        extra = {"export_csv": reverse("admin:agents_feedback_export_csv") + (f"?{query}" if query else ""),
                 "per_corpus": feedback_per_corpus(scoped_queryset(request, Feedback), scoped_queryset(request, Citation),
                                                   scoped_queryset(request, Document))}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def export_csv(self, request):
        """The feedback the current filters select, oldest first, with its run's question and answer.
        `principal` stays the raw principal (`user:<id>`, `key:<public id>`); `principal_name`, the last
        column (added after the others, so their positions hold), names the user or key."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            rows = list(self.get_changelist_instance(request).get_queryset(request).order_by("created_at", "id")[:50_000])
        except IncorrectLookupParameters:
            raise SuspiciousOperation("unknown filter parameter in the export query") from None
        names = run_corpora(scoped_queryset(request, Citation), scoped_queryset(request, Document), [f.run_id for f in rows])
        name_principals(request, rows)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "created_at", "rating", "comment", "principal", "run_id", "question", "outcome", "answer", "corpora",
                         "principal_name"])
        for f in rows:
            writer.writerow([csv_cell(v) for v in (f.id, f.created_at.isoformat(), f.rating, f.comment, f.principal, f.run_id,
                                                f.run.question, f.run.outcome, f.run.answer, "; ".join(names.get(f.run_id, [])),
                                                f.principal_name)])
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="feedback.csv"'
        return response
