"""Audit review of agent runs (read-only: no add, change, delete or actions) and the ask playground.

Runs are append-only and hash-chained; this admin only reads them, through the staff user's scope
(tenants.admin). The playground runs a question exactly as a chosen member or key would, with
THEIR scope, and records who really asked in the run's principal.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from agents.admin_base import ReadOnlyAuditAdmin, csv_cell, name_principals
from agents.chain import GENESIS, run_hash, verify_tenant_chain
from agents.citations import for_citations
from agents.feedback_admin import RunFeedbackFilter
from agents.loop import STRATEGIES
from agents.models import Citation, Feedback, Outcome, Run, RunStep, Verdict
from agents.providers import provider_report
from agents.review import cache_summary, search_runs
from agents.services import InvalidQuestion, ask
from kb.models import Chunk, SourceChange
from kb.sources.selectors import version_origins
from tenants.access import ROLE_GRANTS, visible_api_keys, visible_memberships
from tenants.admin_base import admin_role, admin_scope, scoped, scoped_filter, scoped_queryset, scoped_view
from tenants.counters import RetryLater
from tenants.models import ApiKey, Department, Membership, Tenant
from tenants.scope import Scope, activate

UNVERIFIED = [v for v in Verdict.values if v != Verdict.VERIFIED]


class DepartmentFilter(admin.SimpleListFilter):
    title = "department"
    parameter_name = "department"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [(d.pk, str(d)) for d in scoped_queryset(request, Department).select_related("tenant").order_by("tenant", "name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        department_id = self.value()
        if department_id and department_id.isdigit():
            return queryset.filter(Q(scope__all_departments=True) | Q(scope__department_ids__contains=[int(department_id)]))
        return queryset


class PrincipalFilter(admin.SimpleListFilter):
    title = "user / key"
    parameter_name = "principal"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        rows = scoped_queryset(request, Run).order_by().values_list("tenant_id", "principal").distinct()[:100]
        runs = [Run(tenant_id=tenant_id, principal=principal) for tenant_id, principal in rows]
        name_principals(request, runs)
        return sorted({(r.principal, r.principal_name) for r in runs})

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        principal = self.value()
        if principal and "\x00" in principal:  # PostgreSQL text cannot hold NUL: nothing can match
            return queryset.none()
        return queryset.filter(principal=principal) if principal else queryset


class CacheFilter(admin.SimpleListFilter):
    title = "answer cache"
    parameter_name = "cached"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [("yes", "served from the cache"), ("no", "answered afresh")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in ("yes", "no"):
            return queryset.filter(cached_from_run_id__isnull=self.value() == "no")
        return queryset


class UnverifiedFilter(admin.SimpleListFilter):
    title = "unverified citations"
    parameter_name = "unverified"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [("yes", "has unverified citations"), ("no", "all citations verified")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(n_unverified__gt=0)
        if self.value() == "no":
            return queryset.filter(n_unverified=0)
        return queryset


def trace_context(request, run: Run) -> dict:
    """The run's steps (with the chunks each returned), citations (with the chunk each cites) and chain status."""
    steps = list(scoped_queryset(request, RunStep).filter(run_id=run.id).order_by("ordinal"))
    citations = list(scoped_queryset(request, Citation).filter(run_id=run.id).order_by("ordinal"))
    chunk_ids = {c.chunk_id for c in citations} | {i for s in steps for i in (s.chunk_ids or []) if isinstance(i, int)}
    chunks = {c.id: c for c in scoped_queryset(request, Chunk).filter(id__in=chunk_ids).select_related("document")}
    prev = scoped_queryset(request, Run).filter(tenant_id=run.tenant_id, seq=run.seq - 1).values_list("hash", flat=True).first()
    expected_prev = GENESIS if run.seq == 1 else prev
    chain = {"hash_ok": run_hash(run, steps, citations) == run.hash,
             "link_ok": expected_prev is not None and expected_prev == run.prev_hash}
    chain["ok"] = chain["hash_ok"] and chain["link_ok"]
    name_principals(request, [run])
    # A superuser reads every tenant: the run's whole tenant, as the audit reader of that run.
    reader = admin_scope(request) or Scope(tenant_id=run.tenant_id, all_departments=True, role="auditor", principal="superuser")
    with activate(reader):
        kept = for_citations(reader, [(c.chunk_id, c.content_hash) for c in citations])
    # Which source sync produced each cited version (documents that came from a source).
    versions = {(e.document_id, e.document_version) for e in kept.values()} | {
        (ch.document_id, ch.document.version) for ch in chunks.values()}
    origins = version_origins(scoped_queryset(request, SourceChange), versions)
    return {
        "run": run,
        "steps": [{"step": s, "chunks": [(i, chunks.get(i)) for i in (s.chunk_ids or [])]} for s in steps],
        "citations": [{"citation": c, "chunk": chunks.get(c.chunk_id), "evidence": kept.get((c.chunk_id, c.content_hash)),
                       "origin": _origin(origins, kept.get((c.chunk_id, c.content_hash)), chunks.get(c.chunk_id)),
                       "changed": c.chunk_id in chunks and chunks[c.chunk_id].content_hash != c.content_hash} for c in citations],
        "chain": chain,
        "unverified": sum(1 for c in citations if c.verdict != Verdict.VERIFIED),
    }


