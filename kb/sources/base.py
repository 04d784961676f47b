"""What every connector gives the sync: a listing of upstream items, each with a cheap signature and
a way to fetch its bytes. Pure: no ORM."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol


class SourceError(Exception):
    """The source as a whole cannot be read (bad configuration, unreachable, refused credentials)."""


@dataclass(frozen=True)
class ConfigField:
    """One setting of a source kind, declared once next to the kind's `check_config` (which stays the only
    rule): what the admin form shows for it. `type`: "text", "url", "int", "float" or "bool"; `secret`:
    a credential (write-only, stored encrypted), not a config key. `required` only marks the field; the
    kind's check_config says what is missing."""

    name: str
    label: str
    type: str = "text"
    required: bool = False
    help: str = ""
    secret: bool = False


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


def item_title(parsed_title: str, name: str, key: str) -> str:
    """A synced document's title: its own (the first heading or front-matter title the parser found), else
    the item's file name without its extension ("canteen" for folder key "menus/canteen.md"), never the
    source-prefixed document name ("folder:1:menus/canteen"), which is the parser's fallback."""
    if parsed_title and parsed_title != PurePosixPath(name).stem:
        return parsed_title[:500]
    return (PurePosixPath(key.rstrip("/")).stem or key)[:500]
