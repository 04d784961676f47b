"""Admin site for a tenant's own records: the tenant's settings, departments, members and API keys;
and Django's users and groups, for operators only.

Everything here goes through tenants.access (what the staff user sees, what it may grant) and
tenants.services (the writes), the same functions the API calls; tenants.admin_base runs every view
inside the user's tenant. Superusers act as operators across tenants through the owner connection.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.shortcuts import redirect
from django.urls import URLPattern, path
from django.utils.html import format_html

from tenants import access, admin_invitations, invitations, services, tenant_settings
from tenants.admin_base import (
    SESSION_TENANT,
    TenantScopedAdmin,
    acting_scope,
    admin_scope,
    admin_tenant_choices,
    chosen_tenant,
    scoped_view,
)
from tenants.models import ApiKey, Department, Membership, Tenant
from tenants.operator import OWNER
from tenants.scope import NotAllowed, NotVisible, Scope

# --- Tenant ------------------------------------------------------------------------------------------


class TenantSettingsForm(forms.ModelForm):
    """A tenant's name, slug and settings; the settings validated by their one schema
    (tenants.tenant_settings.parse): a bad value is a form error naming its key. Stored as typed."""

    class Meta:
        model = Tenant
        fields = ["name", "slug", "settings"]
        help_texts = {"settings": "A JSON object of: " + ", ".join(tenant_settings.TOP_KEYS) + " (all optional)."}

    def clean_settings(self):
        value = self.cleaned_data.get("settings")
        if not isinstance(value, dict):
            raise forms.ValidationError("must be a JSON object")
        try:
            tenant_settings.parse(value)
        except tenant_settings.TenantSettingsError as exc:
            raise forms.ValidationError(str(exc), code="invalid_setting") from None
        return value


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Superusers manage tenants; a tenant-wide admin edits its own tenant's settings (budgets,
    daily_runs); a department-limited admin only reads them (tenants.access.check_may_change_tenant_settings)."""

    form = TenantSettingsForm
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    view_roles = frozenset({"admin"})

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        access.check_may_change_tenant_settings(scope)

    def get_readonly_fields(self, request, obj=None):
        return [] if request.user.is_superuser else ["name", "slug"]

    def get_urls(self) -> list[URLPattern]:
        return [path("switch/<slug:slug>/", self.admin_site.admin_view(self.switch_view), name="tenants_tenant_switch"),
                *super().get_urls()]

    def switch_view(self, request, slug: str):
        """Staff with admin-site memberships in several tenants pick the one the admin acts in."""
        if any(c.slug == slug for c in admin_tenant_choices(request)):
            request.session[SESSION_TENANT] = slug
            messages.success(request, f"Now acting in tenant {slug}.")
        else:
            messages.error(request, "You have no admin-site membership in that tenant.")
        return redirect("admin:index")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        scope = admin_scope(request)
        if scope is None:
            return super().save_model(request, obj, form, change)
        try:
            services.update_tenant_settings(scope, form.cleaned_data["settings"])
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None


# --- Departments ---------------------------------------------------------------------------------------


@admin.register(Department)
class DepartmentAdmin(TenantScopedAdmin):
    """Departments reshape the whole tenant: tenant-wide admins create and rename them."""

    list_display = ["name", "tenant"]
    search_fields = ["name"]

    def has_add_permission(self, request) -> bool:
        scope = admin_scope(request)
        return super().has_add_permission(request) and (scope is None or access.may_change_tenant_settings(scope))

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        access.check_may_manage_departments(scope)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # corpora/documents/chunks PROTECT their department


# --- Members and keys -------------------------------------------------------------------------------------


class GrantForm(forms.ModelForm):
    """A key or membership form: departments of the row's tenant, and (for tenant admins) a grant no
    wider than the actor's own (tenants.access.check_grant, shown on the field at fault)."""

    acting_scope: Scope | None = None  # set by TenantScopedAdmin.get_form

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        tenant = data.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        departments = list(data.get("departments") or [])
        if tenant is not None and any(d.tenant_id != tenant.pk for d in departments):
            self.add_error("departments", "departments must belong to the same tenant")
        if self.acting_scope is not None and not self.errors:
            try:
                access.check_grant(self.acting_scope, role=data.get("role", ""), all_departments=bool(data.get("all_departments")),
                                   departments=departments)
            except NotAllowed as exc:
                self.add_error(exc.field if exc.field in self.fields else None, str(exc))
        return data


