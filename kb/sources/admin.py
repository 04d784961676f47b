"""Sources in the admin: add, edit, pause/resume and "sync now", with each source's last-sync summary,
its recent syncs and the items that failed. Imported by kb.admin. Credentials are a write-only field:
typed once, stored encrypted, never shown again."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from kb import access
from kb.models import Source, SourceItem, SourceSync
from kb.sources.services import check_source_config, check_source_secret, source_create, source_update
from kb.sources.sync import request_sync
from tenants.admin_base import TenantScopedAdmin, acting_scope, scoped_queryset
from tenants.scope import NotAllowed, Scope

EDITORS = frozenset({"admin", "editor"})


def sync_summary(sync: SourceSync | None) -> str:
    if sync is None:
        return "never synced"
    text = (f"{sync.status}: +{sync.added} ~{sync.changed} ↔{sync.moved} -{sync.removed} !{sync.failed}"
            f" ({sync.unchanged} unchanged)")
    if sync.seconds is not None:
        text += f" in {sync.seconds:.1f} s"
    return text


class SourceForm(forms.ModelForm):
    """The source's settings, checked by the same services the API calls (kb.sources.services)."""

    credentials = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False),
        help_text='JSON, e.g. {"access_key_id": "...", "secret_access_key": "..."} (s3) or {"authorization": "Bearer ..."} '
                  "(website). Stored encrypted and never shown again; leave empty to keep the stored ones. They are bound to the "
                  "address: changing the start URL's or endpoint's scheme, host or port (or the bucket) removes them unless "
                  "new ones are typed here.")
    clear_credentials = forms.BooleanField(required=False, help_text="Remove the stored credentials.")

    def clean_credentials(self):
        raw = self.cleaned_data.get("credentials") or ""
        if not raw.strip():
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            raise forms.ValidationError("not JSON (nothing of what you typed is shown back)") from None
        kind = self.data.get("kind") or self.instance.kind
        try:
            return check_source_secret(kind, value)
        except NotAllowed as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        kind = data.get("kind") or self.instance.kind
        tenant_id = self._tenant_id(data)
        if "config" in data and kind and tenant_id:
            try:
                data["config"] = check_source_config(kind, data["config"], tenant_id=tenant_id)
            except NotAllowed as exc:
                self.add_error("config", str(exc))
        return data

    def _tenant_id(self, data: dict[str, Any]) -> int | None:
        """The tenant whose grants the config must fit: the acting scope's, else (superusers) the
        source's or its chosen corpus's."""
        scope = getattr(self, "acting_scope", None)
        if scope is not None:
            return scope.tenant_id
        if self.instance.tenant_id:
            return self.instance.tenant_id
        corpus = data.get("corpus")
        return corpus.tenant_id if corpus is not None else None


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin):
    form = SourceForm
    fields = ["name", "corpus", "kind", "config", "credentials", "clear_credentials", "department_rules", "schedule_minutes",
              "paused", "has_credentials", "last_sync_summary", "next_sync_at", "created_by", "created_at"]
    list_display = ["name", "corpus", "kind", "schedule", "paused", "last_sync_summary", "next_sync_at"]
    list_filter = ["kind", "paused"]
    search_fields = ["name"]
    readonly_fields = ["has_credentials", "last_sync_summary", "next_sync_at", "created_by", "created_at"]
    view_roles = EDITORS
    actions = ["sync_now", "pause", "resume"]
    change_form_template = "admin/kb/source/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("corpus", "last_sync")

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
        secret = {} if data.get("clear_credentials") else data.get("credentials")
        try:
            if not change:
                created = source_create(scope=scope, corpus=obj.corpus, name=obj.name, kind=obj.kind, config=obj.config,
                                        credentials=secret, department_rules=obj.department_rules,
                                        schedule_minutes=obj.schedule_minutes, paused=obj.paused)
                obj.pk = created.pk
                return
            fields = {name: getattr(obj, name) for name in form.changed_data
                      if name in {"name", "config", "department_rules", "schedule_minutes", "paused"}}
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
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    @admin.display(description="schedule")
    def schedule(self, obj) -> str:
        return f"every {obj.schedule_minutes} min" if obj.schedule_minutes else "on demand"

    @admin.display(description="last sync")
    def last_sync_summary(self, obj) -> str:
        return sync_summary(obj.last_sync)

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
