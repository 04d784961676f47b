"""Tenants and who may act for them: memberships (people) and API keys (programs)."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import connections, models
from django.utils import timezone

from tenants.scope import Scope, ScopeRequired, activate
from tenants.tenant_models import TenantAwareManager, TenantModel


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    EDITOR = "editor", "Editor"
    READER = "reader", "Reader"
    AUDITOR = "auditor", "Auditor"


def default_budgets() -> dict:
    return {}


class Tenant(models.Model):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    # Per-tenant agent settings: budgets (max_tool_calls, max_iterations, ...), strict citations,
    # daily run limit. Missing keys fall back to the defaults in agents.budgets.
    settings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Department(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="departments")
    name = models.CharField(max_length=200)

    objects = TenantAwareManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="uniq_department_name")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class TenantUser(TenantModel):
    """The tenant a user account belongs to (its home). Users created by a tenant's admins (API or
    admin site) belong to that tenant; a tenant's admins find and attach only their own tenant's users.
    Cross-tenant memberships (a consultant in two tenants) are made by operators through the owner
    connection, never by a tenant admin."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="home")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="users")

    objects = TenantAwareManager()

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant.slug}"


class Membership(TenantModel):
    """A user's role in a tenant. `all_departments` or an explicit department list."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.READER)
    all_departments = models.BooleanField(default=False)
    departments = models.ManyToManyField(Department, blank=True, through="MembershipDepartment")

    objects = TenantAwareManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="uniq_membership")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant.slug} ({self.role})"

    def scope(self) -> Scope:
        return principal_scope(self, f"user:{self.user_id}")


KEY_PREFIX = "gk_"


def hash_secret(secret: str) -> str:
    """Keys are 256-bit random secrets, so one SHA-256 is enough (no password stretching)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKey(TenantModel):
    """A program's credential. Only the hash of the secret is stored; the raw key is shown once.

    Raw form: gk_<public id>_<secret>. The public id finds the row; the secret is compared
    in constant time against its hash (tenants.principals.authenticate_key).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200)
    # Unique per tenant (a key is found by it before its tenant is known: indexed on its own too).
    public_id = models.CharField(max_length=16, db_index=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.READER)
    all_departments = models.BooleanField(default=False)
    departments = models.ManyToManyField(Department, blank=True, through="ApiKeyDepartment")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = TenantAwareManager()

    class Meta:
        verbose_name = "API key"
        constraints = [models.UniqueConstraint(fields=["tenant", "public_id"], name="uniq_apikey_public_id")]

    def __str__(self) -> str:
        return f"{self.name} ({KEY_PREFIX}{self.public_id}_…)"

    @classmethod
    def issue(cls, *, tenant: Tenant, name: str, role: str = Role.READER, all_departments: bool = False,
              departments: list[Department] | None = None, using: str = "default") -> tuple[ApiKey, str]:
        """Create a key of `tenant` and return it with its raw value, which is never retrievable again.

        Activates `tenant` itself (RLS), so callers need not; `tenant` must come from the caller's own
        scope (never from request data). Inside another tenant's activation it refuses (ScopeRequired)
        rather than write across. `departments` must be `tenant`'s: RLS refuses a link to another
        tenant's department. Operators pass `using="owner"` (tenants.operator).
        """
        active = _active_tenant(using)
        if active and active != str(tenant.pk):
            raise ScopeRequired(f"ApiKey.issue for tenant {tenant.pk} inside tenant {active}'s activation")
        public_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        with activate(Scope.system(tenant.pk, principal="issue_key"), using=using):
            key = cls.objects.db_manager(using).create(
                tenant=tenant, name=name, public_id=public_id, secret_hash=hash_secret(secret), role=role,
                all_departments=all_departments)
            if departments:
                key.departments.set(departments)
        return key, f"{KEY_PREFIX}{public_id}_{secret}"

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def scope(self) -> Scope:
        return principal_scope(self, f"key:{self.public_id}")


def current_tenant_default() -> models.Func:
    """A column's database default: the transaction's proven tenant (`grounded_tenant()`, tenants.rls), so
    Django's many-to-many writes (`.set()`, `.add()`, the admin's widgets) fill a link's tenant by themselves.
    NULL, hence refused (NOT NULL), with no tenant activated."""
    return models.Func(function="grounded_tenant", output_field=models.BigIntegerField())


class MembershipDepartment(TenantModel):
    """A member's department (the table Django made for the many-to-many, with its tenant added).

    Foreign keys between tenant tables are `db_constraint=False` here and in every app: the database holds
    them as (tenant_id, x_id) -> (tenant_id, id) (tenants.tenant_keys; tenants 0008). A link's keys are
    checked at each statement, so a link to another tenant's department fails when written."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_default=current_tenant_default())
    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, db_constraint=False)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, db_constraint=False)

    objects = TenantAwareManager()  # Django's many-to-many reads and writes get the acting tenant's term

    class Meta:
        db_table = "tenants_membership_departments"
        constraints = [models.UniqueConstraint(fields=["tenant", "membership", "department"], name="uniq_membership_department")]


class ApiKeyDepartment(TenantModel):
    """An API key's department (the many-to-many's table, with its tenant added; as MembershipDepartment)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_default=current_tenant_default())
    apikey = models.ForeignKey(ApiKey, on_delete=models.CASCADE, db_constraint=False)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, db_constraint=False)

    objects = TenantAwareManager()

    class Meta:
        db_table = "tenants_apikey_departments"
        constraints = [models.UniqueConstraint(fields=["tenant", "apikey", "department"], name="uniq_apikey_department")]


def principal_scope(principal: Membership | ApiKey, label: str) -> Scope:
    """The one scope builder for any principal (a member or a key): its tenant, role and departments
    as granted, acting as `label` ("user:<id>", "key:<public id>")."""
    return Scope(
        tenant_id=principal.tenant_id,
        department_ids=frozenset(principal.departments.values_list("id", flat=True)),
        all_departments=principal.all_departments,
        role=principal.role,
        principal=label,
    )


def _active_tenant(using: str) -> str:
    """The tenant id activated on connection `using` ('' for none)."""
    with connections[using].cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_id', true)")
        return cur.fetchone()[0] or ""