def _origin(origins: dict, kept, chunk) -> dict | None:
    if kept is not None:
        return origins.get((kept.document_id, kept.document_version))
    return origins.get((chunk.document_id, chunk.document.version)) if chunk is not None else None


@admin.register(Run)
class RunAdmin(ReadOnlyAuditAdmin):
    """Read-only audit review with filters, a per-run timeline and CSV/JSONL export."""

    list_display = ["id", "created_at", "tenant", "asked_by", "short_question", "strategy", "outcome", "citations_col",
                    "feedback_col", "tokens", "latency"]
    list_filter = [scoped_filter("tenant", Tenant, "tenant"), DepartmentFilter, PrincipalFilter, ("created_at", admin.DateFieldListFilter),
                   "outcome", "strategy", UnverifiedFilter, RunFeedbackFilter, CacheFilter]
    search_fields = ["question", "answer"]
    date_hierarchy = None

    def get_list_filter(self, request):
        filters = list(super().get_list_filter(request))
        return filters if request.user.is_superuser else filters[1:]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # A run's feedback is visible exactly when the run is (agents.access.visible_feedback).
        return scoped_queryset(request, Run).select_related("tenant").annotate(
            n_citations=Count("citations", distinct=True),
            n_unverified=Count("citations", filter=Q(citations__verdict__in=UNVERIFIED), distinct=True),
            feedback_up=Count("feedback", filter=Q(feedback__rating="up"), distinct=True),
            feedback_down=Count("feedback", filter=Q(feedback__rating="down"), distinct=True))

    def get_search_results(self, request, queryset, search_term):
        """The changelist search: full-text over question and answer, or a substring (agents.review)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        if "\x00" in term or len(term) > 500:  # PostgreSQL text cannot hold NUL: nothing can match
            return queryset.none(), False
        return search_runs(queryset, term), False

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        name_principals(request, changelist.result_list)
        return changelist

    @admin.display(description="asked by", ordering="principal")
    def asked_by(self, obj) -> str:
        name = getattr(obj, "principal_name", obj.principal)
        return format_html("{}<br><code>{}</code>", name, obj.principal) if name != obj.principal else obj.principal

    @admin.display(description="question")
    def short_question(self, obj) -> str:
        return obj.question[:90] + ("…" if len(obj.question) > 90 else "")

    @admin.display(description="citations (unverified)")
    def citations_col(self, obj) -> str:
        if obj.n_unverified:
            return format_html('{} (<strong style="color:#ba2121">{}</strong>)', obj.n_citations, obj.n_unverified)
        return str(obj.n_citations)

    @admin.display(description="feedback")
    def feedback_col(self, obj) -> str:
        parts = [f"▲ {obj.feedback_up}" if obj.feedback_up else "", f"▼ {obj.feedback_down}" if obj.feedback_down else ""]
        return " ".join(p for p in parts if p) or "—"

    @admin.display(description="tokens in/out")
    def tokens(self, obj) -> str:
        return f"{obj.input_tokens}/{obj.output_tokens}"

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, obj) -> str:
        """The run's latency; a run served from the answer cache links the run it reused below it."""
        if obj.cached_from_run_id is None:
            return f"{obj.latency_ms:.0f} ms"
        url = reverse("admin:agents_run_change", args=[obj.cached_from_run_id])
        return format_html('{} ms<br><a href="{}" title="served from the answer cache: the run it reused">cache: run {}</a>',
                           f"{obj.latency_ms:.0f}", url, obj.cached_from_run_id)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("export.csv", wrap(scoped_view(self.export_csv)), name="agents_run_export_csv"),
            path("export.jsonl", wrap(scoped_view(self.export_jsonl)), name="agents_run_export_jsonl"),
            path("verify-chain/", wrap(scoped_view(self.verify_chain_view)), name="agents_run_verify_chain"),
            path("ask/", wrap(self.playground_view), name="agents_run_playground"),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        query = request.GET.urlencode()
        extra = {"export_csv": reverse("admin:agents_run_export_csv") + (f"?{query}" if query else ""),
                 "export_jsonl": reverse("admin:agents_run_export_jsonl") + (f"?{query}" if query else ""),
                 "can_playground": admin_role(request) in {"superuser", "admin", "editor"}}
        response = super().changelist_view(request, {**(extra_context or {}), **extra})
        context = response.context_data if isinstance(response, TemplateResponse) else None
        if context is not None and context.get("cl") is not None:  # the answer cache over the runs the filters select
            context["cache_summary"] = cache_summary(context["cl"].queryset)
        return response

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, object_id)
        if run is None or not self.has_view_permission(request, run):
            # Django's own change_view answers a missing object with this helper; the stubs leave it out.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": f"Run {run.pk}", **trace_context(request, run)}
        return TemplateResponse(request, "admin/agents/run/detail.html", context)

    # --- export (the current changelist filters apply) -------------------------------------------------
    def _filtered(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:  # an unknown filter in the query string: 400, not a 500
            raise SuspiciousOperation("unknown filter parameter in the export query") from None
        return changelist.get_queryset(request).order_by("tenant_id", "seq")

    def export_csv(self, request):
        """The runs the current filters select, by tenant and chain order. `principal` stays the raw
        principal (`user:<id>`, `key:<public id>`: what the chain hashes); `principal_name`, the last
        column (added after the others, so their positions hold), names the user or key."""
        out = io.StringIO()
        writer = csv.writer(out)
        cols = ["id", "tenant_id", "seq", "created_at", "principal", "question", "strategy", "outcome", "grounded", "answer",
                "n_citations", "n_unverified", "input_tokens", "output_tokens", "tool_calls", "latency_ms", "hash",
                "conversation_id", "turn", "message", "feedback_up", "feedback_down"]
        writer.writerow([*cols, "feedback_comments", "principal_name"])
        runs = list(self._filtered(request)[:50_000])
        name_principals(request, runs)
        comments: dict[int, list[str]] = {}
        for run_id, rating, comment in scoped_queryset(request, Feedback).filter(run_id__in=[r.id for r in runs]).exclude(
                comment="").order_by("created_at").values_list("run_id", "rating", "comment"):
            comments.setdefault(run_id, []).append(f"{rating}: {comment}")
        for run in runs:
            writer.writerow([*(csv_cell(getattr(run, c)) for c in cols), csv_cell(" | ".join(comments.get(run.id, []))),
                             csv_cell(run.principal_name)])
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="runs.csv"'
        return response

    def export_jsonl(self, request):
        """The filtered runs, one JSON object each: every column, `principal_name` (as in the CSV), and
        the run's steps, citations and feedback."""
        lines = []
        runs = list(self._filtered(request)[:5000])
        name_principals(request, runs)
        ids = [r.id for r in runs]
        steps: dict[int, list] = {}
        cites: dict[int, list] = {}
        for s in scoped_queryset(request, RunStep).filter(run_id__in=ids).order_by("run_id", "ordinal").values():
            steps.setdefault(s["run_id"], []).append(s)
        for c in scoped_queryset(request, Citation).filter(run_id__in=ids).order_by("run_id", "ordinal").values():
            cites.setdefault(c["run_id"], []).append(c)
        feedback: dict[int, list] = {}
        for f in scoped_queryset(request, Feedback).filter(run_id__in=ids).order_by("run_id", "created_at").values(
                "run_id", "rating", "comment", "principal", "created_at"):
            feedback.setdefault(f["run_id"], []).append(f)
        for run in runs:
            row = {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields}
            row.update(principal_name=run.principal_name, steps=steps.get(run.id, []), citations=cites.get(run.id, []),
                       feedback=feedback.get(run.id, []))
            lines.append(json.dumps(row, default=str, ensure_ascii=False))
        response = HttpResponse("\n".join(lines) + ("\n" if lines else ""), content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="runs.jsonl"'
        return response

    def verify_chain_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        scope = admin_scope(request)
        tenant_ids = [scope.tenant_id] if scope else list(Tenant.objects.values_list("id", flat=True))
        for tenant_id in tenant_ids:
            report = verify_tenant_chain(tenant_id, using="default" if scope else "owner")
            if report.ok:
                messages.success(request, f"Tenant {tenant_id}: chain intact ({report.runs_checked} runs).")
            else:
                messages.error(request, f"Chain broken: {report.first_break}")
        return redirect("admin:agents_run_changelist")

    # --- playground ---------------------------------------------------------------------------------------
    def playground_view(self, request):
        if admin_role(request) not in {"superuser", "admin", "editor"}:
            raise PermissionDenied
        with scoped(request):
            form = PlaygroundForm(request.POST or None, choices=playground_choices(request), strategies=STRATEGIES)
            valid = request.method == "POST" and form.is_valid()
            scope = resolve_actor(request, form.cleaned_data["act_as"]) if valid else None
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Ask playground", "form": form,
                   "providers": provider_rows()}
        if valid:
            if scope is None:
                form.add_error("act_as", "not found")
            else:
                scope = dataclasses.replace(scope, principal=f"{scope.principal} via admin:user:{request.user.pk}"[:200])
                try:
                    run = ask(scope=scope, question=form.cleaned_data["question"], strategy=form.cleaned_data["strategy"])
                except InvalidQuestion as exc:
                    form.add_error("question", str(exc))
                except RetryLater as exc:  # the tenant's daily run budget is used up (or cannot be counted)
                    form.add_error(None, f"{exc}; retry in {exc.retry_after} s")
                else:
                    with scoped(request):
                        run = scoped_queryset(request, Run).get(pk=run.pk)
                        context.update(trace_context(request, run), acted_scope=scope.as_dict())
                        return TemplateResponse(request, "admin/agents/run/playground.html", context).render()
        return TemplateResponse(request, "admin/agents/run/playground.html", context)


def provider_rows() -> list[dict]:
    """Each configured answer provider's capabilities as /healthz reports them (cached probe results; a
    provider not yet probed is being probed in the background), for the playground's table."""
    report = provider_report()
    rows = []
    for name, found in report.items():
        if name == "default":
            continue
        rows.append({"name": name, "default": name == report["default"], **found,
                     "checked": datetime.fromtimestamp(found["checked_at"], tz=UTC) if found.get("checked_at") else None})
    return rows


class PlaygroundForm(forms.Form):
    act_as = forms.ChoiceField(label="Ask as", help_text="The question runs with this member's or key's scope.")
    strategy = forms.ChoiceField()
    question = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), max_length=4000)

    def __init__(self, *args, choices, strategies, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["act_as"]).choices = choices
        cast(forms.ChoiceField, self.fields["strategy"]).choices = [(s, s) for s in strategies]


