"""Who is asking, and in which tenant: API keys and users turned into a Scope.

Row-level security hides every tenant's keys and memberships until a tenant is activated, but
authentication has to find out WHICH tenant to activate. These are the only reads that cross
tenants, and they go through two SECURITY DEFINER functions (tenants 0003) that answer exactly that
and nothing more:

- `grounded_api_key_tenant(public_id)`: the tenant of a key that is not revoked, else NULL.
- `grounded_user_tenants(user_id)`: the tenants (id, slug, name, role) a user is a member of; it
  answers only for the user this process vouches for in the same transaction (`app.user_id` with
  a proof signed by tenants.db_wall), so SQL run as the application role cannot list anyone else's.

Everything else (the key's hash, its departments, the membership's departments) is read under
`activate(Scope.system(tenant_id))`, i.e. through RLS for that one tenant. A user with memberships in
several tenants must name one (`choose_tenant`); there is never a default "first membership".
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import connections
from django.utils import timezone

from tenants.db_wall import user_statements
from tenants.models import KEY_PREFIX, ApiKey, Membership, hash_secret
from tenants.scope import Scope, activate

# A raw key is gk_ + 16 hex + _ + 43 urlsafe characters; anything much longer is not one of ours.
MAX_RAW_KEY = 200
LAST_USED_EVERY_SECONDS = 60


class TenantChoiceRequired(Exception):
    """The user must (or did not validly) name a tenant. `choices` are the user's own tenants (empty
    when they have none); the message is the same whether a requested tenant exists or not."""

    def __init__(self, message: str, choices: list[TenantChoice]) -> None:
        super().__init__(message)
        self.choices = choices


@dataclass(frozen=True)
class TenantChoice:
    """A tenant the user is a member of, with their role there."""

    tenant_id: int
    slug: str
    name: str
    role: str


def _split_key(raw: str) -> tuple[str, str] | None:
    if not raw or len(raw) > MAX_RAW_KEY or not raw.startswith(KEY_PREFIX) or raw.count("_") < 2:
        return None
    public_id, _, secret = raw[len(KEY_PREFIX):].partition("_")
    return (public_id, secret) if public_id and secret else None


def _key_tenant(public_id: str) -> int | None:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT grounded_api_key_tenant(%s)", [public_id])
        return cur.fetchone()[0]


def authenticate_key(raw: str) -> tuple[ApiKey, Scope] | None:
    """The key and its scope for a raw `gk_<public>_<secret>` value; None for anything else (malformed,
    unknown, revoked, wrong secret), alike. Records `last_used_at` (at most once a minute)."""
    parts = _split_key(raw)
    if parts is None:
        return None
    public_id, secret = parts
    tenant_id = _key_tenant(public_id)
    if tenant_id is None:
        return None
    with activate(Scope.system(tenant_id, principal="authentication")):
        key = ApiKey.objects.select_related("tenant").filter(public_id=public_id, revoked_at__isnull=True).first()
        if key is None or not hmac.compare_digest(key.secret_hash, hash_secret(secret)):
            return None
        now = timezone.now()
        if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_EVERY_SECONDS:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            key.last_used_at = now
        return key, key.scope()


def tenants_of_user(user: AbstractBaseUser | AnonymousUser) -> list[TenantChoice]:
    """The tenants `user` is a member of, by slug (none for an anonymous or unsaved user)."""
    user_id = getattr(user, "pk", None)
    if not user_id or not getattr(user, "is_authenticated", False):
        return []
    # One round trip: the user's proof, the look-up, the proof cleared again (it would otherwise last to
    # the end of an enclosing transaction; outside one, the script is its own).
    script = (f"{user_statements(int(user_id))}; "  # noqa: S608  (SET LOCALs formatted from an int and hex digits)
              f"SELECT tenant_id, slug, name, role FROM grounded_user_tenants(%s); {user_statements(None)}")
    with connections["default"].cursor() as cur:
        cur.execute(script, [int(user_id)])
        raw = getattr(cur, "cursor", cur)
        rows: list[tuple] = []
        while True:
            if raw.description is not None:
                rows = raw.fetchall()
            if not raw.nextset():
                break
        return [TenantChoice(int(t), slug, name, role) for t, slug, name, role in rows]


def user_scope(user: AbstractBaseUser | AnonymousUser, tenant_id: int) -> Scope | None:
    """`user`'s scope in tenant `tenant_id` (their membership's role and departments), None without one."""
    user_id = getattr(user, "pk", None)
    if not user_id:
        return None
    with activate(Scope.system(int(tenant_id), principal="authentication")):
        membership = Membership.objects.filter(user_id=user_id, tenant_id=tenant_id).first()
        return membership.scope() if membership is not None else None


def choose_tenant(user: AbstractBaseUser | AnonymousUser, requested_slug: str | None) -> TenantChoice:
    """The tenant `user` acts in: the one requested (which must be one of theirs), or their only one.

    Raises TenantChoiceRequired when they have no membership, when they have several and none was
    requested, and when the requested slug is not one of theirs (whether or not such a tenant exists).
    """
    choices = tenants_of_user(user)
    slugs = ", ".join(c.slug for c in choices)
    if requested_slug:
        for choice in choices:
            if choice.slug == requested_slug:
                return choice
        raise TenantChoiceRequired(f"you are not a member of a tenant {requested_slug!r}"
                                   + (f" (yours: {slugs})" if choices else ""), choices)
    if not choices:
        raise TenantChoiceRequired("you are not a member of any tenant", choices)
    if len(choices) > 1:
        raise TenantChoiceRequired(f"you are a member of several tenants ({slugs}): choose one", choices)
    return choices[0]
