"""What every connector gives the sync: a listing of upstream items, each with a cheap signature and
a way to fetch its bytes. Pure: no ORM."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from django.conf import settings


class SourceError(Exception):
    """The source as a whole cannot be read (bad configuration, unreachable, refused credentials)."""


class ItemError(Exception):
    """One item cannot be read; the sync records it and goes on."""


@dataclass
class Entry:
    """One upstream item. `signature` changes when the item changes (ETag, size+mtime, hash);
    `fetch()` returns its bytes (or raises ItemError)."""

    key: str
    signature: str
    size: int
    fetch: Callable[[], bytes]
    mime_type: str | None = None  # when upstream says (a web server's Content-Type)
    error: str = ""  # the item was found but could not be read (listed so it is not taken as removed)
    extra: dict = field(default_factory=dict)


class Listing(Protocol):
    """A connector's listing: iterate it for entries; `complete` tells, once exhausted, whether every
    upstream item was listed (a crawl stopped by a limit is not complete: nothing is removed then)."""

    complete: bool

    def __iter__(self) -> Iterator[Entry]: ...


def check_public_host(url: str, what: str) -> None:
    """Refuse a URL whose host resolves to a loopback, private, link-local or reserved address, unless
    SOURCES_ALLOW_PRIVATE_HOSTS is on (a tenant must not reach the server's own network)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise SourceError(f"{what}: no host in the URL")
    if parts.username or parts.password:
        raise SourceError(f"{what}: no user or password in the URL (give them as credentials)")
    if settings.SOURCES_ALLOW_PRIVATE_HOSTS:
        return
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as exc:
        raise SourceError(f"{what}: cannot resolve {host!r}: {exc}") from None
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_reserved or addr.is_multicast or addr.is_unspecified:
            raise SourceError(f"{what}: {host!r} is a private or local address (SOURCES_ALLOW_PRIVATE_HOSTS is off)")
