"""Limits on the work one upload may cause while it is parsed (kb.parsing), and the error types.

A zip (DOCX) is measured from its directory before anything is unpacked: total size and each
part's compression ratio; its XML parts' elements are then counted in a streaming pass, so a tree is
never built for a bomb. HTML tags are counted the same way, PDF pages before any is read, and the
output's blocks and characters as it grows. The time limit is checked between steps (blocks, pages,
elements, 1 MB of unpacked XML), which the other caps keep small. Pure: no ORM, no settings.
"""

from __future__ import annotations

import io
import time
import zipfile
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


def check_zip(data: bytes, guard: Guard, kind: str) -> None:
    """Refuse a zip whose members unpack past the limits, from its directory alone; then count the
    elements of its XML parts in a streaming pass (bounded memory). zipfile never yields more than a
    member's declared size, so a directory that lies about sizes gives a broken zip, not a bigger one."""
    limits = guard.limits
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            members = zf.infolist()
            total = sum(m.file_size for m in members)
            if total > limits.max_unpacked_bytes:
                raise ParseLimitExceeded(f"{kind} unpacks to {total / _MB:.1f} MB; at most {limits.max_unpacked_bytes / _MB:g} MB (limit)")
            for m in members:
                if m.file_size >= limits.ratio_floor_bytes and m.file_size > limits.max_compression_ratio * max(m.compress_size, 1):
                    ratio = m.file_size / max(m.compress_size, 1)
                    raise ParseLimitExceeded(f"{kind} part {m.filename} is compressed {ratio:.0f}:1 ({m.file_size / _MB:.1f} MB "
                                             f"unpacked); at most {limits.max_compression_ratio:g}:1 (limit)")
            xml = [m for m in members if m.filename.endswith((".xml", ".rels"))]
            check_elements(count_elements(_read_chunks(zf, m, guard) for m in xml), guard, kind)
    except ParseError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
        raise ParseError(f"{kind} is malformed: {exc or type(exc).__name__}") from None


def _read_chunks(zf: zipfile.ZipFile, member: zipfile.ZipInfo, guard: Guard, size: int = _MB) -> Iterable[bytes]:
    with zf.open(member) as f:
        while chunk := f.read(size):
            guard.tick()
            yield chunk


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
