"""Corpus management in the admin: corpora, documents (upload, status, progress, re-ingest, delete),
a chunk browser with locators and a search preview, and ingestion jobs. All through the staff
user's tenant scope (tenants.admin.TenantScopedAdmin)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from kb import access
from kb.admin_corpus_files import CorpusFileActions
from kb.embedding import ModelChoiceError, checked_model_key
from kb.ingest import UploadRejected, delete_document, reingest_document, start_reembed, upload_document
from kb.ingest.corpora import DeclarationRejected, check_declarations, save_corpus
from kb.ingest.dates import document_date
from kb.metadata import MetadataRejected, parse_metadata, text_problem
from kb.models import DEFAULT_EMBEDDING_DIM, DEFAULT_EMBEDDING_MODEL, DEFAULT_LANGUAGE, Chunk, Corpus, Document, DocumentStatus, IngestJob
from kb.retrieval import MODES, SearchFilters, search, search_mode
from tenants.admin_base import TenantScopedAdmin, acting_scope, admin_scope, scoped_filter, scoped_queryset, scoped_view
from tenants.conf import product_settings
from tenants.models import Department
from tenants.scope import NotAllowed, Scope

EDITORS = frozenset({"admin", "editor"})


def plain_value(value: object) -> str:
    """A search detail for a table cell, in words rather than a Python repr: lists joined by commas,
    mappings as "key: value" pairs, None as "none"."""
    if value is None:
        return "none"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {plain_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(plain_value(v) for v in value) or "none"
    return str(value)


def progress_bar(job: IngestJob | None) -> str:
    if job is None:
        return "—"
    pct = 100 if job.status == "done" else (int(100 * job.chunks_done / job.chunks_total) if job.chunks_total else 0)
    # "done", not "100% done done"; a running job names its stage and counts ("embed 23/92").
    if job.status == "done":
        label = "done"
    elif job.status == "running" and job.chunks_total:
        label = f"{job.stage or 'running'} {job.chunks_done}/{job.chunks_total}"
    else:
        label = job.stage if job.stage and job.stage != job.status else job.status
    return format_html('<progress max="100" value="{}" aria-label="{}% done"></progress> <small>{}</small>', pct, pct, label)


class CorpusForm(forms.ModelForm):
    """The corpus's declarations checked as the API checks them (kb.ingest.corpora)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "language" in self.fields:  # left out: unchanged (a new corpus: the default)
            self.fields["language"].required = False

    def _declared(self, name: str):
        value = self.cleaned_data.get(name)
        if value is None and name == "facet_keys":  # an empty box: none declared
            value = []
        if not value and name == "language":
            value = self.instance.language or DEFAULT_LANGUAGE
        try:
            return check_declarations(**{name: value if value is not None else ""})[name]
        except DeclarationRejected as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_date_key(self):
        return self._declared("date_key")

    def clean_facet_keys(self):
        return self._declared("facet_keys")

    def clean_language(self):
        return self._declared("language")


