"""The corpus admin's file actions (kb.transfer): "Export to a corpus file" on one selected corpus, and
an "Import a corpus file" page. The rules are kb.access's, applied to the staff user's acting scope;
the selection comes from the admin's scoped queryset, so another tenant's corpus cannot be chosen."""

from __future__ import annotations

import tempfile
from typing import cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, HttpRequest
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.http import content_disposition_header

from kb.transfer import ExportRefused, FileRejected, export_corpus, import_corpus
from tenants.admin_base import acting_scope, admin_scope, scoped_queryset, scoped_view
from tenants.models import Department, Tenant
from tenants.scope import NotAllowed, Scope

SPOOL_BYTES = 32 * 1024 * 1024


class ImportForm(forms.Form):
    file = forms.FileField(help_text="A corpus file (.jsonl.gz) written by an export.")
    name = forms.CharField(required=False, max_length=200, help_text="Default: the exported corpus's name.")
    department = forms.ModelChoiceField(queryset=Department.objects.none(), required=False,
                                        help_text="Empty: the whole tenant.")
    reembed = forms.RegexField(regex=r"^[A-Za-z0-9._/-]{1,100}:[0-9]{1,5}$", required=False,
                               help_text="'<model>:<dim>' to embed the texts with instead of keeping the file's vectors "
                                         "(needed when the file's model is not this installation's).")
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), required=False,
                                    help_text="Superusers only: the tenant the corpus goes into.")


class CorpusFileActions:
    """Mixed into kb.admin.CorpusAdmin (a TenantScopedAdmin): the export action and the import page."""

    @admin.action(description="Export the selected corpus to a corpus file", permissions=["change"])
    def export_file(self, request, queryset):
        corpora = list(queryset[:2])
        if len(corpora) != 1:
            messages.error(request, "Select exactly one corpus to export.")
            return None
        corpus = corpora[0]
        scope = acting_scope(request, corpus.tenant_id)
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115  (FileResponse closes it)
        try:
            export_corpus(scope=scope, corpus=corpus, out=spool)
        except (ExportRefused, NotAllowed) as exc:
            spool.close()
            messages.error(request, f"{corpus.name}: {exc}")
            return None
        spool.seek(0)
        response = FileResponse(spool, content_type="application/gzip")
        response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=f"corpus-{corpus.pk}.jsonl.gz")
        return response

    def import_urls(self) -> list[URLPattern]:
        site = cast(admin.ModelAdmin, self).admin_site
        return [path("import/", site.admin_view(scoped_view(self.import_view)), name="kb_corpus_import")]

    def import_view(self, request: HttpRequest):
        if not cast(admin.ModelAdmin, self).has_add_permission(request):
            raise PermissionDenied("not allowed")
        form = ImportForm(request.POST or None, request.FILES or None)
        cast(forms.ModelChoiceField, form.fields["department"]).queryset = scoped_queryset(request, Department)
        own = admin_scope(request)
        if own is None:  # a superuser names the tenant; anyone else imports into their own
            cast(forms.ModelChoiceField, form.fields["tenant"]).queryset = Tenant.objects.order_by("name")
        else:
            del form.fields["tenant"]
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            department = data.get("department")
            chosen = data.get("tenant")
            tenant_id = own.tenant_id if own is not None else (chosen.pk if chosen else None)
            if tenant_id is None:
                form.add_error("tenant", "choose the tenant the corpus goes into")
            else:
                scope: Scope = acting_scope(request, tenant_id)
                try:
                    result = import_corpus(scope=scope, stream=data["file"].file, name=data["name"] or None,
                                           department_id=department.pk if department else None, reembed=data["reembed"] or None)
                except FileRejected as exc:
                    form.add_error(exc.field if exc.field in form.fields else "file", exc.message)
                except NotAllowed as exc:
                    form.add_error("department", str(exc))
                else:
                    messages.success(request, result.describe())
                    return redirect("admin:kb_corpus_changelist")
        context = {**cast(admin.ModelAdmin, self).admin_site.each_context(request), "form": form,
                   "opts": cast(admin.ModelAdmin, self).model._meta, "title": "Import a corpus file"}
        return TemplateResponse(request, "admin/kb/corpus/import.html", context)

