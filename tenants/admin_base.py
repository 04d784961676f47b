"""The admin site's side of access: which tenant a staff user acts in, and `TenantScopedAdmin`, the
base of every admin on tenant data.

The admin decides nothing about access itself. Reads come from the domain rules (`visible(scope,
Model)` of tenants.access, kb.access, agents.access), writes go through the same checks and services
the API calls, and every view runs inside `activate(scope)` so row-level security applies to it,
template rendering included. Superusers are operators: they read and write through the owner
connection, across tenants, on purpose.

A staff user with memberships in several tenants picks the tenant explicitly (the tenant switch);
until they do, the admin shows them nothing but the choice. Never "the first membership".
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminPasswordChangeForm
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import URLPattern

from tenants.access import visible, visible_users
from tenants.accounts import save_own_password
from tenants.principals import TenantChoice, tenants_of_user, user_scope
from tenants.scope import NotAllowed, Scope, TenantScopedManager, activate, validating_tenant

ADMIN_SITE_ROLES = frozenset({"admin", "editor", "auditor"})


@dataclass
class _RequestCache:
    """What one admin request has worked out about its tenant, computed once per request."""

    choices: list[TenantChoice] | None = None
    scope_known: bool = False
    scope: Scope | None = None


# Per request, dropped with the request (a typed cache instead of attributes set on HttpRequest).
_PER_REQUEST: weakref.WeakKeyDictionary[HttpRequest, _RequestCache] = weakref.WeakKeyDictionary()
SESSION_TENANT = "admin_tenant"


def admin_tenant_choices(request: HttpRequest) -> list[TenantChoice]:
    """The tenants in which the staff user may use the admin site."""
    user = request.user
    if not getattr(user, "is_authenticated", False) or not user.is_staff or not user.is_active:
        return []
    cache = _PER_REQUEST.setdefault(request, _RequestCache())
    if cache.choices is None:
        cache.choices = [c for c in tenants_of_user(user) if c.role in ADMIN_SITE_ROLES]
    return cache.choices


def chosen_tenant(request: HttpRequest) -> TenantChoice | None:
    """The tenant the admin acts in: the one picked with the tenant switch, or the only one there is."""
    choices = admin_tenant_choices(request)
    wanted = request.session.get(SESSION_TENANT) if hasattr(request, "session") else None
    picked = next((c for c in choices if c.slug == wanted), None)
    return picked or (choices[0] if len(choices) == 1 else None)


def admin_scope(request: HttpRequest) -> Scope | None:
    """The scope the admin acts in; None for superusers (who use the owner alias) and for staff who
    have no admin-site membership or have not picked one of several tenants."""
    if request.user.is_superuser:
        return None
    cache = _PER_REQUEST.setdefault(request, _RequestCache())
    if not cache.scope_known:
        choice = chosen_tenant(request)
        cache.scope = user_scope(request.user, choice.tenant_id) if choice else None
        cache.scope_known = True
    return cache.scope


def acting_scope(request: HttpRequest, tenant_id: int) -> Scope:
    """The scope an admin action on `tenant_id`'s rows runs in: the staff user's own (admin_scope), or for
    a superuser a whole-tenant system scope naming the user ("admin:user:<id>")."""
    return admin_scope(request) or Scope.system(tenant_id, principal=f"admin:user:{request.user.pk}")


def admin_role(request: HttpRequest) -> str | None:
    if request.user.is_active and request.user.is_superuser:
        return "superuser"
    scope = admin_scope(request)
    return scope.role if scope is not None else None


def needs_tenant_choice(request: HttpRequest) -> bool:
    return not request.user.is_superuser and chosen_tenant(request) is None and len(admin_tenant_choices(request)) > 1


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


class OwnPasswordChangeForm(AdminPasswordChangeForm):
    """The admin site's "change password" (the old password first), stored by save_own_password."""

    def save(self, commit: bool = True) -> Any:
        self.user.set_password(self.cleaned_data["new_password1"])
        if commit:
            save_own_password(self.user)
        return self.user


def is_tenant_scoped(model: type[models.Model]) -> bool:
    return isinstance(model._default_manager, TenantScopedManager)


def scoped_queryset(request: HttpRequest, model: type[models.Model]) -> models.QuerySet:
    """`model`'s rows the admin user may see: the domain's visibility rule for its scope; every row
    (owner connection) for a superuser; none without a scope."""
    user_model = get_user_model()
    manager = model._default_manager
    if request.user.is_superuser:
        if isinstance(manager, TenantScopedManager):
            return manager.unscoped_dangerously(using="owner")
        return manager.using("owner")
    scope = admin_scope(request)
    if scope is None:
        return (manager.unscoped_dangerously() if isinstance(manager, TenantScopedManager) else manager).none()
    if model is user_model:
        return visible_users(scope)
    return visible(scope, model)


