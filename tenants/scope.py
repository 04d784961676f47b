"""The scope: which tenant and departments a request may see. Built only from the authenticated
caller (api.auth, the admin, a task's stored ids), never from a request body, a tool argument or
model output. Everything that reads tenant data takes one.

Two walls enforce it: `TenantScopedManager` refuses to query without a scope, and PostgreSQL
row-level security (tenants.rls) hides other tenants' rows from the application role even if
the ORM is bypassed. `activate(scope)` sets the tenant for RLS with SET LOCAL, so it lasts only
for the surrounding transaction and is safe under connection pooling, together with the proof
that this process signed it (tenants.db_wall): SQL that sets a tenant without one sees nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.db import connections, models, transaction

from tenants.db_wall import tenant_statements


class ScopeRequired(RuntimeError):
    """A tenant-owned model was queried without a scope."""


ROLES = ("admin", "editor", "reader", "auditor")


class NotVisible(LookupError):
    """The row is not visible to the caller. Raised alike for a missing id and another tenant's (or
    department's), so nothing reveals what exists elsewhere. The API answers 404; the admin, "not found"."""


class NotAllowed(PermissionError):
    """The caller sees the row (or may act in the tenant) but may not do this. `field`, when set, names
    the input at fault (the API answers 400 on that field, the admin shows a form error); without one
    the API answers 403 and the admin refuses the request."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class WriteOutsideScope(NotAllowed):
    """A change to a row the caller may read but not change (see Scope.may_change_department)."""


@dataclass(frozen=True)
class Scope:
    """Tenant + visible departments + role + who is asking. Immutable once built."""

    tenant_id: int
    department_ids: frozenset[int] = field(default_factory=frozenset)
    all_departments: bool = False
    role: str = "reader"
    principal: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.tenant_id, int) or self.tenant_id <= 0:
            raise ValueError("scope needs a positive integer tenant id")
        if self.role not in ROLES and self.role != "system":
            raise ValueError(f"unknown role {self.role!r}")
        object.__setattr__(self, "department_ids", frozenset(int(d) for d in self.department_ids))

    @classmethod
    def system(cls, tenant_id: int, principal: str = "system") -> Scope:
        """Whole-tenant scope for workers acting on a tenant's own stored job (ingestion)."""
        return cls(tenant_id=tenant_id, all_departments=True, role="system", principal=principal)

    def sees_department(self, department_id: int | None) -> bool:
        return department_id is None or self.all_departments or department_id in self.department_ids

    def may_change_department(self, department_id: int | None) -> bool:
        """Writes are narrower than reads: a department-limited principal reads tenant-wide rows
        (no department) but creates, changes and deletes only rows of its own departments, so a
        Sales key cannot alter what Engineering reads."""
        return self.all_departments or (department_id is not None and department_id in self.department_ids)

    def check_may_change(self, department_id: int | None, what: str) -> None:
        """Raise WriteOutsideScope unless this scope may change a `what` of `department_id`."""
        if not self.may_change_department(department_id):
            raise WriteOutsideScope(f"a department-limited key or member cannot change a tenant-wide {what}"
                                    if department_id is None else f"this {what} belongs to another department")

    def narrowed(self, department_ids: Iterable[int] | None) -> Scope:
        """A scope that sees at most `department_ids`: narrowing never widens."""
        if department_ids is None:
            return self
        wanted = frozenset(int(d) for d in department_ids)
        visible = wanted if self.all_departments else wanted & self.department_ids
        return Scope(self.tenant_id, visible, False, self.role, self.principal)

    def as_dict(self) -> dict:
        return {
            "tenant_id": self.tenant_id,
            "department_ids": sorted(self.department_ids),
            "all_departments": self.all_departments,
            "role": self.role,
            "principal": self.principal,
        }


def _current_tenant(alias: str) -> int | None:
    """The tenant activated on `alias` (None for none, or for a value no activation of ours sets)."""
    with connections[alias].cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_id', true)")
        value = cur.fetchone()[0] or ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def _set_tenant(alias: str, tenant_id: int | None) -> None:
    with connections[alias].cursor() as cur:
        cur.execute(tenant_statements(tenant_id))


@contextlib.contextmanager
def activate(scope: Scope, using: str = "default") -> Iterator[Scope]:
    """Run the block in a transaction whose RLS tenant is `scope.tenant_id`.

    Nested use restores the outer tenant on exit (SET LOCAL would otherwise leak to the end of
    the outer transaction), with a fresh proof.
    """
    with transaction.atomic(using=using), acting_for(scope.tenant_id):
        previous = _current_tenant(using)
        _set_tenant(using, scope.tenant_id)
        try:
            yield scope
        finally:
            if connections[using].needs_rollback:
                # The savepoint rollback restores the setting by itself.
                pass
            else:
                _set_tenant(using, previous)


# The tenant this code acts for (set by `activate`), read by the tenant models' base manager and save()
# to add `tenant_id` to the queries Django makes by itself; None outside any activation.
_ACTING_TENANT: contextvars.ContextVar[int | None] = contextvars.ContextVar("acting_tenant", default=None)
# Why the block works across tenants (`across_tenants`); None outside one.
_ACROSS: contextvars.ContextVar[str | None] = contextvars.ContextVar("across_tenants", default=None)


