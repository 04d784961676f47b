"""Admin site for tenant administrators: each staff user sees only the tenant of their membership.

`TenantScopedAdmin` is the base of every admin on tenant data: querysets come from `for_scope`
(RLS-activated for the whole view, template rendering included); superusers see every tenant
through the named owner escape hatch. Permissions follow the membership role, not Django's
per-model permissions, so the admin and the API agree on who may do what.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest
from django.utils.html import format_html

from tenants.models import ApiKey, Department, Membership, Tenant
from tenants.scope import Scope, TenantScopedManager, activate, validating_tenant

ADMIN_SITE_ROLES = frozenset({"admin", "editor", "auditor"})


def admin_membership(request: HttpRequest) -> Membership | None:
    """The staff user's membership used by the admin (the one picked with ?tenant=<slug>, else the first)."""
    user = request.user
    if not getattr(user, "is_authenticated", False) or not user.is_staff:
        return None
    cached = getattr(request, "_admin_membership", False)
    if cached is not False:
        return cached
    qs = Membership.objects.filter(user=user, role__in=ADMIN_SITE_ROLES).select_related("tenant").order_by("id")
    wanted = request.session.get("admin_tenant") if hasattr(request, "session") else None
    membership = (qs.filter(tenant__slug=wanted).first() if wanted else None) or qs.first()
    request._admin_membership = membership
    return membership


def admin_scope(request: HttpRequest) -> Scope | None:
    """The scope the admin acts in; None for superusers (who use the owner alias) and non-members."""
    if request.user.is_superuser:
        return None
    membership = admin_membership(request)
    if membership is None:
        return None
    cached = getattr(request, "_admin_scope", None)
    if cached is None:
        cached = request._admin_scope = membership.scope()
    return cached


def admin_role(request: HttpRequest) -> str | None:
    if request.user.is_active and request.user.is_superuser:
        return "superuser"
    membership = admin_membership(request)
    return membership.role if membership else None


@contextlib.contextmanager
def scoped(request: HttpRequest) -> Iterator[Scope | None]:
    """Activate the admin user's tenant for RLS for the whole block (no-op for superusers)."""
    scope = admin_scope(request)
    if scope is None:
        yield None
        return
    with activate(scope):
        yield scope


def scoped_view(view):
    """Run an admin view, including its template rendering, inside `scoped(request)`."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        with scoped(request):
            response = view(request, *args, **kwargs)
            if hasattr(response, "render") and not getattr(response, "is_rendered", True):
                response.render()
            return response

    return wrapper


def is_tenant_scoped(model: type[models.Model]) -> bool:
    return isinstance(model._default_manager, TenantScopedManager)


def scoped_queryset(request: HttpRequest, model: type[models.Model]) -> models.QuerySet:
    """`model`'s rows the admin user may see."""
    if request.user.is_superuser:
        if is_tenant_scoped(model):
            return model.objects.unscoped_dangerously(using="owner")
        return model._default_manager.using("owner")
    scope = admin_scope(request)
    if scope is None:
        return (model.objects.unscoped_dangerously() if is_tenant_scoped(model) else model._default_manager).none()
    if is_tenant_scoped(model):
        return model.objects.for_scope(scope)
    if model is Tenant:
        return Tenant.objects.filter(pk=scope.tenant_id)
    if model is Department:
        qs = Department.objects.filter(tenant_id=scope.tenant_id)
        return qs if scope.all_departments else qs.filter(id__in=scope.department_ids)
    if model is ApiKey or model is Membership:
        # The same rule as the API: a department-restricted admin manages only keys/members within its departments.
        from api.access import visible_api_keys, visible_memberships

        return visible_api_keys(scope) if model is ApiKey else visible_memberships(scope)
    return model._default_manager.filter(tenant_id=scope.tenant_id)


def scoped_filter(field: str, model: type[models.Model], title: str, label=str) -> type[admin.SimpleListFilter]:
    """A list filter over a foreign key whose choices come from the user's scope (Django's own
    related filter would query the raising default manager)."""

    class Filter(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request, model_admin):
            return [(obj.pk, label(obj)) for obj in scoped_queryset(request, model).order_by("pk")[:200]]

        def queryset(self, request, queryset):
            value = self.value()
            if value and str(value).isdigit():
                return queryset.filter(**{f"{field}_id": int(value)})
            return queryset

    Filter.title = title
    return Filter


