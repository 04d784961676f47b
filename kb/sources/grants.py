"""Source grants: which folders, website hosts and S3 endpoints an operator lets one tenant's sources read.

- Folders: SOURCES_FOLDER_ROOTS is the server's ceiling; within it an operator grants each tenant its
  own folders (stored as real paths: no symlink in a grant). Folder grants of two tenants never
  overlap (neither equal, nor one inside the other): refused here with a clear message, and by the
  database (trigger of kb migration 0009, under an advisory lock, whatever connection writes). A folder
  source's path must be under one of its tenant's folder grants, so it overlaps no other tenant's.
- Hosts: when a tenant has at least one grant of a host kind (website_host, s3_endpoint), its sources of
  that kind may reach only those hosts; with none, any host the outbound policy allows. A host grant
  with allow_private lets that host resolve to a private address (`granted_private_hosts`).

Written by operators only (`manage.py grant_source`), through the owner connection, and logged on
`grounded.operator`; read by the application role under its tenant's row-level security.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from django.db import IntegrityError, connections, transaction

from kb.sources.base import SourceError
from kb.sources.models import SourceGrant, SourceKind
from kb.sources.outbound import OutboundPolicy
from tenants.conf import product_settings
from tenants.models import Tenant
from tenants.operator import OWNER
from tenants.scope import Scope, across_tenants, activate

log = logging.getLogger("grounded.operator")

# The grant kind that governs each source kind.
GRANT_KIND: dict[str, str] = {SourceKind.FOLDER: SourceGrant.Kind.FOLDER, SourceKind.WEBSITE: SourceGrant.Kind.WEBSITE_HOST,
              SourceKind.S3: SourceGrant.Kind.S3_ENDPOINT}
_LOCK = (0x7367, 0)  # advisory-lock key ("sg") the grant trigger takes too: one grant write at a time


class GrantRefused(ValueError):
    """A grant the operator asked for that may not be made (the message says why)."""


# --- the rules ------------------------------------------------------------------------------------------

def folder_under_ceiling(path: str, what: str = "config.path") -> str:
    """The real path of the absolute folder `path`, which must be under SOURCES_FOLDER_ROOTS (the
    server's ceiling); raises SourceError naming `what`."""
    if not os.path.isabs(path):
        raise SourceError(f"{what}: must be an absolute path")
    real = os.path.realpath(path)
    roots = [os.path.realpath(r) for r in product_settings.SOURCES_FOLDER_ROOTS]
    if not roots:
        raise SourceError(f"{what}: folder sources are off on this server (set SOURCES_FOLDER_ROOTS)")
    if not any(is_within(real, root) for root in roots):
        raise SourceError(f"{what}: not under a folder this server allows (SOURCES_FOLDER_ROOTS)")
    return real


def is_within(path: str, folder: str) -> bool:
    """True when the real path `path` is `folder` or inside it (both real, absolute)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def overlaps(a: str, b: str) -> bool:
    """Two folders overlap when they are equal or one is inside the other."""
    return is_within(a, b) or is_within(b, a)


def host_value(kind: str, value: str) -> str:
    """The stored form of a host grant: a website host (no port), or an S3 endpoint host[:port]; a URL
    is accepted for either and reduced to that."""
    text = value.strip()
    parts = urlsplit(text if "://" in text else f"//{text}")
    if not parts.hostname or parts.username or parts.password or parts.path not in ("", "/") or parts.query:
        raise GrantRefused(f"{text!r}: expected a host name (website_host) or host[:port] (s3_endpoint)")
    try:
        port = parts.port
    except ValueError:
        raise GrantRefused(f"{text!r}: a port must be a number from 0 to 65535") from None
    host = parts.hostname.lower()
    if kind == SourceGrant.Kind.WEBSITE_HOST:
        if port is not None:
            raise GrantRefused(f"{text!r}: a website host grant names the host only (any port)")
        return host
    return f"{host}:{port}" if port is not None else host


def _endpoint(url: str) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port is not None else host


# --- reads (the application role, the tenant's own grants) ------------------------------------------------

def grants_of(tenant_id: int, kind: str | None = None) -> list[SourceGrant]:
    """`tenant_id`'s grants (of `kind` when given), oldest first."""
    scope = Scope.system(tenant_id, principal="source-grants")
    with activate(scope):
        qs = SourceGrant.objects.for_scope(scope).order_by("id")
        return list(qs.filter(kind=kind) if kind else qs)


def granted_private_hosts(tenant_id: int, kind: str) -> frozenset[str]:
    """Hosts (website_host) or host[:port]s (s3_endpoint) of `tenant_id` whose grant allows private
    addresses: the outbound policy lets only these resolve to one."""
    return frozenset(g.value for g in grants_of(tenant_id, kind) if g.allow_private)


def outbound_policy_for(tenant_id: int, source_kind: str) -> OutboundPolicy:
    """The outbound policy of `tenant_id`'s `source_kind` sources: public addresses, plus the private
    ones of the hosts its grants of that kind allow (kb.sources.outbound)."""
    kind = GRANT_KIND.get(source_kind)
    return _policy(grants_of(tenant_id, kind) if kind else [])


def _policy(grants: list[SourceGrant]) -> OutboundPolicy:
    """The outbound policy that lets the private addresses of `grants`' allow_private hosts through (folder
    grants have none)."""
    return OutboundPolicy.from_settings(private_hosts=frozenset(g.value for g in grants if g.allow_private))


def check_granted(tenant_id: int, source_kind: str, config: dict) -> OutboundPolicy:
    """Raise SourceError (naming the config field) unless the checked `config` of a `source_kind`
    source is within `tenant_id`'s grants: a folder under one of its folder grants (none: refused);
    a website start URL or S3 endpoint on a granted host when the tenant has host grants of that kind.
    Returns the outbound policy of that source (outbound_policy_for, from the same grants)."""
    kind = GRANT_KIND.get(source_kind)
    found = grants_of(tenant_id, kind) if kind else []
    policy, grants = _policy(found), [g.value for g in found]
    if kind is None:
        return policy
    if kind == SourceGrant.Kind.FOLDER:
        path = os.path.realpath(str(config.get("path") or ""))
        if not grants:
            raise SourceError("config.path: no folder is granted to this tenant (an operator grants folders: "
                              "manage.py grant_source, docs/sources.md)")
        if not any(is_within(path, g) for g in grants):
            raise SourceError("config.path: not under a folder granted to this tenant")
        return policy
    if not grants:
        return policy
    field = "config.start_url" if kind == SourceGrant.Kind.WEBSITE_HOST else "config.endpoint_url"
    url = str(config.get("start_url" if kind == SourceGrant.Kind.WEBSITE_HOST else "endpoint_url") or "")
    host = (urlsplit(url).hostname or "").lower() if kind == SourceGrant.Kind.WEBSITE_HOST else _endpoint(url)
    if not url or host not in grants:
        raise SourceError(f"{field}: this tenant's sources may reach only the hosts granted to it: {', '.join(grants)}")
    return policy


# --- writes (operators, through the owner connection) -------------------------------------------------------

def grant_source(*, tenant: Tenant, kind: str, value: str, allow_private: bool = False, note: str = "",
                 granted_by: str = "operator", using: str = OWNER) -> SourceGrant:
    """Grant `tenant` a folder (real path under SOURCES_FOLDER_ROOTS, overlapping no other tenant's folder
    grant) or a host. Raises GrantRefused. Idempotent: granting the same thing again updates its
    allow_private and note. `using` is the owner connection except in tests (the database trigger
    refuses an overlap on any connection)."""
    if kind not in SourceGrant.Kind.values:
        raise GrantRefused(f"kind must be one of {', '.join(SourceGrant.Kind.values)}")
    if kind == SourceGrant.Kind.FOLDER:
        if allow_private:
            raise GrantRefused("allow_private is for host grants only")
        try:
            value = folder_under_ceiling(value.strip(), "folder")
        except SourceError as exc:
            raise GrantRefused(str(exc)) from None
    else:
        value = host_value(kind, value)
    try:
        with transaction.atomic(using=using), activate(Scope.system(tenant.pk, principal="grant_source"), using=using):
            _lock(using)
            if kind == SourceGrant.Kind.FOLDER:
                _check_disjoint(tenant, value, using)
            grant, _ = SourceGrant.objects.unscoped_dangerously(using=using).update_or_create(
                tenant=tenant, kind=kind, value=value,
                defaults={"allow_private": allow_private, "note": note[:500], "granted_by": granted_by[:200]})
    except IntegrityError as exc:  # the trigger's verdict, when another write slipped in between
        raise GrantRefused(f"{value}: {str(exc).splitlines()[0]}") from None
    log.info("grant_source: tenant %r granted %s %r%s by %s", tenant.slug, kind, value,
             " (private addresses allowed)" if allow_private else "", granted_by)
    return grant


def revoke_source_grant(*, tenant: Tenant, kind: str, value: str, granted_by: str = "operator", using: str = OWNER) -> int:
    """Take back one grant of `tenant`; returns how many rows went (0 or 1). Sources under it fail their
    next sync (nothing is removed) until it is granted again or they are changed."""
    text = value.strip()
    if kind == SourceGrant.Kind.FOLDER:  # as stored (a real path when granted), or as it resolves now
        values = {os.path.normpath(text), os.path.realpath(text)} if os.path.isabs(text) else {text}
    else:
        values = {host_value(kind, text) if kind in SourceGrant.Kind.values else text}
    with transaction.atomic(using=using), activate(Scope.system(tenant.pk, principal="grant_source"), using=using):
        gone, _ = (SourceGrant.objects.unscoped_dangerously(using=using)
                   .filter(tenant=tenant, kind=kind, value__in=values).delete())
    log.info("grant_source: tenant %r revoked %s %r (%d row(s)) by %s", tenant.slug, kind, text, gone, granted_by)
    return gone


def _lock(using: str) -> None:
    with connections[using].cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(_LOCK))


def _check_disjoint(tenant: Tenant, folder: str, using: str) -> None:
    with across_tenants("operator: a folder is granted to one tenant only, so every other tenant's grants are read"):
        others = list(SourceGrant.objects.unscoped_dangerously(using=using).filter(kind=SourceGrant.Kind.FOLDER)
                      .exclude(tenant=tenant).select_related("tenant"))
    for other in others:
        if overlaps(folder, other.value):
            how = ("is" if folder == other.value else "is inside" if is_within(folder, other.value) else "contains")
            raise GrantRefused(f"{folder} {how} {other.value}, granted to tenant {other.tenant.slug!r}: "
                               "a folder is granted to one tenant only")
