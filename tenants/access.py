"""Who may see and do what with a tenant's own records: departments, members, API keys, users and
the tenant's settings. The one home of these rules; the API (api.views) and the admin site
(tenants.admin) both call them, for every read and every write.

- Reads are `visible_*(scope)` querysets and `access_*(scope, id)`, which raise `NotVisible` alike for
  a missing id and another tenant's (or an unseen department's). Run them inside `activate(scope)`,
  so PostgreSQL row-level security applies as well.
- Writes are checked by `check_*(scope, ...)`, which raise `NotAllowed` (with the input field at
  fault when there is one). The rule of every check: a caller can narrow, never widen. A grant never
  exceeds the granter: a role at most its own, departments a subset of its own, all departments
  only for an all-departments caller; tenant-wide settings and departments only by a tenant-wide admin.
- kb.access and agents.access hold the same for their models. Every model the admin shows has a
  visibility rule registered with `@visibility_rule(Model)`; `visible(scope, Model)` looks it up and
  refuses a model without one (fail closed), so a new model admin cannot fall back to "all rows".
  A row seen through its parent (a document through its corpus, a step through its run) registers
  its rule with `follows_parent(Model, "parent", parent_rule)`, the one shape of that rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar, cast

from django.contrib.auth import get_user_model
from django.db.models import Model, Q, QuerySet

from tenants.models import ApiKey, Department, Membership, Role, Tenant, TenantUser
from tenants.scope import ROLES, NotAllowed, NotVisible, Scope, TenantScopedManager
from tenants.tenant_models import is_tenant_model

# Roles a principal of each role may give to a key or member: never more than its own.
ROLE_GRANTS: dict[str, frozenset[str]] = {
    Role.ADMIN: frozenset(ROLES),
    Role.EDITOR: frozenset({Role.EDITOR, Role.READER}),
    Role.READER: frozenset({Role.READER}),
    Role.AUDITOR: frozenset({Role.AUDITOR}),
    "system": frozenset(ROLES),
}
# Roles that manage the tenant's principals (keys, members) at all.
MANAGERS = frozenset({Role.ADMIN, "system"})

_RULES: dict[type[Model], Callable[[Scope], QuerySet]] = {}
_M = TypeVar("_M", bound=Model)


def visibility_rule(model: type[Model]) -> Callable[[Callable[[Scope], QuerySet]], Callable[[Scope], QuerySet]]:
    """Register `fn(scope) -> QuerySet` as the rows of `model` a scope may see (one rule per model)."""

    def register(fn: Callable[[Scope], QuerySet]) -> Callable[[Scope], QuerySet]:
        if _RULES.get(model, fn) is not fn:
            raise RuntimeError(f"{model.__name__} already has a visibility rule")
        _RULES[model] = fn
        return fn

    return register


def follows_parent(model: type[Model], parent: str, parent_rule: Callable[[Scope], QuerySet]) -> Callable[[Scope], QuerySet]:
    """Register, and return, the rule of a row that is visible through its parent: the rows of `model`
    in the scope (`Model.objects.for_scope`, its own tenant and department columns) whose `parent`
    lookup ("corpus", "run", "sync__source", ...) is among `parent_rule(scope)`'s rows."""
    lookup = f"{parent}__in"

    def rule(scope: Scope) -> QuerySet:
        manager = cast(TenantScopedManager, model._default_manager)  # `objects`: a tenant model's one manager
        return manager.for_scope(scope).filter(**{lookup: parent_rule(scope)})

    rule.__qualname__ = rule.__name__ = f"visible_{model._meta.model_name}"
    rule.__doc__ = f"{model.__name__} rows visible through their {parent} ({parent_rule.__name__})."
    return visibility_rule(model)(rule)


def role_check(roles: frozenset[str], message: str) -> Callable[[Scope], None]:
    """A write check by role alone: `check(scope)` raises NotAllowed(message) unless the scope's role is
    one of `roles`."""

    def check(scope: Scope) -> None:
        if scope.role not in roles:
            raise NotAllowed(message)

    return check


def has_visibility_rule(model: type[Model]) -> bool:
    return model in _RULES


def visible(scope: Scope, model: type[Model]) -> QuerySet:
    """The rows of `model` that `scope` may see, by the model's registered rule."""
    if not isinstance(scope, Scope):
        raise TypeError(f"visible() needs a Scope, got {type(scope).__name__}")
    try:
        rule = _RULES[model]
    except KeyError:
        raise LookupError(f"{model.__name__} has no visibility rule: register one with @visibility_rule") from None
    return rule(scope)


def one(qs: QuerySet[_M], obj_id: object, what: str) -> _M:
    """The row `obj_id` of `qs`, or NotVisible (malformed ids included)."""
    pk = _int(obj_id)
    obj = qs.filter(pk=pk).first() if pk else None
    if obj is None:
        raise NotVisible(f"{what} not found")
    return obj


# --- reads -----------------------------------------------------------------------------------------

@visibility_rule(Tenant)
def visible_tenants(scope: Scope) -> QuerySet:
    return Tenant.objects.filter(pk=scope.tenant_id)


@visibility_rule(Department)
def visible_departments(scope: Scope) -> QuerySet:
    qs = Department.objects.filter(tenant_id=scope.tenant_id)
    return qs if scope.all_departments else qs.filter(id__in=sorted(scope.department_ids))