def _actors(request):
    """Members and active keys the staff user may act as: those it may manage (tenants.access), every
    tenant's for a superuser."""
    scope = admin_scope(request)
    if scope is None:
        members = Membership.objects.using("owner")
        keys = ApiKey.objects.using("owner")
    else:  # only principals whose role the user could grant (tenants.access.ROLE_GRANTS)
        roles = sorted(ROLE_GRANTS.get(scope.role, ()))
        members, keys = visible_memberships(scope).filter(role__in=roles), visible_api_keys(scope).filter(role__in=roles)
    return (members.select_related("user", "tenant").order_by("tenant_id", "id"),
            keys.filter(revoked_at__isnull=True).select_related("tenant").order_by("tenant_id", "id"))


def playground_choices(request) -> list[tuple[str, str]]:
    """Who the playground may ask as, the signed-in user's own membership first (the default choice)."""
    members, keys = _actors(request)
    members = sorted(members, key=lambda m: m.user_id != request.user.pk)  # stable: the rest keep their order
    return ([(f"member:{m.pk}", f"member {m.user} ({m.role}) @ {m.tenant.slug}" + (" (you)" if m.user_id == request.user.pk else ""))
             for m in members]
            + [(f"key:{k.pk}", f"key {k.name} ({k.role}) @ {k.tenant.slug}") for k in keys])


def resolve_actor(request, value: str):
    """The scope of the member or key picked (only among those the user may act as); None otherwise."""
    kind, _, pk = value.partition(":")
    members, keys = _actors(request)
    obj = (members if kind == "member" else keys if kind == "key" else members.none()).filter(pk=pk if pk.isdigit() else 0).first()
    return obj.scope() if obj is not None else None


# Outcome is imported for templates that switch on it.
__all__ = ["RunAdmin", "Outcome"]