def person_name(user: Any, tenant_slug: str) -> str:
    """How a member is shown: their full name, else their sign-in name without the tenant's own suffix."""
    return user.get_full_name() or services.display_name(user, tenant_slug)


def person_label(user: Any, tenant_slug: str) -> str:
    """A person in a choice list: name and email (`Ada Lovelace <ada@example.com>`)."""
    name = person_name(user, tenant_slug)
    return f"{name} <{user.email}>" if user.email and user.email != name else name


def chosen_slug(request: HttpRequest) -> str:
    choice = chosen_tenant(request)
    return choice.slug if choice is not None else ""


def department_names_field(field: Any, request: HttpRequest) -> Any:
    """The departments of a grant form, listed by name (a superuser, who sees every tenant's, reads `tenant/name`)."""
    if field is not None and field.queryset.model is Department and not request.user.is_superuser:
        field.label_from_instance = lambda department: department.name
    return field


MembershipForm = forms.modelform_factory(Membership, form=GrantForm, fields=["user", "tenant", "role", "all_departments", "departments"])


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    """Members of the tenant; the user list holds the tenant's own users only (tenants.access.visible_users)."""

    form = MembershipForm
    list_display = ["person", "email", "status", "tenant", "role", "department_names"]
    list_display_links = ["person"]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email", "user__first_name", "user__last_name"]
    view_roles = frozenset({"admin"})
    actions = ["resend_invitation"]

    @admin.display(description="person", ordering="user__username")
    def person(self, obj) -> str:
        return person_name(obj.user, obj.tenant.slug)

    @admin.display(description="email", ordering="user__email")
    def email(self, obj) -> str:
        return obj.user.email or "—"

    @admin.display(description="status")
    def status(self, obj) -> str:
        return "can sign in" if invitations.can_sign_in(obj.user) else "invited (no password yet)"

    @admin.display(description="departments")
    def department_names(self, obj) -> str:
        return "all" if obj.all_departments else (", ".join(d.name for d in obj.departments.all()) or "—")

    def get_list_display(self, request):
        return [c for c in self.list_display if c != "tenant" or request.user.is_superuser]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("user", "tenant").prefetch_related("departments")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "user" and field is not None:
            slug = chosen_slug(request)
            field.label_from_instance = lambda user: person_label(user, slug)
        return field

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        return department_names_field(super().formfield_for_manytomany(db_field, request, **kwargs), request)

    def get_urls(self) -> list[URLPattern]:
        return [path("invite/", self.admin_site.admin_view(scoped_view(self.invite_view)), name="tenants_membership_invite"),
                *super().get_urls()]

    def invite_view(self, request):
        return admin_invitations.invite_view(self, request)

    @admin.action(description="Resend invitation (members without a password yet)")
    def resend_invitation(self, request, queryset):
        admin_invitations.resend_invitations(request, queryset, lambda tenant_id: acting_scope(request, tenant_id))

    def get_readonly_fields(self, request, obj=None):
        return ["user", "tenant"] if obj is not None else []  # a membership is not moved to another user

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        access.check_may_change_principal(scope, obj)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        scope = admin_scope(request)
        if scope is None:
            return super().save_model(request, obj, form, change)
        data = form.cleaned_data
        grant = services.MemberGrant(role=data["role"], all_departments=data["all_departments"], departments=list(data["departments"]))
        try:
            if change:
                services.change_member(scope, Membership.objects.get(pk=obj.pk), actor_user_id=request.user.pk,
                                       role=grant.role, all_departments=grant.all_departments, departments=grant.departments)
            else:
                member = services.add_member_user(scope, user=data["user"], grant=grant)
                obj.pk, obj._state.adding, obj._state.db = member.pk, False, "default"
        except (NotAllowed, NotVisible) as exc:
            raise PermissionDenied(str(exc)) from None

    def save_related(self, request, form, formsets, change):
        if admin_scope(request) is None:
            super().save_related(request, form, formsets, change)  # tenant admins' departments are set by the service

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        scope = admin_scope(request)
        if scope is None:
            return super().delete_model(request, obj)
        try:
            services.remove_member(scope, obj, actor_user_id=request.user.pk)
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