@admin.register(Corpus)
class CorpusAdmin(CorpusFileActions, TenantScopedAdmin):
    form = CorpusForm
    list_display = ["name", "department", "embedding_model", "language", "document_count", "chunk_count", "created_at"]
    search_fields = ["name", "description"]
    list_filter = [scoped_filter("department", Department, "department")]
    readonly_fields = ["embedding_model", "embedding_dim", "next_embedding_model", "next_embedding_dim", "chunk_count", "created_at"]
    view_roles = EDITORS

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(n_documents=Count("documents"))

    def get_readonly_fields(self, request, obj=None):
        # Documents and chunks copy the corpus's department; moving the corpus would strand them.
        return [*self.readonly_fields, "department"] if obj is not None else self.readonly_fields

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        if obj.pk is None:
            access.check_may_create_corpus(scope, obj.department_id)
        else:
            access.check_may_change(scope, obj, "corpus")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            return super().save_model(request, obj, form, change)
        try:  # a changed date key or language is applied to the corpus's documents and chunks
            save_corpus(scope=acting_scope(request, obj.tenant_id), corpus=obj, changed=form.changed_data)
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None

    @admin.display(description="documents", ordering="n_documents")
    def document_count(self, obj) -> int:
        return obj.n_documents

    actions = ["reembed", "export_file"]  # export_file and the import page: kb.admin_corpus_files

    def get_urls(self) -> list[URLPattern]:
        return [*self.import_urls(), *super().get_urls()]

    @admin.action(description="Re-embed selected corpora into another model", permissions=["change"])
    def reembed(self, request, queryset):
        """Ask for the model (an intermediate page), then queue one re-embed job per corpus."""
        form = ReembedForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            try:
                key = checked_model_key(form.cleaned_data["embedding_model"], form.cleaned_data["embedding_dim"])
            except ModelChoiceError as exc:
                form.add_error(exc.field, str(exc))
            else:
                for corpus in queryset:
                    try:
                        job = start_reembed(scope=acting_scope(request, corpus.tenant_id), corpus=corpus, model_key=key)
                    except NotAllowed as exc:
                        messages.error(request, f"{corpus.name}: {exc}")
                        continue
                    messages.success(request, f"{corpus.name}: " + (f"re-embedding into {key} (job {job.pk})" if job
                                                                      else f"already uses {key}"))
                return None
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": "Re-embed corpora",
                   "form": form, "corpora": list(queryset)}
        return TemplateResponse(request, "admin/kb/corpus/reembed.html", context)


class ReembedForm(forms.Form):
    embedding_model = forms.CharField(max_length=100, initial=DEFAULT_EMBEDDING_MODEL,
                                      help_text="minilm-l6-v2 (local, 384), multilingual-e5-small-q4 (local, 384, questions in "
                                                "any language), gemini-embedding-001 or gemini-embedding-2 (needs GEMINI_API_KEY)")
    embedding_dim = forms.IntegerField(min_value=1, initial=DEFAULT_EMBEDDING_DIM)


class MultiFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultiFileField(forms.FileField):
    """Several files in one input; cleans to a list."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultiFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        items = data if isinstance(data, list | tuple) else [data]
        return [super(MultiFileField, self).clean(d, initial) for d in items]


class UploadForm(forms.Form):
    corpus = forms.ModelChoiceField(queryset=Corpus.objects.unscoped_dangerously().none())
    # The stubs see BaseForm.files (the bound upload dict); Django's form metaclass takes declared fields out of the class.
    files = MultiFileField(help_text=f"Up to {product_settings.MAX_FILES_PER_UPLOAD} files (txt, md, html, pdf, docx).")  # type: ignore[assignment]
    title = forms.CharField(required=False, max_length=500, help_text="Optional, single file only.")
    metadata = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                               help_text='JSON object, e.g. {"category": "travel", "effective_date": "2025-01-01"}; '
                                         "the corpus's date key gives each document its date")

    def clean_metadata(self):
        try:
            return parse_metadata(self.cleaned_data["metadata"]) or None
        except MetadataRejected as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin):
    list_display = ["title", "source_name", "corpus", "status", "progress", "failure", "version", "chunk_count", "size_bytes",
                    "updated_at"]
    list_filter = ["status", scoped_filter("corpus", Corpus, "corpus")]
    search_fields = ["title", "source_name"]
    readonly_fields = ["corpus", "department", "source_name", "mime_type", "sha256", "size_bytes", "status", "error", "version",
                       "dated_at", "chunk_count", "created_at", "updated_at", "progress", "chunks_link"]
    fields = ["title", "metadata", *readonly_fields]
    actions = ["reingest", "delete_documents"]
    view_roles = EDITORS
    edit_roles = EDITORS

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # deletion goes through the ingest service
        return actions

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # The latest job's progress, as a correlated subquery on rows the outer (scoped) query already chose.
        latest = (IngestJob.objects.unscoped_dangerously()
                  .filter(document=OuterRef("pk"), tenant_id=OuterRef("tenant_id")).order_by("-id"))
        return super().get_queryset(request).annotate(
            job_status=Subquery(latest.values("status")[:1]), job_stage=Subquery(latest.values("stage")[:1]),
            job_done=Subquery(latest.values("chunks_done")[:1]), job_total=Subquery(latest.values("chunks_total")[:1]))

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        access.check_may_change(scope, obj, "document")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if "metadata" in form.changed_data:
            obj.dated_at = document_date(obj.metadata, Corpus.objects.for_scope(acting_scope(request, obj.tenant_id))
                                         .values_list("date_key", flat=True).get(pk=obj.corpus_id))
        super().save_model(request, obj, form, change)

    @admin.display(description="progress")
    def progress(self, obj) -> str:
        if getattr(obj, "job_status", None) is None:
            return "—"
        return progress_bar(IngestJob(status=obj.job_status, stage=obj.job_stage or "", chunks_done=obj.job_done or 0,
                                      chunks_total=obj.job_total or 0))

    @admin.display(description="why it failed")
    def failure(self, obj) -> str:
        return (obj.error[:200] + ("…" if len(obj.error) > 200 else "")) if obj.status == "failed" and obj.error else ""

    @admin.display(description="chunks")
    def chunks_link(self, obj) -> str:
        url = reverse("admin:kb_chunk_changelist") + f"?document={obj.id}"
        return format_html('<a href="{}">browse {} chunks</a>', url, obj.chunk_count)

    def add_view(self, request, form_url="", extra_context=None):
        return redirect("admin:kb_document_upload")

    def changelist_view(self, request, extra_context=None):
        """While a listed document is pending or processing, the page reloads itself (every 2 s) so
        its progress bar moves as the worker commits each embedding batch."""
        response = super().changelist_view(request, extra_context)
        context = response.context_data if isinstance(response, TemplateResponse) else None  # not on a redirect
        cl = context.get("cl") if context else None
        if context is not None and cl is not None:
            context["ingesting"] = any(
                d.status in (DocumentStatus.PENDING, DocumentStatus.PROCESSING) for d in cl.result_list)
        return response

    def get_urls(self) -> list[URLPattern]:
        return [path("upload/", self.admin_site.admin_view(scoped_view(self.upload_view)), name="kb_document_upload"),
                *super().get_urls()]

    def upload_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied("not allowed")
        form = UploadForm(request.POST or None, request.FILES or None)
        cast(forms.ModelChoiceField, form.fields["corpus"]).queryset = scoped_queryset(request, Corpus)
        if request.method == "POST" and form.is_valid():
            files = form.cleaned_data["files"]
            corpus = form.cleaned_data["corpus"]
            scope = acting_scope(request, corpus.tenant_id)
            if len(files) > product_settings.MAX_FILES_PER_UPLOAD:
                form.add_error("files", f"at most {product_settings.MAX_FILES_PER_UPLOAD} files")
            elif form.cleaned_data["title"] and len(files) > 1:
                form.add_error("title", "only with a single file")
            else:
                done, jobs = [], []
                for f in files:
                    try:
                        doc, job = upload_document(scope=scope, corpus=corpus, filename=f.name, data=f.read(),
                                                   metadata=form.cleaned_data["metadata"], title=form.cleaned_data["title"] or None)
                        done.append(doc.title)
                        jobs += [str(job.pk)] if job else []
                    except UploadRejected as exc:
                        messages.error(request, f"{f.name}: {exc.message}")
                if done:
                    messages.success(request, f"Uploaded {len(done)} document(s): {', '.join(done)}. " + (
                        f"Ingestion jobs {', '.join(jobs)} are queued; this list follows their progress." if jobs
                        else "Unchanged: nothing to ingest."))
                    return redirect("admin:kb_document_changelist")
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form, "title": "Upload documents"}
        return TemplateResponse(request, "admin/kb/document/upload.html", context)

    @staticmethod
    def _for_each_document(request, queryset, service) -> int:
        """`service(scope=, document=)` on each selected document under the acting scope; a refused one is
        reported by title and skipped. Returns how many went through."""
        n = 0
        for doc in queryset:
            try:
                service(scope=acting_scope(request, doc.tenant_id), document=doc)
            except NotAllowed as exc:
                messages.error(request, f"{doc.title}: {exc}")
                continue
            n += 1
        return n

    @admin.action(description="Re-ingest selected documents")
    def reingest(self, request, queryset):
        n = self._for_each_document(request, queryset, reingest_document)
        messages.success(request, f"Queued re-ingestion of {n} document(s).")

    @admin.action(description="Delete selected documents (and their chunks)")
    def delete_documents(self, request, queryset):
        n = self._for_each_document(request, queryset, delete_document)
        messages.success(request, f"Deleted {n} document(s).")


@admin.register(Chunk)
class ChunkAdmin(TenantScopedAdmin):
    """Read-only chunk browser; the search preview runs the real retrieval with the user's scope."""

    list_display = ["__str__", "document", "ordinal", "locator", "page", "preview", "token_count", "flags"]
    list_filter = [scoped_filter("corpus", Corpus, "corpus"), scoped_filter("document", Document, "document")]
    search_fields = ["text", "locator"]
    list_select_related = ["document"]
    view_roles = EDITORS
    edit_roles = frozenset()
    exclude = ["embedding", "search_vector"]

    @admin.display(description="text")
    def preview(self, obj) -> str:
        # Wrapped in its column (change_list.html); a long chunk ends at a word, its whole text on its own page.
        return obj.text if len(obj.text) <= 320 else obj.text[:320].rsplit(" ", 1)[0] + " …"

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name not in {"embedding", "search_vector"}]

    def get_urls(self) -> list[URLPattern]:
        return [path("search/", self.admin_site.admin_view(scoped_view(self.search_view)), name="kb_chunk_search"),
                *super().get_urls()]

    def search_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied("not allowed")
        query = request.GET.get("q", "").strip()
        error = text_problem(query) or ""
        if error:
            query, error = "", f"The query {error}."
        mode = search_mode(request.GET["mode"]) if request.GET.get("mode") in MODES else "hybrid"
        corpora = list(scoped_queryset(request, Corpus).order_by("name"))
        corpus_id = request.GET.get("corpus", "")
        result = None
        if query:
            corpus = next((c for c in corpora if str(c.pk) == corpus_id), None)
            scope = admin_scope(request)
            tenant_id = corpus.tenant_id if corpus else (scope.tenant_id if scope else None)
            if tenant_id is None:
                error = "Superusers: pick a corpus (search runs in one tenant)."
            else:
                filters = SearchFilters(corpus_ids=(corpus.pk,) if corpus else None)
                result = search(acting_scope(request, tenant_id), query, k=10, mode=mode, filters=filters)
        details = [("path", result.path)] if result is not None else []
        if result is not None:
            details += [(f"filter: {k}", plain_value(v)) for k, v in result.applied_filter.items()]
            details += [(f"time: {k}", f"{v} ms") for k, v in result.timings_ms.items()]
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": "Search preview", "query": query,
                   "mode": mode, "corpora": corpora, "corpus_id": corpus_id, "result": result, "error": error,
                   "details": details}
        return TemplateResponse(request, "admin/kb/chunk/search.html", context)


@admin.register(IngestJob)
class IngestJobAdmin(TenantScopedAdmin):
    list_display = ["id", "kind", "document", "corpus", "status", "stage", "progress", "attempts", "created_at", "finished_at"]
    list_filter = ["status", "kind", scoped_filter("corpus", Corpus, "corpus")]
    view_roles = EDITORS
    edit_roles = frozenset()

    @admin.display(description="progress")
    def progress(self, obj) -> str:
        return progress_bar(obj)

    def get_readonly_fields(self, request, obj=None):
        # Every field, lifecycle last as before the BackgroundJob base (whose fields Django lists first).
        lifecycle = ("error", "attempts", "created_at", "started_at", "heartbeat_at", "finished_at")
        names = [f.name for f in self.model._meta.fields]
        return [n for n in names if n not in lifecycle] + [n for n in lifecycle if n in names]


from kb.sources import admin as _sources_admin  # noqa: E402,F401  (registers SourceAdmin)
