"""Limits on the work one upload may cause while it is parsed (kb.parsing), and the error types.

A zip (DOCX) is measured from its directory before anything is unpacked: total size and each
part's compression ratio; its XML parts' elements are then counted in a streaming pass, so a tree is
never built for a bomb (kb.ooxml, which finds the parts as the package names them). HTML tags are
counted the same way, PDF pages before any is read, and the output's blocks and characters as it
grows. The time limit is checked between steps (blocks, pages, elements, 1 MB of unpacked XML), which
the other caps keep small; a step that runs long anyway (one regular expression over one long line)
is stopped from outside, by kb.parse_sandbox. Pure: no ORM, no settings.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass


class ParseError(ValueError):
    """The upload cannot be turned into text; the message says why."""


class ParseLimitExceeded(ParseError):
    """The upload is over one of the `ParseLimits`; the message names the limit."""


_MB = 1024 * 1024


@dataclass(frozen=True)
class ParseLimits:
    """Caps on the work one document may cause. The defaults fit documents of a few thousand pages."""

    max_unpacked_bytes: int = 64 * _MB  # a zip's members, uncompressed, together
    max_compression_ratio: float = 100.0  # per member of at least `ratio_floor_bytes` (XML compresses ~5-20:1)
    ratio_floor_bytes: int = 1 * _MB
    max_elements: int = 400_000  # XML elements of all a DOCX's parts (lxml: ~0.2 KB each)
    max_html_elements: int = 150_000  # tags of an HTML page (BeautifulSoup: ~1 KB each with their text)
    max_pdf_pages: int = 3_000
    max_blocks: int = 200_000  # paragraphs, list items, headings, table rows in the output
    max_text_chars: int = 20_000_000
    max_seconds: float = 60.0


DEFAULT_LIMITS = ParseLimits()


class Guard:
    """The limits of one parse() call and its deadline."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_seconds

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ParseLimitExceeded(f"parsing took longer than {self.limits.max_seconds:g} s (limit)")


def count_elements(parts: Iterable[Iterable[bytes] | bytes]) -> int:
    """Start tags in markup (`<` not followed by `/`, `?` or `!`), counted chunk by chunk."""
    total = 0
    for part in parts:
        chunks = [part] if isinstance(part, bytes) else part
        tail = b""
        for chunk in chunks:
            joined = tail + chunk  # a "</" split across two chunks is counted once
            total += chunk.count(b"<") - joined.count(b"</") - joined.count(b"<?") - joined.count(b"<!")
            tail = chunk[-1:]
    return total


def check_elements(count: int, guard: Guard, kind: str, limit: int | None = None) -> None:
    limit = guard.limits.max_elements if limit is None else limit
    if count > limit:
        raise ParseLimitExceeded(f"{kind} has about {count} markup elements; at most {limit} (limit)")
