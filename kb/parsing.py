"""Uploaded bytes -> normalised plain text with structure (headings, pages). Pure: no ORM.

Every format goes through one `_Builder`, so all documents share one text shape: blocks (paragraphs,
list items, headings, table rows) separated by a blank line, lines inside a block kept, no trailing
spaces, no control characters (PostgreSQL text cannot hold NUL). Sections are spans of that text,
so a chunk's offsets can always be traced back to a heading path or a page.

Decisions:
- Plain text and Markdown must be UTF-8 (a UTF-8 or UTF-16 BOM is honoured). Invalid bytes raise
  `ParseError` naming the byte offset instead of being replaced: silently corrupted text would be
  indexed and cited as if the company had written it.
- HTML hidden content (`hidden`, `aria-hidden="true"`, inline `display:none`/`visibility:hidden`),
  scripts, styles and navigation are dropped: nobody reading the page sees them, so they are noise
  at best and a hiding place for prompt injection at worst.
- Limits (`ParseLimits`, kb.parsing_limits) keep one hostile upload from holding a worker or its
  memory: a DOCX bomb is refused from its zip directory, markup elements (of every part the package
  types as XML, whatever its name: kb.ooxml) are counted before a tree is built, PDF pages before
  any is read; blocks, characters and time as the text grows. Over a limit, `ParseLimitExceeded` (a
  `ParseError`: the document fails saying which limit). These run inside the parse; the worker also
  bounds a parse's wall time and memory from outside it (kb.parse_sandbox).
"""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath

import docx
import pypdf
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf.errors import PyPdfError

from kb.ooxml import WORD_MAIN, check_package, main_part_type
from kb.parsing_limits import DEFAULT_LIMITS, Guard, ParseError, ParseLimitExceeded, ParseLimits, check_elements, count_elements

__all__ = ["ParseError", "ParseLimitExceeded", "ParseLimits", "ParsedDocument", "Section", "SUPPORTED_TYPES", "detect_type", "parse"]


@dataclass(frozen=True)
class Section:
    """A structural span of `ParsedDocument.text`: text under one heading path, or one PDF page."""

    char_start: int
    char_end: int
    heading_path: tuple[str, ...]
    page: int | None = None


@dataclass(frozen=True)
class ParsedDocument:
    """Normalised text of a whole document plus its sections (in order, non-overlapping)."""

    text: str
    title: str
    mime_type: str
    sections: tuple[Section, ...]


TEXT, MARKDOWN, HTML = "text/plain", "text/markdown", "text/html"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

SUPPORTED_TYPES: dict[str, str] = {
    ".txt": TEXT,
    ".text": TEXT,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".pdf": PDF,
    ".docx": DOCX,
}
_MIME_ALIASES = {"text/x-markdown": MARKDOWN, "application/xhtml+xml": HTML, "application/x-pdf": PDF}
_SUPPORTED_MIMES = frozenset(SUPPORTED_TYPES.values())


# ---------------------------------------------------------------------------------------------
# Type detection


def detect_type(filename: str, data: bytes) -> str:
    """MIME type of an upload: magic bytes for binary formats (they cannot lie), else the extension. A zip
    is a DOCX when its package names a Word main part (whatever that part is called: kb.ooxml)."""
    if data.startswith(b"%PDF-"):
        return PDF
    if data.startswith(b"PK\x03\x04") and main_part_type(data) == WORD_MAIN:
        return DOCX
    ext = PurePath(filename or "").suffix.lower()
    if ext in SUPPORTED_TYPES:
        return SUPPORTED_TYPES[ext]
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return HTML
    supported = ", ".join(sorted(SUPPORTED_TYPES))
    raise ParseError(f"unsupported file type {ext or '(no extension)'!r} for {filename!r}; supported: {supported}")


def declared_type(filename: str, data: bytes, mime_type: str) -> str:
    """MIME type of bytes whose origin declared one (a web server's Content-Type): magic bytes and a
    known extension still win; else the declared type, if supported."""
    try:
        return detect_type(filename, data)
    except ParseError:
        return _normalise_mime(mime_type)


def _normalise_mime(mime_type: str) -> str:
    mime = mime_type.split(";", 1)[0].strip().lower()
    mime = _MIME_ALIASES.get(mime, mime)
    if mime not in _SUPPORTED_MIMES:
        raise ParseError(f"unsupported file type {mime_type!r}; supported: {', '.join(sorted(_SUPPORTED_MIMES))}")
    return mime