ApiKeyForm = forms.modelform_factory(ApiKey, form=GrantForm, fields=["tenant", "name", "role", "all_departments", "departments"])


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys are issued here (the raw key is shown once, in the confirmation message) and revoked,
    never edited: a changed role would silently change what an integration can do."""

    form = ApiKeyForm
    list_display = ["name", "tenant", "role", "prefix", "all_departments", "active", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "public_id"]
    actions = ["revoke"]
    view_roles = frozenset({"admin"})

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        return department_names_field(super().formfield_for_manytomany(db_field, request, **kwargs), request)

    @admin.display(description="key")
    def prefix(self, obj) -> str:
        return f"gk_{obj.public_id}_…"

    @admin.display(boolean=True)
    def active(self, obj) -> bool:
        return obj.is_active

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["tenant", "name", "role", "all_departments", "departments", "public_id", "created_at", "revoked_at", "last_used_at"]

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        access.check_may_change_principal(scope, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the key's id stays meaningful in run traces

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return
        data = form.cleaned_data
        scope = admin_scope(request)
        try:
            if scope is None:  # a superuser, for the tenant picked in the form (rows read and written as the owner)
                key, raw = ApiKey.issue(tenant=data["tenant"], name=data["name"], role=data["role"],
                                        all_departments=data["all_departments"], departments=list(data["departments"]),
                                        using="owner")
            else:
                key, raw = services.issue_key(scope, name=data["name"], role=data["role"], all_departments=data["all_departments"],
                                              departments=list(data["departments"]))
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        obj.pk, obj.public_id = key.pk, key.public_id
        obj._state.adding, obj._state.db = False, "default"
        messages.warning(request, format_html("New API key (shown once, copy it now): <code id='raw-key'>{}</code>", raw))

    def save_related(self, request, form, formsets, change):
        pass  # departments are set when the key is issued

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        scope = admin_scope(request)
        n = 0
        for key in queryset.filter(revoked_at__isnull=True):
            try:
                services.revoke_key(scope, key) if scope is not None else key.revoke()
            except NotAllowed as exc:
                messages.error(request, f"{key.name}: {exc}")
                continue
            n += 1
        messages.success(request, f"Revoked {n} key(s).")


# --- Django's users and groups: operators only ------------------------------------------------------------


class OperatorOnlyAdmin(admin.ModelAdmin):
    """Superusers (operators) only, reading and writing through the owner connection: the application
    role may neither write groups and privilege flags (tenants 0003) nor change the sign-in details of a
    user outside the current tenant (tenants 0006). Tenant staff see nothing here (403): they manage
    their tenant's users as members."""

    def _operator(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_module_permission(self, request) -> bool:
        return self._operator(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._operator(request)

    def has_add_permission(self, request) -> bool:
        return self._operator(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._operator(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._operator(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).using(OWNER)

    def formfield_for_manytomany(self, db_field, request=None, **kwargs):
        return super().formfield_for_manytomany(db_field, request, using=OWNER, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save(using=OWNER)  # related rows (groups) follow the instance's database

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        obj.delete(using=OWNER)


admin.site.unregister(get_user_model())
admin.site.unregister(Group)


@admin.register(get_user_model())
class OperatorUserAdmin(OperatorOnlyAdmin, UserAdmin):
    """Django's user admin (its password change included), for operators. The account one is signed
    in with cannot be deleted here (403): its admin log entry, written on the application connection,
    would reference a row the owner connection had just removed."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and not (obj is not None and obj.pk == request.user.pk)


@admin.register(Group)
class OperatorGroupAdmin(OperatorOnlyAdmin, GroupAdmin):
    """Django's group admin, for operators (tenant access comes from memberships, not groups)."""