def _within_departments(qs: QuerySet, scope: Scope) -> QuerySet:
    """Principals (keys, memberships) a caller may see and manage: all of the tenant's for a whole-tenant
    caller; for a department-limited one only those whose departments are a subset of its own, never an
    all-departments one (managing it would reach departments the caller cannot see)."""
    qs = qs.filter(tenant_id=scope.tenant_id)
    if scope.all_departments:
        return qs
    through = qs.model.departments.through
    owner = f"{qs.model._meta.model_name}_id"
    links = through.objects.all()
    if is_tenant_model(through):  # a link table with its own tenant column: the term a distributed database routes by
        links = links.filter(tenant_id=scope.tenant_id)
    outside = links.exclude(department_id__in=sorted(scope.department_ids)).values(owner)
    return qs.filter(all_departments=False).exclude(pk__in=outside)


@visibility_rule(ApiKey)
def visible_api_keys(scope: Scope) -> QuerySet:
    return _within_departments(ApiKey.objects.all(), scope)


@visibility_rule(Membership)
def visible_memberships(scope: Scope) -> QuerySet:
    return _within_departments(Membership.objects.all(), scope)


@visibility_rule(TenantUser)
def visible_tenant_users(scope: Scope) -> QuerySet:
    """The tenant's own user accounts a caller may pick (to make a member): those whose home is this
    tenant, except users whose membership here the caller may not manage."""
    hidden = Membership.objects.filter(tenant_id=scope.tenant_id).exclude(pk__in=visible_memberships(scope)).values("user_id")
    return TenantUser.objects.filter(tenant_id=scope.tenant_id).exclude(user_id__in=hidden)


def visible_users(scope: Scope) -> QuerySet:
    """User accounts a caller may pick or see: the tenant's own users (visible_tenant_users) and the
    members it may manage (an operator may have made a member whose home is another tenant)."""
    members = visible_memberships(scope).values("user_id")
    homes = visible_tenant_users(scope).values("user_id")
    return get_user_model().objects.filter(Q(pk__in=members) | Q(pk__in=homes))


def access_department(scope: Scope, department_id: object) -> Department:
    return one(visible_departments(scope), department_id, "department")


def access_api_key(scope: Scope, key_id: object) -> ApiKey:
    return one(visible_api_keys(scope).select_related("tenant"), key_id, "API key")


def access_membership(scope: Scope, membership_id: object) -> Membership:
    return one(visible_memberships(scope).select_related("user", "tenant"), membership_id, "member")


def departments_in_scope(scope: Scope, department_ids: Iterable[object]) -> list[Department]:
    """The departments named, each visible to `scope`; NotAllowed on the `departments` field otherwise
    (the same message for a missing id and another tenant's)."""
    wanted = list(dict.fromkeys(department_ids))
    found = {d.pk: d for d in visible_departments(scope).filter(pk__in=[_int(i) for i in wanted])}
    missing = [i for i in wanted if _int(i) not in found]
    if missing:
        raise NotAllowed(f"department {missing[0]} not found", field="departments")
    return [found[_int(i)] for i in wanted]


def _int(value: object) -> int:
    """An id from outside as a positive bigint, 0 for anything else (malformed, out of range)."""
    try:
        n = int(str(value))
    except (TypeError, ValueError):
        return 0
    return n if 0 < n < 2**63 else 0


# --- writes ----------------------------------------------------------------------------------------

def check_may_manage_principals(scope: Scope) -> None:
    """Only admins (and the system) create, change or revoke keys and members."""
    if scope.role not in MANAGERS:
        raise NotAllowed("your role does not allow managing keys or members")


def check_grant(scope: Scope, *, role: str, all_departments: bool, departments: Iterable[Department | int]) -> None:
    """A key or membership with this role and these departments may be granted by `scope`: the role
    at most the granter's own, departments a subset of its own, all departments only for an
    all-departments granter. Raises NotAllowed naming the field at fault."""
    check_may_manage_principals(scope)
    if role not in ROLE_GRANTS.get(scope.role, frozenset()):
        raise NotAllowed(f"you may not grant the role {role!r}", field="role")
    if all_departments and not scope.all_departments:
        raise NotAllowed("you may not grant more departments than you see", field="all_departments")
    ids = {d.pk if isinstance(d, Department) else _int(d) for d in departments}
    if not scope.all_departments and not ids <= scope.department_ids:
        raise NotAllowed("you may not grant more departments than you see", field="departments")


def check_may_change_principal(scope: Scope, principal: ApiKey | Membership) -> None:
    """`principal` (already visible to `scope`) may be changed, revoked or removed by it: its current
    role must be one the caller could grant (a department admin cannot demote a tenant-wide one;
    visibility already keeps all-departments principals away from department-limited callers)."""
    check_grant(scope, role=principal.role, all_departments=principal.all_departments,
                departments=list(principal.departments.values_list("id", flat=True)))


def may_change_tenant_settings(scope: Scope) -> bool:
    return scope.all_departments and scope.role in MANAGERS


def check_may_change_tenant_settings(scope: Scope) -> None:
    """Tenant-wide settings (budgets, daily run limit) affect every department: tenant-wide admins only."""
    if not may_change_tenant_settings(scope):
        raise NotAllowed("only a tenant-wide admin may change the tenant's settings", field="settings")


def check_may_manage_departments(scope: Scope) -> None:
    """Creating or renaming departments reshapes the whole tenant: tenant-wide admins only."""
    if not may_change_tenant_settings(scope):
        raise NotAllowed("only a tenant-wide admin may create or rename departments")
