"""Parsed documents -> chunks sized for the embedding model. Pure: no ORM.

A chunk is always an exact slice of the source text (citations are verified against it) and never
longer than `max_tokens` as measured by the caller's `count_tokens` (the embedding model's own
tokenizer). Ingestion uses it twice: for chunks (the unit of context) and, with the model's window
as target and max, to cut a chunk longer than that window into the pieces it is embedded by.

Text is cut into units (sentences, lines; a unit longer than `max_tokens` is cut at words, a word
longer than that at characters). Each unit is counted once and chunks are packed from the sums, so
`count_tokens` runs O(n) times, plus one exact count per chunk that corrects for tokenizers whose
counts are not additive. Coverage contract: every character of the source that is not whitespace
lies in at least one chunk; only whitespace between units may be left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kb.parsing import ParsedDocument, Section

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class ChunkSpan:
    """One chunk: `text == source[char_start:char_end]`; `locator` is what a citation shows."""

    text: str
    char_start: int
    char_end: int
    locator: str
    page: int | None
    token_count: int


@dataclass(slots=True)
class _Unit:
    start: int
    end: int
    tokens: int
    strength: int  # how good a place to end a chunk its end is: 2 paragraph, 1 sentence, 0 other


_PARAGRAPH, _SENTENCE, _OTHER = 2, 1, 0
# A unit may end after terminal punctuation (plus closing quotes/brackets) followed by whitespace,
# after CJK terminal punctuation, or at any line break.
_CUT = re.compile(r"""[.!?\u2026]+["'\u201d\u2019\u00bb)\]]*(?=\s)|[\u3002\uff01\uff1f]+|\n""")
_SENTENCE_END = re.compile(r"""(?:[.!?\u2026]+["'\u201d\u2019\u00bb)\]]*|[\u3002\uff01\uff1f]+)$""")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_WORD = re.compile(r"\S+")
_BOUNDARY_WINDOW = 0.6  # a chunk may end early at a better boundary once it holds this share of the target


def chunk_document(
    doc: ParsedDocument,
    *,
    target_tokens: int = 200,
    overlap_tokens: int = 30,
    max_tokens: int = 256,
    count_tokens: CountTokens,
) -> list[ChunkSpan]:
    """Chunks of a parsed document, in order. A section that fits `target_tokens` is one chunk; longer
    ones are split as by `chunk_text`. Chunks never cross sections, so never cross PDF pages."""
    _check_sizes(target_tokens, overlap_tokens, max_tokens)
    text = doc.text
    chunks: list[ChunkSpan] = []
    for start, section in _section_groups(doc):
        locator = _locator(section)
        for s, e, tokens in _chunk_spans(text, start, section.char_end, target_tokens, overlap_tokens, max_tokens, count_tokens):
            chunks.append(ChunkSpan(text[s:e], s, e, locator, section.page, tokens))
    return chunks


def chunk_text(text: str, *, target_tokens: int = 200, overlap_tokens: int = 30, max_tokens: int = 256,
               count_tokens: CountTokens) -> list[tuple[int, int]]:
    """(start, end) spans over `text`, strictly increasing in start and end, each <= `max_tokens`.

    Chunks are packed up to `target_tokens`, end preferably at a paragraph or sentence end, and
    repeat up to `overlap_tokens` of the previous chunk's tail (whole sentences when they fit,
    else trailing words of the last one).
    """
    _check_sizes(target_tokens, overlap_tokens, max_tokens)
    spans = _chunk_spans(text, 0, len(text), target_tokens, overlap_tokens, max_tokens, count_tokens)
    return [(s, e) for s, e, _ in spans]


def _chunk_spans(
    text: str, lo: int, hi: int, target_tokens: int, overlap_tokens: int, max_tokens: int, count_tokens: CountTokens
) -> list[tuple[int, int, int]]:
    """(start, end, exact token count) of the chunks of text[lo:hi]; offsets are into `text`."""
    overhead = max(0, count_tokens(""))  # special tokens ([CLS]/[SEP]) the counter adds to every call
    counter = _Counter(count_tokens, overhead)
    units = _units(text, lo, hi, counter, max_tokens - overhead, max(1, target_tokens - overlap_tokens))
    spans: list[tuple[int, int, int]] = []
    first = 0  # first unit of the chunk being built
    fresh = 0  # first unit not yet in any chunk; units[first:fresh] is the overlap
    while fresh < len(units):
        first = _fit_overlap(units, first, fresh, target_tokens)
        end = _pack(units, first, fresh, target_tokens)
        first, end, tokens = _enforce_max(text, units, first, fresh, end, counter, max_tokens)
        spans.append((units[first].start, units[end - 1].end, tokens))
        fresh = end
        if fresh < len(units):
            first, fresh = _overlap_start(text, units, first, end, overlap_tokens, counter)
    return spans


