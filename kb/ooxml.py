"""Office Open XML (DOCX) packages measured the way their reader walks them, before anything is parsed.

A package names its main part itself: `_rels/.rels`' officeDocument relationship points at it, and
`[Content_Types].xml` types every part (an Override by part name, else a Default by extension; both
case-insensitive, as python-docx looks them up). So a limit that trusts a file name
(`word/document.xml`, `.xml`) can be walked around: `word/document.bin`, typed as the main document by
an Override, is a Word document's body all the same (issue 47, finding 5).

`check_package` therefore measures every member from the zip directory (total unpacked size, each
member's compression ratio), counts the elements of every part the package types as XML (`…/xml`,
`…+xml`) and of every `.xml` and `.rels` member in one streaming pass (1 MB at a time, a tree is
never built for a bomb), and then walks the relationships from the package root as python-docx does:
every internal target must exist and have a content type, and the main part must be a
WordprocessingML main document. Anything else is a `ParseError`; over a limit, `ParseLimitExceeded`.
Pure: no ORM, no settings.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass

from lxml import etree

from kb.parsing_limits import Guard, ParseError, ParseLimitExceeded, check_elements, count_elements

_MB = 1024 * 1024
CONTENT_TYPES = "[Content_Types].xml"
ROOT_RELS = "_rels/.rels"
OFFICE_DOCUMENT = frozenset({"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument",
                             "http://purl.oclc.org/ooxml/officeDocument/relationships/officeDocument"})
WORD_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
_DETECT_MAX_BYTES = 1 * _MB  # [Content_Types].xml and _rels/.rels read to detect a type: a few KB in real files
# No DTDs, entities or network: OOXML never needs them, and an entity is how a small part grows large.
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


@dataclass(frozen=True)
class _ContentTypes:
    defaults: dict[str, str]  # lower-case extension -> content type
    overrides: dict[str, str]  # lower-case part name ("/word/document.xml") -> content type

    def of(self, member: str) -> str | None:
        """The content type of a zip member (a part name without its leading "/"), or None."""
        found = self.overrides.get("/" + member.lower())
        return found if found is not None else self.defaults.get(posixpath.splitext(member)[1][1:].lower())


def is_xml_type(content_type: str | None) -> bool:
    base = (content_type or "").split(";", 1)[0].strip().lower()
    return base.endswith(("/xml", "+xml"))


def main_part_type(data: bytes) -> str | None:
    """The content type of the main part a zip package names (None: not a package, or unreadable).
    Reads only `[Content_Types].xml` and `_rels/.rels`, each at most 1 MiB unpacked: cheap enough for
    type detection at upload."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = {m.filename: m for m in zf.infolist()}
            if any(name not in infos or infos[name].file_size > _DETECT_MAX_BYTES for name in (CONTENT_TYPES, ROOT_RELS)):
                return None
            types = _content_types(zf.read(CONTENT_TYPES))
            main = _main_part(_relationships(zf.read(ROOT_RELS), ""))
            return types.of(main) if main in infos else None
    except (ParseError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, NotImplementedError):
        return None


def check_package(data: bytes, guard: Guard, kind: str = "DOCX") -> None:
    """Refuse a Word package past the limits or not laid out as its reader will walk it (module docstring).
    Reads at most the zip's declared unpacked size, 1 MB at a time."""
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
            names = {m.filename for m in members}
            if CONTENT_TYPES not in names:
                raise ParseError(f"{kind} is malformed: it has no {CONTENT_TYPES} (not an Office package)")
            # The parts read to learn the types are counted before they are parsed...
            first = [m for m in members if m.filename == CONTENT_TYPES or m.filename.endswith(".rels")]
            elements = count_elements(_read_chunks(zf, m, guard) for m in first)
            check_elements(elements, guard, kind)
            types = _content_types(zf.read(CONTENT_TYPES))
            # ...then every other part typed as XML, or named like it, whatever its name or extension.
            counted = {id(m) for m in first}
            rest = [m for m in members
                    if id(m) not in counted and (is_xml_type(types.of(m.filename)) or m.filename.endswith(".xml"))]
            for m in rest:
                elements += count_elements([_read_chunks(zf, m, guard)])
                check_elements(elements, guard, kind)
            _check_relationships(zf, names, types, kind)
    except ParseError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
        raise ParseError(f"{kind} is malformed: {exc or type(exc).__name__}") from None