@contextlib.contextmanager
def acting_for(tenant_id: int | None) -> Iterator[None]:
    """The block acts for `tenant_id` (`acting_tenant()`), without touching the database's RLS setting.
    `activate` uses it; call it alone only where the tenant is known and RLS is set by other means
    (a raw-SQL script that sends its own SET LOCAL)."""
    token = _ACTING_TENANT.set(tenant_id)
    try:
        yield
    finally:
        _ACTING_TENANT.reset(token)


def acting_tenant() -> int | None:
    """The tenant of the innermost `activate` / `acting_for` block (inside `across_tenants` too: a
    block that acts for one tenant there still names it); None outside one."""
    return _ACTING_TENANT.get()


@contextlib.contextmanager
def across_tenants(reason: str) -> Iterator[None]:
    """Mark a block that deliberately queries without a tenant: the operator's cross-tenant pages,
    sign-in look-ups before a tenant is known, maintenance commands. Its statements may name tenant
    tables without a `tenant_id` term (on a distributed database they go to every shard), so keep
    each use rare and say why in `reason`; the test-time query checker (tests/query_checker.py)
    refuses such statements anywhere else. Grants no access: RLS and the scoped managers still apply."""
    if not reason.strip():
        raise ValueError("across_tenants needs a reason")
    token = _ACROSS.set(reason)
    try:
        yield
    finally:
        _ACROSS.reset(token)


def crossing_tenants() -> str | None:
    """The reason of the innermost `across_tenants` block; None outside one."""
    return _ACROSS.get()


# Tenant whose rows Django's model validation may query (see `validating_tenant`); None outside it.
_VALIDATING_TENANT: contextvars.ContextVar[int | None] = contextvars.ContextVar("validating_tenant", default=None)


@contextlib.contextmanager
def validating_tenant(tenant_id: int | None) -> Iterator[None]:
    """Let Django's unique/constraint validation (`validate_unique`, `validate_constraints`), which
    queries through `Model._default_manager`, run against one tenant's rows.

    Inside the block a TenantScopedManager's plain queryset is `filter(tenant_id=tenant_id)` (all
    departments: uniqueness is per tenant, and the database would refuse a duplicate in another
    department anyway), with RLS activated for that tenant so superusers (no admin scope) see the
    same rows. Only for validation of an instance whose tenant is already fixed from the caller's
    scope; never wrap reads in it. A `None` tenant (not chosen yet) validates against no rows.
    """
    token = _VALIDATING_TENANT.set(tenant_id or 0)
    try:
        if tenant_id:
            with activate(Scope.system(int(tenant_id), principal="validation")):
                yield
        else:
            yield
    finally:
        _VALIDATING_TENANT.reset(token)


class TenantScopedQuerySet(models.QuerySet):
    def for_scope(self, scope: Scope) -> TenantScopedQuerySet:
        if not isinstance(scope, Scope):
            raise ScopeRequired(f"{self.model.__name__} needs a Scope, got {type(scope).__name__}")
        qs = self.filter(tenant_id=scope.tenant_id)
        if not scope.all_departments and _has_field(self.model, "department"):
            qs = qs.filter(models.Q(department_id__isnull=True) | models.Q(department_id__in=scope.department_ids))
        return qs


def _has_field(model: type[models.Model], name: str) -> bool:
    try:
        model._meta.get_field(name)
    except Exception:
        return False
    return True


# A module-level name, not an expression in the class statement, so the django-stubs plugin can type it.
_TenantScopedManagerBase = models.Manager.from_queryset(TenantScopedQuerySet)


class TenantScopedManager(_TenantScopedManagerBase):
    """Default manager of tenant-owned models: every read must say whose data it is.

    `Model.objects.for_scope(scope)` is the way in. `Model.objects.unscoped_dangerously()` is the
    deliberately named escape hatch for admin and maintenance code; grep for it in review.
    """

    def get_queryset(self) -> TenantScopedQuerySet:
        validating = _VALIDATING_TENANT.get()
        if validating is not None:  # inside `validating_tenant`: Django's unique/constraint checks
            return self._plain().filter(tenant_id=validating) if validating else self._plain().none()
        raise ScopeRequired(
            f"{self.model.__name__}.objects needs a scope: use .for_scope(scope) "
            "or .unscoped_dangerously() in maintenance code"
        )

    def _plain(self) -> TenantScopedQuerySet:
        return TenantScopedQuerySet(self.model, using=self._db)

    def for_scope(self, scope: Scope) -> TenantScopedQuerySet:
        return self._plain().for_scope(scope)

    def unscoped_dangerously(self, using: str | None = None) -> TenantScopedQuerySet:
        qs = self._plain()
        return qs.using(using) if using else qs

    # Writes carry their tenant id explicitly, and RLS's WITH CHECK verifies it.
    def create(self, **kwargs):
        return self._plain().create(**kwargs)

    def bulk_create(self, objs, *args, **kwargs):
        return self._plain().bulk_create(objs, *args, **kwargs)