class LockoutAuthenticationForm(AdminAuthenticationForm):
    """The admin sign-in with the API's lockout (api.ratelimit): an address that failed
    AUTH_FAILURES_PER_IP times in the window is refused, right password or not, until it ends."""

    def clean(self):
        from api import ratelimit

        address = ratelimit.client_address(self.request)
        locked = ratelimit.auth_failures_exceeded(address)
        if locked is not None:
            raise forms.ValidationError(f"Too many failed sign-ins from this address: try again in {locked.retry_after} s.",
                                        code="locked")
        try:
            return super().clean()
        except forms.ValidationError:
            ratelimit.record_auth_failure(address)
            raise


admin.site.login_form = LockoutAuthenticationForm


class TenantScopedAdmin(admin.ModelAdmin):
    """Base for tenant-data admins. `view_roles` may look, `edit_roles` may add/change/delete."""

    view_roles: frozenset[str] = frozenset({"admin", "editor"})
    edit_roles: frozenset[str] = frozenset({"admin"})

    # --- who may do what ------------------------------------------------------------------------
    def _role_in(self, request, roles) -> bool:
        role = admin_role(request)
        return role == "superuser" or role in roles

    def has_module_permission(self, request) -> bool:
        return self._role_in(request, self.view_roles)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._role_in(request, self.view_roles | self.edit_roles)

    def has_add_permission(self, request) -> bool:
        return self._role_in(request, self.edit_roles)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._role_in(request, self.edit_roles) and self._may_change(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._role_in(request, self.edit_roles) and self._may_change(request, obj)

    def _may_change(self, request, obj) -> bool:
        """A department-limited admin changes only rows of its departments (Scope.may_change_department)."""
        scope = admin_scope(request)
        return obj is None or scope is None or not hasattr(obj, "department_id") or scope.may_change_department(obj.department_id)

    # --- what they see -----------------------------------------------------------------------------
    def get_queryset(self, request):
        qs = scoped_queryset(request, self.model)
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = db_field.related_model
        if related is Tenant or is_tenant_scoped(related) or related is Department:
            kwargs["queryset"] = scoped_queryset(request, related)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        related = db_field.related_model
        if related is Department or is_tenant_scoped(related):
            kwargs["queryset"] = scoped_queryset(request, related)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_exclude(self, request, obj=None):
        exclude = list(super().get_exclude(request, obj) or [])
        if not request.user.is_superuser and any(f.name == "tenant" for f in self.model._meta.fields):
            exclude.append("tenant")  # set from the scope in save_model
        return exclude

    def get_form(self, request, obj=None, change=False, **kwargs):
        """The model form, with Django's unique/constraint validation made tenant-aware.

        `tenant` is left out of the form for tenant admins (set from the scope), so Django would skip
        every (tenant, ...) unique check and a duplicate would reach the database as an IntegrityError
        (a 500). The form sets the tenant from the scope before validation and keeps `tenant` in the
        checks; the checks query through `_default_manager`, a TenantScopedManager that refuses
        unscoped queries, so they run inside `validating_tenant(<the row's tenant>)`.
        """
        form = super().get_form(request, obj, change=change, **kwargs)
        if not any(f.name == "tenant" for f in self.model._meta.fields):
            return form
        scope = admin_scope(request)

        class TenantValidatedForm(form):
            def _get_validation_exclusions(self):
                exclude = super()._get_validation_exclusions()
                if scope is not None:
                    exclude.discard("tenant")
                return exclude

            def _post_clean(self):
                if scope is not None:
                    self.instance.tenant_id = scope.tenant_id
                chosen = getattr(self, "cleaned_data", {}).get("tenant")  # a superuser's pick
                with validating_tenant(chosen.pk if chosen is not None else self.instance.tenant_id):
                    super()._post_clean()

        TenantValidatedForm.__name__ = form.__name__
        return TenantValidatedForm

    def save_model(self, request, obj, form, change):
        scope = admin_scope(request)
        if scope is not None and hasattr(obj, "tenant_id"):
            obj.tenant_id = scope.tenant_id
        if scope is not None and hasattr(obj, "department_id") and not scope.may_change_department(obj.department_id):
            raise PermissionDenied("a department-limited admin saves rows of its own departments only")
        if request.user.is_superuser and not change:
            obj.save(using="owner")
            return
        super().save_model(request, obj, form, change)

    # --- every view runs inside the user's tenant ---------------------------------------------------
    def get_urls(self):
        from django.urls import URLPattern

        urls = super().get_urls()
        for url in urls:
            if isinstance(url, URLPattern):
                url.callback = scoped_view(url.callback)
        return urls


# --- Tenant-level models ---------------------------------------------------------------------------------


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    """Superusers manage tenants; a tenant admin sees and edits only its own settings (budgets, daily_runs)."""

    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    view_roles = frozenset({"admin"})

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None):
        return [] if request.user.is_superuser else ["name", "slug"]

    def get_urls(self):
        from django.urls import path

        return [path("switch/<slug:slug>/", self.admin_site.admin_view(self.switch_view), name="tenants_tenant_switch"),
                *super().get_urls()]

    def switch_view(self, request, slug: str):
        """Staff with memberships in several tenants pick the one the admin acts in."""
        from django.shortcuts import redirect

        if Membership.objects.filter(user=request.user, tenant__slug=slug, role__in=ADMIN_SITE_ROLES).exists():
            request.session["admin_tenant"] = slug
            messages.success(request, f"Now acting in tenant {slug}.")
        else:
            messages.error(request, "You have no admin-site membership in that tenant.")
        return redirect("admin:index")