# ---------------------------------------------------------------------------------------------
# Entry point


def parse(data: bytes, filename: str, mime_type: str | None = None, *, limits: ParseLimits = DEFAULT_LIMITS) -> ParsedDocument:
    """Parse an upload into normalised text and sections; raises `ParseError` saying what is wrong
    (`ParseLimitExceeded` over one of `limits`)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ParseError(f"document data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    mime = _normalise_mime(mime_type) if mime_type else detect_type(filename, data)
    fallback_title = PurePath(filename or "").stem or "untitled"
    parser = {TEXT: _parse_text, MARKDOWN: _parse_markdown, HTML: _parse_html, PDF: _parse_pdf, DOCX: _parse_docx}[mime]
    builder, title = parser(data, Guard(limits))
    text, sections = builder.finish()
    if not text.strip():
        raise ParseError("document is empty" + (": PDF has no extractable text (scanned pages need OCR)" if mime == PDF else ""))
    return ParsedDocument(text=text, title=_collapse(title) or fallback_title, mime_type=mime, sections=sections)


# ---------------------------------------------------------------------------------------------
# Text normalisation and the shared builder

_DROP_CHARS = dict.fromkeys([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0xAD, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF])
_LINE_BREAKS = re.compile(r"\r\n?|[\f\v\x1c-\x1e\x85\u2028\u2029]")
_SPACES = re.compile(r"[^\S\n]+")


def _clean(text: str) -> str:
    """NFC, unified line breaks, control and zero-width characters removed (they hide text and break SQL)."""
    text = _LINE_BREAKS.sub("\n", text)
    text = text.translate(_DROP_CHARS).replace("\u00a0", " ")
    return unicodedata.normalize("NFC", text)


def _collapse(text: str) -> str:
    """One line, single spaces: for headings and titles."""
    return " ".join(_clean(text).split())


class _Builder:
    """Accumulates blocks into one text and records a section per heading (or page), within the
    guard's block, character and time limits."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._blocks = 0
        self._parts: list[str] = []
        self._length = 0
        self._sections: list[Section] = []
        self._stack: list[tuple[int, str]] = []  # (level, heading text)
        self._page: int | None = None
        self._open: tuple[int, int] | None = None  # (start, end) of the section being filled

    def heading(self, level: int, text: str) -> None:
        """Start a section: headings at this level or deeper are closed, this one is pushed."""
        text = _collapse(text)
        if not text:
            return
        self._close()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self._append(text)

    def page(self, number: int) -> None:
        """Start a new page: pages are sections of their own and never share one."""
        self._guard.tick()
        self._close()
        self._page = number

    def block(self, text: str) -> None:
        """Append a paragraph-like block; lines kept, trailing spaces, blank lines and edge whitespace dropped."""
        lines = [line.rstrip() for line in _clean(text).split("\n")]
        block = "\n".join(line for line in lines if line.strip()).strip()  # inner indentation kept, edges trimmed
        if block:
            self._append(block)

    def _append(self, text: str) -> None:
        limits = self._guard.limits
        self._blocks += 1
        if self._blocks > limits.max_blocks:
            raise ParseLimitExceeded(f"more than {limits.max_blocks} paragraphs, headings and rows (limit)")
        if self._length + len(text) > limits.max_text_chars:
            raise ParseLimitExceeded(f"more than {limits.max_text_chars} characters of text (limit)")
        if self._blocks % 256 == 0:
            self._guard.tick()
        if self._length:
            self._parts.append("\n\n")
            self._length += 2
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        self._open = (self._open[0] if self._open else start, self._length)

    def _close(self) -> None:
        if self._open:
            path = tuple(text for _, text in self._stack)
            self._sections.append(Section(self._open[0], self._open[1], path, self._page))
            self._open = None

    def finish(self) -> tuple[str, tuple[Section, ...]]:
        self._close()
        return "".join(self._parts), tuple(self._sections)


