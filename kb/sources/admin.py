"""Sources in the admin: add, edit, pause/resume and "sync now", with each source's last-sync summary,
its recent syncs and the items that failed. Imported by kb.admin. Credentials are a write-only field:
typed once, stored encrypted, never shown again."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from kb import access
from kb.models import Source, SourceItem, SourceSync
from kb.sources.forms import TEST_BUTTON, SourceForm, kind_setting_fields, rule_fields, rule_rows_for, source_form
from kb.sources.kinds import CONNECTORS, kind_fields
from kb.sources.models import SourceKind
from kb.sources.selectors import SYNC_LEGEND, SYNC_SIGNS, grantable_departments
from kb.sources.services import source_create, source_update
from kb.sources.sync import request_sync
from tenants.admin_base import TenantScopedAdmin, acting_scope, admin_scope, scoped_queryset
from tenants.models import Department
from tenants.scope import NotAllowed, Scope

EDITORS = frozenset({"admin", "editor"})


def sync_summary(sync: SourceSync | None) -> str:
    if sync is None:
        return "never synced"
    counts = " ".join(f"{sign}{getattr(sync, name)}" for sign, name, _ in SYNC_SIGNS)
    text = f"{sync.status}: {counts} ({sync.unchanged} unchanged)"
    if sync.seconds is not None:
        text += f" in {sync.seconds:.1f} s"
    return text


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin):
    form = SourceForm
    list_display = ["name", "corpus", "kind", "schedule", "paused", "last_sync_summary", "next_sync_at"]
    list_filter = ["kind", "paused"]
    search_fields = ["name"]
    readonly_fields = ["has_credentials", "last_sync_summary", "next_sync_at", "created_by", "created_at"]
    view_roles = EDITORS
    actions = ["sync_now", "pause", "resume"]
    change_form_template = "admin/kb/source/change_form.html"
    change_list_template = "admin/kb/source/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("corpus", "last_sync")

    def get_fieldsets(self, request, obj=None):
        """The kind's settings in a fieldset of their own (on the add page every kind's, the page's script
        shows the chosen one's), then the department rules, then what the syncs report."""
        kinds = [obj.kind] if obj is not None else list(CONNECTORS)
        settings = [(f"{SourceKind(kind).label} settings",
                     {"fields": kind_setting_fields(kind), "classes": ["source-kind", f"source-kind-{kind}"]}) for kind in kinds]
        takes_secret = obj is not None and any(f.secret for f in kind_fields(obj.kind))
        status = [*(["has_credentials"] if takes_secret else []), "last_sync_summary", "next_sync_at", "created_by",
                  "created_at"] if obj else []
        return [(None, {"fields": ["name", "corpus", "kind", "schedule_minutes", "paused"]}), *settings,
                *([("Stored credentials", {"fields": ["clear_credentials"]})] if takes_secret else []),
                ("Department rules", {"fields": rule_fields(rule_rows_for(obj)),
                                      "description": "Which department each item's document goes to, picked by name."}),
                *([("Syncs", {"fields": status})] if status else [])]

    def get_form(self, request, obj=None, change=False, **kwargs):
        scope = admin_scope(request)
        departments = (grantable_departments(scope) if scope is not None
                       else list(scoped_queryset(request, Department).select_related("tenant").order_by("tenant_id", "name")))
        kwargs["form"] = source_form(scope=scope, departments=departments, rule_rows=rule_rows_for(obj))
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        # The kind and corpus fix what the items are: a new source for another place or corpus.
        return [*self.readonly_fields, "kind", "corpus"] if obj is not None else self.readonly_fields

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "corpus":  # built here: ForeignKey.formfield would touch the raising default manager first
            return forms.ModelChoiceField(queryset=scoped_queryset(request, db_field.related_model), label="corpus")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        if obj.corpus_id is None:
            access.check_may_manage_corpora(scope)
            return
        access.check_may_manage_source(scope, obj.corpus, {r.get("department") for r in obj.department_rules or []
                                                           if isinstance(r, dict)})

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        scope = acting_scope(request, obj.corpus.tenant_id)
        data = form.cleaned_data
        secret = data.get("credentials")  # checked by the form: {} removes, None keeps the stored ones
        if form.connection_note:
            messages.info(request, form.connection_note)
        try:
            if not change:
                created = source_create(scope=scope, corpus=obj.corpus, name=obj.name, kind=obj.kind, config=data["config"],
                                        credentials=secret, department_rules=data["department_rules"],
                                        schedule_minutes=obj.schedule_minutes, paused=obj.paused, first_sync=True)
                obj.pk = created.pk
                if not created.paused:
                    messages.info(request, "The first sync is queued: its progress shows under Recent syncs.")
                return
            fields = {name: getattr(obj, name) for name in form.changed_data if name in {"name", "schedule_minutes", "paused"}}
            if data["config"] != obj.config:
                fields["config"] = data["config"]
            if data["department_rules"] != obj.department_rules:
                fields["department_rules"] = data["department_rules"]
            if secret is not None:
                fields["credentials"] = secret
            updated = source_update(scope=scope, source=obj, **fields)
            if obj.has_secret and not updated.has_secret and secret is None:
                messages.warning(request, "The stored credentials were removed: they are bound to the address they were "
                                          "given for, and the address changed. Type them again if they apply to the new one.")
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk:
            context["recent_syncs"] = list(scoped_queryset(request, SourceSync).filter(source_id=obj.pk).order_by("-id")[:10])
            context["failed_items"] = list(scoped_queryset(request, SourceItem).filter(source_id=obj.pk)
                                           .exclude(error="").order_by("key")[:50])
            context["summary"] = sync_summary
        context["sync_signs"], context["sync_legend"] = SYNC_SIGNS, SYNC_LEGEND
        context["test_button"] = TEST_BUTTON
        form = context["adminform"].form
        if getattr(form, "testing_only", False) and not form.errors:
            messages.success(request, f"{form.connection_note}. Nothing is saved yet: press Save to keep it.")
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    @admin.display(description="schedule")
    def schedule(self, obj) -> str:
        return f"every {obj.schedule_minutes} min" if obj.schedule_minutes else "on demand"

    @admin.display(description="last sync")
    def last_sync_summary(self, obj) -> str:
        return format_html('<span class="sync-summary" title="{}">{}</span>', SYNC_LEGEND, sync_summary(obj.last_sync))

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "sync_signs": SYNC_SIGNS, "sync_legend": SYNC_LEGEND})

    @admin.display(description="credentials stored", boolean=True)
    def has_credentials(self, obj) -> bool:
        return obj.has_secret

    @admin.action(description="Sync selected sources now", permissions=["change"])
    def sync_now(self, request, queryset):
        for source in queryset.select_related("corpus"):
            try:
                sync, created = request_sync(scope=acting_scope(request, source.tenant_id), source=source)
            except NotAllowed as exc:
                messages.error(request, f"{source.name}: {exc}")
                continue
            messages.success(request, format_html("{}: sync {} {}", source.name, sync.pk,
                                                  "queued" if created else "was already queued or running"))

    def _set_paused(self, request, queryset, paused: bool) -> None:
        for source in queryset.select_related("corpus"):
            try:
                source_update(scope=acting_scope(request, source.tenant_id), source=source, paused=paused)
            except NotAllowed as exc:
                messages.error(request, f"{source.name}: {exc}")

    @admin.action(description="Pause selected sources", permissions=["change"])
    def pause(self, request, queryset):
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume selected sources", permissions=["change"])
    def resume(self, request, queryset):
        self._set_paused(request, queryset, False)