@admin.register(Department)
class DepartmentAdmin(TenantScopedAdmin):
    list_display = ["name", "tenant"]
    search_fields = ["name"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # corpora/documents/chunks PROTECT their department


class SameTenantDepartments:
    """Departments must belong to the row's tenant (a superuser's choices span tenants)."""

    def clean(self):
        data = super().clean()
        tenant = data.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        if tenant is not None and any(d.tenant_id != tenant.pk for d in data.get("departments") or []):
            self.add_error("departments", "departments must belong to the same tenant")
        return data


class MembershipForm(SameTenantDepartments, forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "tenant", "role", "all_departments", "departments"]


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ["user", "tenant", "role", "all_departments", "department_names"]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email"]
    autocomplete_fields: list[str] = []
    view_roles = frozenset({"admin"})

    @admin.display(description="departments")
    def department_names(self, obj) -> str:
        return ", ".join(d.name for d in obj.departments.all()) or ("all" if obj.all_departments else "—")

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user", "tenant").prefetch_related("departments")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            from django.contrib.auth import get_user_model

            users = get_user_model().objects.order_by("username")
            scope = admin_scope(request)
            if scope is not None:
                # Other tenants' users stay invisible: members of this tenant, or users without any membership.
                # A department-restricted admin sees only the members it may manage (api.access.visible_memberships).
                from api.access import visible_memberships

                members = visible_memberships(scope).values("user_id")
                users = users.filter(models.Q(pk__in=members) | models.Q(memberships__isnull=True)).distinct()
            kwargs["queryset"] = users
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class ApiKeyForm(SameTenantDepartments, forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "role", "all_departments", "departments"]


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

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: the key's id stays meaningful in run traces

    def save_model(self, request, obj, form, change):
        if change:
            return
        scope = admin_scope(request)
        tenant = form.cleaned_data.get("tenant") if scope is None else Tenant.objects.get(pk=scope.tenant_id)
        key, raw = ApiKey.issue(tenant=tenant, name=form.cleaned_data["name"], role=form.cleaned_data["role"],
                                all_departments=form.cleaned_data["all_departments"])
        obj.pk, obj.public_id = key.pk, key.public_id
        obj._state.adding, obj._state.db = False, "default"
        messages.warning(request, format_html("New API key (shown once, copy it now): <code id='raw-key'>{}</code>", raw))

    def save_related(self, request, form, formsets, change):
        if not change:
            ApiKey.objects.get(pk=form.instance.pk).departments.set(form.cleaned_data.get("departments") or [])

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        n = 0
        for key in queryset.filter(revoked_at__isnull=True):
            key.revoke()
            n += 1
        messages.success(request, f"Revoked {n} key(s).")