# ---------------------------------------------------------------------------------------------
# Units


class _Counter:
    """`count_tokens` minus the constant per-call overhead, so sums of pieces approximate the whole."""

    def __init__(self, count_tokens: CountTokens, overhead: int) -> None:
        self.exact = count_tokens
        self.overhead = overhead

    def __call__(self, text: str) -> int:
        return max(0, self.exact(text) - self.overhead)


def _units(text: str, lo: int, hi: int, counter: _Counter, max_tokens: int, piece_tokens: int) -> list[_Unit]:
    """Non-whitespace spans between cut points, each counted once; those over `max_tokens` are cut
    into pieces of at most `piece_tokens` (target minus overlap, so a piece plus overlap fits)."""
    cuts = [lo, *(m.end() if m.group() != "\n" else m.start() for m in _CUT.finditer(text, lo, hi)), hi]
    units: list[_Unit] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        start, end = _strip_span(text, a, b)
        if start >= end:
            continue
        if units:  # the gap before this unit tells how strong the previous unit's end is
            _set_strength(text, units[-1], start)
        tokens = counter(text[start:end])
        if tokens > max_tokens:
            units.extend(_split_words(text, start, end, counter, piece_tokens))
        else:
            units.append(_Unit(start, end, tokens, _OTHER))
    if units:
        units[-1].strength = _PARAGRAPH
    return units


def _set_strength(text: str, unit: _Unit, next_start: int) -> None:
    if _BLANK_LINE.search(text, unit.end, next_start):
        unit.strength = _PARAGRAPH
    elif _SENTENCE_END.search(text, max(unit.start, unit.end - 8), unit.end):
        unit.strength = _SENTENCE


def _split_words(text: str, start: int, end: int, counter: _Counter, limit: int) -> list[_Unit]:
    """Cut an oversize unit into pieces of at most `limit` tokens at word, then character, boundaries."""
    pieces: list[_Unit] = []
    for m in _WORD.finditer(text, start, end):
        tokens = counter(m.group())
        if tokens > limit:
            pieces.extend(_split_chars(text, m.start(), m.end(), counter, limit))
        elif pieces and pieces[-1].tokens + tokens <= limit:
            pieces[-1] = _Unit(pieces[-1].start, m.end(), pieces[-1].tokens + tokens, _OTHER)
        else:
            pieces.append(_Unit(m.start(), m.end(), tokens, _OTHER))
    return pieces


