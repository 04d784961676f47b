"""The source kinds in one place: each kind's declared settings (its connector module's FIELDS), its listing,
and a connection test that lists a few items before a source is saved.

The settings are declared once per kind, next to the kind's `check_config` (the only rule for them, shared
by the API and the admin); forms are generated from the declarations (kb.sources.forms)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import ModuleType

import httpx

from kb.sources import folder, s3, website
from kb.sources.base import ConfigField, Listing, SourceError
from kb.sources.grants import check_granted
from kb.sources.models import SourceKind
from kb.sources.outbound import OutboundRefused
from tenants.scope import NotAllowed

# Keyed by the kind's stored string (SourceKind members are those strings).
CONNECTORS: dict[str, ModuleType] = {SourceKind.FOLDER: folder, SourceKind.S3: s3, SourceKind.WEBSITE: website}


def kind_fields(kind: str) -> tuple[ConfigField, ...]:
    """The declared settings of `kind` (config keys and credentials), in form order; () for an unknown kind."""
    connector = CONNECTORS.get(kind)
    return tuple(connector.FIELDS) if connector is not None else ()


def open_listing(tenant_id: int, kind: str, config: dict, secret: dict) -> Listing:
    """The connector listing of a `kind` source of `tenant_id` with a checked `config`, under the tenant's
    outbound policy. The grants are checked again first (SourceError when they no longer cover it)."""
    policy = check_granted(tenant_id, kind, config)  # and the tenant's outbound policy
    if kind == SourceKind.FOLDER:
        return folder.FolderListing(config, secret)
    listing = s3.S3Listing if kind == SourceKind.S3 else website.WebsiteListing
    return listing(config, secret, policy=policy)


def fault_field(kind: str, message: str) -> str:
    """The declared setting a connector's error message blames: the one it names ("config.bucket: ..."),
    else the one its error code points at (S3's NoSuchBucket, AccessDenied, ...), else the kind's main one."""
    names = {f.name for f in kind_fields(kind)}
    head = message.split(":", 1)[0].strip()
    if head.startswith("config.") and head[len("config."):] in names:
        return head[len("config."):]
    connector = CONNECTORS.get(kind)
    if head == "credentials" or message.startswith("credentials"):
        secrets = [f.name for f in kind_fields(kind) if f.secret]
        if secrets:
            return secrets[0]
    for code, name in getattr(connector, "FAULT_CODES", {}).items():
        if code in message:
            return name
    return getattr(connector, "FAULT_FIELD", "config")


@dataclass(frozen=True)
class ConnectionTest:
    """What a connection test saw: the first items' keys, and whether there were more."""

    keys: tuple[str, ...]
    more: bool

    def summary(self) -> str:
        if not self.keys:
            return "connection tested: the source is reachable and holds no items yet"
        shown = ", ".join(self.keys)
        return f"connection tested: {shown}{', ...' if self.more else ''}"


def check_connection(*, tenant_id: int, kind: str, config: dict, secret: dict, limit: int = 5) -> ConnectionTest:
    """List up to `limit` items of a `kind` source with the checked `config` and `secret` (nothing is
    fetched beyond what listing needs, nothing is stored). Raises NotAllowed with `field` set to the
    declared setting at fault when the source cannot be listed, or when every item listed failed."""
    listed = []
    try:
        iterator = iter(open_listing(tenant_id, kind, config, secret))
        try:
            listed = list(itertools.islice(iterator, limit + 1))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # a generator: its finally closes the folder descriptor or HTTP client
                close()
    except (SourceError, OutboundRefused) as exc:
        raise NotAllowed(str(exc), field=fault_field(kind, str(exc))) from None
    except (OSError, httpx.HTTPError) as exc:  # unreachable: the address is at fault
        raise NotAllowed(f"cannot connect: {type(exc).__name__}", field=fault_field(kind, "")) from None
    if listed and all(e.error for e in listed):
        first = listed[0]
        raise NotAllowed(f"nothing could be read: {first.key}: {first.error}", field=fault_field(kind, first.error))
    return ConnectionTest(keys=tuple(e.key for e in listed[:limit]), more=len(listed) > limit)