def scoped_filter(field: str, model: type[models.Model], title: str, label=str) -> type[admin.SimpleListFilter]:
    """A list filter over a foreign key whose choices come from the user's scope (Django's own
    related filter would query the raising default manager)."""

    class Filter(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
            return [(obj.pk, label(obj)) for obj in scoped_queryset(request, model).order_by("pk")[:200]]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            value = self.value()
            if value and str(value).isdigit():
                return queryset.filter(**{f"{field}_id": int(value)})
            return queryset

    Filter.title = title
    return Filter


def links_fill_themselves(db_field: models.ManyToManyField) -> bool:
    """A many-to-many whose own through model (tenants.models.MembershipDepartment, ...) needs no value but
    its two ends: every other column has a default (Django's or the database's)."""
    through = db_field.remote_field.through
    if through is None or through._meta.auto_created:
        return False
    ends = {db_field.m2m_field_name(), db_field.m2m_reverse_field_name()}
    return all(
        field.primary_key or field.name in ends or field.has_default() or field.has_db_default()
        for field in through._meta.concrete_fields)


class TenantScopedAdmin(admin.ModelAdmin):
    """Base for tenant-data admins. `view_roles` may look, `edit_roles` may add/change/delete; rows come
    from the model's visibility rule; `may_change_object` is the per-row write check (by default the
    department rule, Scope.may_change_department)."""

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
        scope = admin_scope(request)
        if obj is None or scope is None:
            return True
        if obj.pk is not None:
            # Judge the row as stored: a bound form has already copied the submitted values onto `obj`,
            # and those are checked by the form itself (with errors shown on the fields at fault).
            obj = self.get_queryset(request).filter(pk=obj.pk).first() or obj
        try:
            self.may_change_object(scope, obj)
        except NotAllowed:
            return False
        return True

    def may_change_object(self, scope: Scope, obj: Any) -> None:
        """Raise NotAllowed unless `scope` may change or delete `obj` (a row it sees)."""
        if hasattr(obj, "department_id"):
            scope.check_may_change(obj.department_id, obj._meta.verbose_name)

    # --- what they see -----------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = scoped_queryset(request, self.model)
        ordering = self.get_ordering(request)
        return qs.order_by(*ordering) if ordering else qs

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = db_field.related_model
        if related is get_user_model() or is_tenant_scoped(related) or related._meta.app_label == "tenants":
            kwargs["queryset"] = scoped_queryset(request, related)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        related = db_field.related_model
        if is_tenant_scoped(related) or related._meta.app_label == "tenants":
            kwargs["queryset"] = scoped_queryset(request, related)
        if links_fill_themselves(db_field):
            # Django's admin shows no field for a many-to-many with a through model of its own; these fill their
            # other columns themselves (the link's tenant: a database default), so the form's `.set()` saves them.
            return db_field.formfield(**kwargs)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_exclude(self, request, obj=None):
        exclude = list(super().get_exclude(request, obj) or [])
        if not request.user.is_superuser and any(f.name == "tenant" for f in self.model._meta.fields):
            exclude.append("tenant")  # set from the scope in save_model
        return exclude

    def get_form(self, request, obj=None, change=False, **kwargs):
        """The model form, with Django's unique/constraint validation made tenant-aware and the acting
        scope available to the form's own checks (`form.acting_scope`, None for superusers).

        `tenant` is left out of the form for tenant admins (set from the scope), so Django would skip
        every (tenant, ...) unique check and a duplicate would reach the database as an IntegrityError
        (a 500). The form sets the tenant from the scope before validation and keeps `tenant` in the
        checks; the checks query through `_default_manager`, a TenantScopedManager that refuses
        unscoped queries, so they run inside `validating_tenant(<the row's tenant>)`.
        """
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = admin_scope(request)
        has_tenant = any(f.name == "tenant" for f in self.model._meta.fields)

        # mypy cannot check a class whose base is a run-time value (the form class ModelAdmin built).
        class ScopedForm(form):  # type: ignore[valid-type,misc]
            acting_scope = scope

            def _get_validation_exclusions(self):
                exclude = super()._get_validation_exclusions()
                if scope is not None and has_tenant:
                    exclude.discard("tenant")
                return exclude

            def _post_clean(self):
                if not has_tenant:
                    return super()._post_clean()
                if scope is not None:
                    self.instance.tenant_id = scope.tenant_id
                chosen = getattr(self, "cleaned_data", {}).get("tenant")  # a superuser's pick
                with validating_tenant(chosen.pk if chosen is not None else self.instance.tenant_id):
                    super()._post_clean()

        ScopedForm.__name__ = form.__name__
        return ScopedForm

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        scope = admin_scope(request)
        if scope is not None and hasattr(obj, "tenant_id"):
            obj.tenant_id = scope.tenant_id
        if scope is not None:
            try:
                self.may_change_object(scope, obj)
            except NotAllowed as exc:
                raise PermissionDenied(str(exc)) from None
        if request.user.is_superuser and not change:
            obj.save(using="owner")
            return
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        tenant_id = getattr(form.instance, "tenant_id", None)
        if request.user.is_superuser and tenant_id:
            # An operator writes through the owner connection with no tenant activated; links such as
            # tenants.models.MembershipDepartment take their tenant from the transaction's (a database default).
            with activate(acting_scope(request, tenant_id), using="owner"):
                super().save_related(request, form, formsets, change)
            return
        super().save_related(request, form, formsets, change)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._check_delete(request, [obj])
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._check_delete(request, list(queryset))
        super().delete_queryset(request, queryset)

    def _check_delete(self, request, objs) -> None:
        if not all(self.has_delete_permission(request, obj) for obj in objs):
            raise PermissionDenied("you may not delete some of these rows")

    # --- every view runs inside the user's tenant ---------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        for url in urls:
            if isinstance(url, URLPattern):
                url.callback = scoped_view(url.callback)
        return urls