def _split_chars(text: str, start: int, end: int, counter: _Counter, limit: int) -> list[_Unit]:
    """Cut a word with no spaces (a URL, base64, CJK run) into the longest prefixes within `limit`."""
    pieces: list[_Unit] = []
    chars_per_limit = max(1, (end - start) * limit // max(1, counter(text[start:end])))
    while start < end:
        guess = min(end - start, chars_per_limit)
        length, tokens = guess, counter(text[start : start + guess])
        while tokens > limit and length > 1:
            length = max(1, length * 3 // 4)
            tokens = counter(text[start : start + length])
        while start + length < end and tokens <= limit:  # grow back if the estimate was too small
            longer = min(end - start, length + max(1, length // 8))
            longer_tokens = counter(text[start : start + longer])
            if longer_tokens > limit:
                break
            length, tokens = longer, longer_tokens
        if tokens > limit:
            raise ValueError(f"max_tokens={limit} is too small: the single character {text[start]!r} counts {tokens} tokens")
        pieces.append(_Unit(start, start + length, tokens, _OTHER))
        start += length
    return pieces


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# ---------------------------------------------------------------------------------------------
# Packing


def _fit_overlap(units: list[_Unit], first: int, fresh: int, target: int) -> int:
    """Drop overlap units from the front until the overlap plus the first new unit fits the target."""
    overlap = sum(u.tokens for u in units[first:fresh])
    while first < fresh and overlap + units[fresh].tokens > target:
        overlap -= units[first].tokens
        first += 1
    return first


def _pack(units: list[_Unit], first: int, fresh: int, target: int) -> int:
    """End (exclusive unit index) of the chunk: greedy to the target, then back to the best boundary."""
    total = sum(u.tokens for u in units[first:fresh]) + units[fresh].tokens
    end = fresh + 1
    while end < len(units) and total + units[end].tokens <= target:
        total += units[end].tokens
        end += 1
    if end == len(units):
        return end
    best, best_strength, running = end, -1, total
    for k in range(end, fresh, -1):  # candidate chunk units[first:k], latest first
        if running < _BOUNDARY_WINDOW * target:
            break
        if units[k - 1].strength > best_strength:
            best, best_strength = k, units[k - 1].strength
        running -= units[k - 1].tokens
    return best


def _enforce_max(
    text: str, units: list[_Unit], first: int, fresh: int, end: int, counter: _Counter, max_tokens: int
) -> tuple[int, int, int]:
    """Exact count of the chunk; shrink it (fewer units, no overlap, a split unit) until within max."""
    while True:
        tokens = counter.exact(text[units[first].start : units[end - 1].end])
        if tokens <= max_tokens:
            return first, end, tokens
        if end - fresh > 1:
            end -= 1
        elif first < fresh:
            first += 1
        else:
            unit = units[fresh]
            budget = max(1, min(max_tokens - counter.overhead, unit.tokens) // 2)
            pieces = _split_words(text, unit.start, unit.end, counter, budget)
            if len(pieces) < 2:
                pieces = _split_chars(text, unit.start, unit.end, counter, budget)
            if len(pieces) < 2:
                raise ValueError(f"max_tokens={max_tokens} is too small for {text[unit.start : unit.end]!r}")
            units[fresh : fresh + 1] = pieces
            end = fresh + 1


def _overlap_start(text: str, units: list[_Unit], first: int, end: int, overlap_tokens: int, counter: _Counter) -> tuple[int, int]:
    """(first unit, first new unit) of the next chunk. The overlap is whole trailing units within
    `overlap_tokens`, else the last unit's trailing words, split off into a unit of their own. The
    first unit is always > `first`, so chunks move forward."""
    if overlap_tokens <= 0:
        return end, end
    start, total = end, 0
    while start - 1 > first and total + units[start - 1].tokens <= overlap_tokens:
        start -= 1
        total += units[start].tokens
    if start < end:
        return start, end
    last = units[end - 1]
    words = list(_WORD.finditer(text, last.start, last.end))
    cut, total = len(words), 0
    while cut > 1 and total + counter(words[cut - 1].group()) <= overlap_tokens:
        cut -= 1
        total += counter(words[cut].group())
    if cut == len(words):
        return end, end
    split_at = words[cut].start()
    head, tail = _strip_span(text, last.start, split_at), (split_at, last.end)
    units[end - 1 : end] = [
        _Unit(head[0], head[1], counter(text[head[0] : head[1]]), _OTHER),
        _Unit(tail[0], tail[1], counter(text[tail[0] : tail[1]]), last.strength),
    ]
    return end, end + 1


# ---------------------------------------------------------------------------------------------
# Documents


def _section_groups(doc: ParsedDocument) -> list[tuple[int, Section]]:
    """(start, section) pairs; a heading with no body of its own is folded into the subsection that
    follows it, so "Travel policy" alone never becomes a chunk."""
    groups: list[tuple[int, Section]] = []
    pending: int | None = None
    sections = doc.sections or (Section(0, len(doc.text), ()),)
    for i, section in enumerate(sections):
        start = section.char_start if pending is None else pending
        nxt = sections[i + 1] if i + 1 < len(sections) else None
        if nxt is not None and _heading_only(doc.text, section) and _is_child(section, nxt):
            pending = start
            continue
        pending = None
        groups.append((start, section))
    return groups


def _heading_only(text: str, section: Section) -> bool:
    return bool(section.heading_path) and text[section.char_start : section.char_end].strip() == section.heading_path[-1]


def _is_child(parent: Section, child: Section) -> bool:
    n = len(parent.heading_path)
    return parent.page == child.page and len(child.heading_path) > n and child.heading_path[:n] == parent.heading_path


def _locator(section: Section) -> str:
    if section.page is not None:
        return f"p. {section.page}"
    return " > ".join(section.heading_path)


def _check_sizes(target_tokens: int, overlap_tokens: int, max_tokens: int) -> None:
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if not 1 <= target_tokens <= max_tokens:
        raise ValueError(f"target_tokens must be between 1 and max_tokens={max_tokens}, got {target_tokens}")
    if not 0 <= overlap_tokens < target_tokens:
        raise ValueError(f"overlap_tokens must be >= 0 and < target_tokens={target_tokens}, got {overlap_tokens}")