def _decode_utf8(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ParseError(f"text is not valid UTF-16 at byte offset {exc.start}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        offset = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        bad = data[offset]
        raise ParseError(f"text is not valid UTF-8 at byte offset {offset} (byte 0x{bad:02x}); re-save the file as UTF-8") from None


def _paragraphs(lines: Iterable[str], builder: _Builder) -> None:
    """Blank lines separate blocks."""
    buf: list[str] = []
    for line in lines:
        if line.strip():
            buf.append(line)
        elif buf:
            builder.block("\n".join(buf))
            buf = []
    if buf:
        builder.block("\n".join(buf))


# ---------------------------------------------------------------------------------------------
# Plain text and Markdown


def _parse_text(data: bytes, guard: Guard) -> tuple[_Builder, str]:
    builder = _Builder(guard)
    _paragraphs(_clean(_decode_utf8(data)).split("\n"), builder)
    return builder, ""


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FRONT_TITLE = re.compile(r"^title:\s*[\"']?(.*?)[\"']?\s*$", re.IGNORECASE)


def _parse_markdown(data: bytes, guard: Guard) -> tuple[_Builder, str]:
    """ATX (`#`) and setext headings build heading paths; `#` inside fenced code is not a heading."""
    lines = _clean(_decode_utf8(data)).split("\n")
    title, lines = _front_matter(lines)
    builder = _Builder(guard)
    buf: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if buf:
            builder.block("\n".join(buf))
            buf.clear()

    for line in lines:
        if fence:
            buf.append(line)
            if line.strip().startswith(fence):
                fence = None
            continue
        if m := _FENCE.match(line):
            fence = m.group(1)[0] * 3
            buf.append(line)
            continue
        if (m := _ATX.match(line)) and (m.group(2) or "").strip():
            flush()
            level, text = len(m.group(1)), m.group(2)
            title = title or (_collapse(text) if level == 1 else "")
            builder.heading(level, text)
        elif (m := _SETEXT.match(line)) and buf and (m.group(1)[0] == "=" or len(m.group(1)) >= 2):
            level = 1 if m.group(1)[0] == "=" else 2
            text = " ".join(buf)
            buf.clear()
            title = title or (_collapse(text) if level == 1 else "")
            builder.heading(level, text)
        elif line.strip():
            buf.append(line)
        else:
            flush()
    flush()
    return builder, title


def _front_matter(lines: list[str]) -> tuple[str, list[str]]:
    """Strip a leading YAML front-matter block; its `title:` is the document title."""
    if not lines or lines[0].strip() != "---":
        return "", lines
    for i in range(1, min(len(lines), 200)):
        if lines[i].strip() in ("---", "..."):
            title = next((m.group(1) for line in lines[1:i] if (m := _FRONT_TITLE.match(line))), "")
            return title, lines[i + 1 :]
    return "", lines


# ---------------------------------------------------------------------------------------------
# HTML

_DROP_TAGS = frozenset({"script", "style", "nav", "noscript", "template", "head", "svg", "iframe", "object", "embed", "canvas"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAGS = frozenset(
    "p div section article main header footer aside ul ol li dl dt dd table thead tbody tfoot tr caption blockquote pre "
    "figure figcaption address form fieldset legend details summary hr br center".split()
)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


def _parse_html(data: bytes, guard: Guard) -> tuple[_Builder, str]:
    """Walk the tree iteratively (depth kept in a dict), so deeply nested markup cannot recurse."""
    check_elements(count_elements([data]), guard, "HTML page", guard.limits.max_html_elements)
    try:  # bytes that are valid UTF-8 are read as UTF-8: bs4's charset guess garbles short non-ASCII pages
        markup: bytes | str = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        markup = data
    try:
        soup = BeautifulSoup(markup, "lxml")
    except Exception as exc:  # lxml/bs4 raise assorted types on hostile input
        raise ParseError(f"HTML is malformed: {exc}") from None
    title_tag = soup.find("title")
    title = title_tag.get_text(" ") if title_tag else ""
    guard.tick()
    builder = _Builder(guard)
    buf: list[str] = []
    open_blocks: list[int] = []  # depths of block elements still open
    depth: dict[int, int] = {id(soup): 0}
    skip_below: int | None = None

    def flush() -> None:
        if buf:
            lines = (" ".join(line.split()) for line in "".join(buf).split("\n"))
            builder.block("\n".join(lines))
            buf.clear()

    for n, el in enumerate(soup.descendants):
        if n % 4096 == 0:
            guard.tick()
        d = depth.get(id(el.parent), 0) + 1
        if isinstance(el, Tag):
            depth[id(el)] = d
        if skip_below is not None:
            if d > skip_below:
                continue
            skip_below = None
        while open_blocks and open_blocks[-1] >= d:
            open_blocks.pop()
            flush()
        if not isinstance(el, Tag):
            if isinstance(el, NavigableString) and not isinstance(el, PreformattedString):  # not comments, CDATA, doctype
                buf.append(str(el))
            continue
        name = el.name.lower()
        if name in _DROP_TAGS or _is_hidden(el):
            skip_below = d
        elif name in _HEADINGS:
            flush()
            text = el.get_text(" ")
            title = title or (_collapse(text) if name == "h1" else "")
            builder.heading(_HEADINGS[name], text)
            skip_below = d
        elif name == "br":
            buf.append("\n")
        elif name in ("td", "th"):
            buf.append(" | " if buf and "".join(buf).strip() else " ")
        elif name in _BLOCK_TAGS:
            flush()
            open_blocks.append(d)
    flush()
    return builder, title


def _is_hidden(tag) -> bool:
    attrs = tag.attrs
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    style = attrs.get("style")
    return bool(style and _HIDDEN_STYLE.search(str(style)))


# ---------------------------------------------------------------------------------------------
# PDF


def _parse_pdf(data: bytes, guard: Guard) -> tuple[_Builder, str]:
    """One section per page (1-based `page`); pages without text are skipped. pypdf caps each
    stream's decompressed size itself (pypdf.filters.ZLIB_MAX_OUTPUT_LENGTH)."""
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _decrypt_with_empty_password(reader):
            raise ParseError("PDF is encrypted: remove the password and upload again")
        title = str(reader.metadata.get("/Title") or "") if reader.metadata else ""
        if (pages := len(reader.pages)) > guard.limits.max_pdf_pages:
            raise ParseLimitExceeded(f"PDF has {pages} pages; at most {guard.limits.max_pdf_pages} (limit)")
        builder = _Builder(guard)
        for number, page in enumerate(reader.pages, start=1):
            builder.page(number)
            _paragraphs(_clean(page.extract_text() or "").split("\n"), builder)
    except ParseError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError, OSError, RecursionError) as exc:
        raise ParseError(f"PDF is malformed: {exc or type(exc).__name__}") from None
    return builder, title


def _decrypt_with_empty_password(reader) -> bool:
    """Owner-password-only PDFs (printing restricted, reading allowed) open with an empty password."""
    try:
        return bool(reader.decrypt(""))
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------
# DOCX

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def _parse_docx(data: bytes, guard: Guard) -> tuple[_Builder, str]:
    """Paragraphs and tables in body order; 'Heading N' styles build heading paths, 'Title' is level 1.
    The package is measured and its layout checked (`kb.ooxml.check_package`) before python-docx unpacks
    anything: limits hold for whatever part the package names as its main one."""
    check_package(data, guard, "DOCX")
    try:
        document = docx.Document(io.BytesIO(data))
        title = document.core_properties.title or ""
        builder = _Builder(guard)
        for item in document.iter_inner_content():
            if isinstance(item, Paragraph):
                title = _docx_paragraph(item, builder, title)
            elif isinstance(item, Table):
                _docx_table(item, builder)
    except ParseError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, AttributeError, TypeError, OSError) as exc:
        raise ParseError(f"DOCX is malformed: {exc or type(exc).__name__}") from None
    except Exception as exc:  # python-docx surfaces lxml XMLSyntaxError and package errors
        raise ParseError(f"DOCX is malformed: {type(exc).__name__}: {exc}") from None
    return builder, title


def _docx_paragraph(paragraph, builder: _Builder, title: str) -> str:
    style = paragraph.style
    names = (style.name or "", getattr(style, "style_id", "") or "") if style is not None else ("", "")
    level = next((int(m.group(1)) for n in names if (m := _HEADING_STYLE.match(n))), None)
    if level is None and "title" in (n.lower() for n in names):
        level = 1
    if level:
        title = title or (_collapse(paragraph.text) if level == 1 else "")
        builder.heading(level, paragraph.text)
    else:
        builder.block(paragraph.text)
    return title


def _docx_table(table, builder: _Builder) -> None:
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if text and (not cells or cells[-1] != text):  # merged cells repeat their text
                cells.append(text)
        builder.block(" | ".join(cells))