def _check_relationships(zf: zipfile.ZipFile, names: set[str], types: _ContentTypes, kind: str) -> None:
    """Walk the relationship graph from the package root (python-docx's order): every internal target
    exists and has a content type; the root's officeDocument target is a Word main document."""
    if ROOT_RELS not in names:
        raise ParseError(f"{kind} is malformed: it has no {ROOT_RELS} (not an Office package)")
    main = _main_part(_relationships(zf.read(ROOT_RELS), ""))
    pending, seen = [(ROOT_RELS, "")], set()
    while pending:
        rels_name, source_dir = pending.pop()
        for target, _ in _relationships(zf.read(rels_name), source_dir):
            if target in seen:
                continue
            seen.add(target)
            if target not in names:
                raise ParseError(f"{kind} is malformed: part {target}, named by {rels_name}, is missing")
            if types.of(target) is None:
                raise ParseError(f"{kind} is malformed: part {target}, named by {rels_name}, has no content type in {CONTENT_TYPES}")
            part_dir, base = posixpath.split(target)
            if (part_rels := posixpath.join(part_dir, "_rels", base + ".rels")) in names:
                pending.append((part_rels, part_dir))
    if (found := types.of(main)) != WORD_MAIN:
        raise ParseError(f"{kind} is malformed: its main part {main} has content type {found!r}, not a Word document's "
                         f"({WORD_MAIN})")


def _content_types(xml: bytes) -> _ContentTypes:
    root = _xml(xml, CONTENT_TYPES)
    defaults: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for el in root:
        tag = etree.QName(el).localname if isinstance(el.tag, str) else ""
        if tag == "Default" and el.get("Extension") is not None:
            defaults[el.get("Extension", "").lower()] = el.get("ContentType", "")
        elif tag == "Override" and el.get("PartName") is not None:
            overrides[el.get("PartName", "").lower()] = el.get("ContentType", "")
    return _ContentTypes(defaults, overrides)


def _relationships(xml: bytes, source_dir: str) -> list[tuple[str, str]]:
    """(zip member name, relationship type) of each internal relationship in a .rels part; targets
    resolved against the source part's folder ("" for the package root), as python-docx resolves them."""
    out = []
    for el in _xml(xml, "relationships"):
        if not isinstance(el.tag, str) or etree.QName(el).localname != "Relationship" or el.get("TargetMode") == "External":
            continue
        target = el.get("Target") or ""
        path = target if target.startswith("/") else posixpath.join("/" + source_dir, target)
        out.append((posixpath.normpath(path).lstrip("/"), el.get("Type") or ""))
    return out


def _main_part(root_relationships: list[tuple[str, str]]) -> str:
    mains = [target for target, kind in root_relationships if kind in OFFICE_DOCUMENT]
    if len(mains) != 1:
        raise ParseError(f"the package names {len(mains)} main parts in {ROOT_RELS}; a document has one")
    return mains[0]


def _xml(data: bytes, what: str):
    try:
        return etree.fromstring(data, parser=_PARSER)
    except etree.XMLSyntaxError as exc:
        raise ParseError(f"{what} of the package is not well-formed XML: {exc}") from None


def _read_chunks(zf: zipfile.ZipFile, member: zipfile.ZipInfo, guard: Guard, size: int = _MB) -> Iterable[bytes]:
    with zf.open(member) as f:
        while chunk := f.read(size):
            guard.tick()
            yield chunk
