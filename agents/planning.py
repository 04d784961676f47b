"""Model-free question planning from metadata facets. Pure: no ORM.

Questions over a news or report corpus name the publishers and dates they mean ("the TechCrunch
report published on October 31, 2023 ... and the Sporting News article on ..."). Given the facet
values the caller's scope holds (the distinct `source` values the `facets` tool shows), `plan`
splits a question into one sub-query per named publisher, each with the clause that publisher
governs and the date window named next to it. Searching each sub-query with a source (and date)
filter and interleaving the hit lists gives every named publisher a share of the context.

Used by the offline provider's research plan and by the evaluation's `facets:<mode>` baseline;
measured effect in docs/evaluation.md.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE = re.compile(rf"\b(?:(on|after|before|since|prior to|by)\s+)?(?:(?:{_MONTHS})\s+\d{{1,2}},\s+\d{{4}})", re.I)
_DATE_PARTS = re.compile(rf"({_MONTHS})\s+(\d{{1,2}}),\s+(\d{{4}})", re.I)
_SEPARATORS = (" | ", " - ", ": ")


@dataclass(frozen=True)
class SubQuery:
    """One search of the plan: text, the source values it is restricted to, and a date window."""

    text: str
    sources: tuple[str, ...] = ()
    published_after: str | None = None  # ISO date, inclusive
    published_before: str | None = None  # ISO date, exclusive


def source_aliases(sources: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Name a question may use -> the stored source values it denotes.

    "The Roar | Sports Writers Blog" is also "The Roar"; "FOX News - Health" and "FOX News -
    Lifestyle" are both "FOX News" (so one alias may denote several values).
    """
    aliases: dict[str, set[str]] = {}
    for source in sources:
        names = {source}
        for sep in _SEPARATORS:
            if sep in source:
                names.add(source.split(sep, 1)[0])
        for name in names:
            if len(name.strip()) >= 3:
                aliases.setdefault(name.strip(), set()).add(source)
    return {name: tuple(sorted(values)) for name, values in aliases.items()}


def find_sources(question: str, aliases: dict[str, tuple[str, ...]]) -> list[tuple[int, int, tuple[str, ...]]]:
    """Publisher mentions as (start, end, source values), in question order, longest alias first.

    Matching ignores case but the mention must start with a capital letter: "The Age" is a
    publisher, "the age of" is not.
    """
    found: list[tuple[int, int, tuple[str, ...]]] = []
    taken: list[tuple[int, int]] = []
    for name in sorted(aliases, key=len, reverse=True):
        for m in re.finditer(rf"(?<![\w]){re.escape(name)}(?![\w])", question, re.I):
            if not m.group(0)[0].isupper() or any(s < m.end() and m.start() < e for s, e in taken):
                continue
            taken.append((m.start(), m.end()))
            found.append((m.start(), m.end(), aliases[name]))
    return sorted(found)


def _iso(month: str, day: str, year: str) -> dt.date:
    return dt.datetime.strptime(f"{month} {day} {year}", "%B %d %Y").date()


def date_window(clause: str) -> tuple[str | None, str | None]:
    """[after, before) from the first date named in a clause: "on D" is that day, "after D" from the next day."""
    m = _DATE.search(clause)
    if not m:
        return None, None
    day = _iso(*_DATE_PARTS.search(m.group(0)).groups())
    word = (m.group(1) or "on").lower()
    if word in ("after", "since"):
        return (day + dt.timedelta(days=1)).isoformat(), None
    if word in ("before", "prior to", "by"):
        return None, day.isoformat()
    return day.isoformat(), (day + dt.timedelta(days=1)).isoformat()


def dated_pieces(text: str) -> list[str]:
    """`text` cut after each date it names (the words before a date describe what was published
    then); the text whole when it names fewer than two."""
    ends = [m.end() for m in _DATE.finditer(text)]
    if len(ends) < 2:
        return [text]
    starts = [0, *ends[:-1]]
    return [text[s:e] for s, e in zip(starts, ends, strict=True)]


def plan(question: str, sources: Sequence[str], *, use_dates: bool = True) -> list[SubQuery]:
    """Sub-queries for a question: one per named publisher (its clause plus the whole question's
    terms), or the question alone when it names none. A publisher named with several dates ("its
    article on October 19 ... and the one on December 3") gets one sub-query per date."""
    aliases = source_aliases(sources)
    mentions = find_sources(question, aliases)
    if not mentions:
        return [SubQuery(question)]
    subs: list[SubQuery] = []
    seen: set[tuple] = set()
    for i, (_start, end, values) in enumerate(mentions):
        clause_start = mentions[i - 1][1] if i else 0
        clause_end = mentions[i + 1][0] if i + 1 < len(mentions) else len(question)
        clause = question[clause_start:clause_end]
        pieces = dated_pieces(question[end:clause_end]) if use_dates else [question[end:clause_end]]
        for piece in pieces:
            after, before = date_window(piece) if use_dates else (None, None)
            if len(pieces) > 1 or len(mentions) > 1:
                # Its own words first, then the question's without the other publishers and dates
                # (they describe other articles; this search is filtered to one publisher).
                text = f"{piece if len(pieces) > 1 else clause} {without_facets(question, sources)}"
            else:
                text = question
            key = (values, after, before, clause if len(pieces) == 1 else piece)
            if key not in seen:
                seen.add(key)
                subs.append(SubQuery(text=text, sources=values, published_after=after, published_before=before))
    return subs


T = TypeVar("T")


def interleave(ranked_lists: Sequence[Sequence[T]], *, k: int, key: Callable[[T], object]) -> list[T]:
    """Round-robin merge without duplicates: rank 1 of every list, then rank 2, ... up to k items."""
    out: list[T] = []
    seen: set[object] = set()
    depth = max((len(r) for r in ranked_lists), default=0)
    for rank in range(depth):
        for ranked in ranked_lists:
            if rank < len(ranked) and key(ranked[rank]) not in seen:
                seen.add(key(ranked[rank]))
                out.append(ranked[rank])
                if len(out) == k:
                    return out
    return out


_NAME = re.compile(r"(?<![\w'’])([A-Z][A-Za-z0-9]*(?:['’][a-z]+)?)")
_SENTENCE_START = re.compile(r"(?:^|[.?!:;\"“(]\s*)$")
_NOT_NAMES = frozenset(_MONTHS.lower().split("|")) | frozenset(
    "i i'm i've monday tuesday wednesday thursday friday saturday sunday".split())


def without_facets(text: str, sources: Iterable[str] = ()) -> str:
    """`text` without the publishers (of `sources`) and the dates it names: those are matched by
    filters on metadata, not by the words of a chunk."""
    spans = [(s, e) for s, e, _ in find_sources(text, source_aliases(sources))] + [m.span() for m in _DATE.finditer(text)]
    out, last = [], 0
    for s, e in sorted(spans):
        if s >= last:
            out.append(text[last:s])
            last = e
    out.append(text[last:])
    return " ".join("".join(out).split())


_SEGMENT_SPLIT = re.compile(r"[,;]|\b(?:and|while|but|despite|whereas|although|whilst)\b", re.I)
# Words that frame a question about documents rather than describe a fact in them.
_FRAME_WORDS = ("article articles report reports reported reporting story stories piece pieces discussed discussing "
                "mentioned featured covered covering published recently respectively individual company person "
                "platform organization entity suggest suggests suggested indicate indicates")


def fact_segments(question: str, sources: Iterable[str] = (), *, min_terms: int = 3) -> list[str]:
    """The question's descriptive segments: cut at commas, semicolons and conjunctions, a piece
    with fewer than `min_terms` content words joined to the next, without the publishers and dates
    it names and not counting words that only frame it ("reported", "article"). A multi-hop question
    describes each fact it needs in one such segment ("threw four touchdowns against the Cowboys,
    ... struggles when under pressure"), which a search of the whole question ranks low."""
    from agents.text import stem, terms

    frame = {stem(w) for w in _FRAME_WORDS.split()}
    out: list[str] = []
    carry = ""
    for piece in _SEGMENT_SPLIT.split(without_facets(question, sources)):
        piece = f"{carry} {piece}".strip(" ?.!'\"") if carry else piece.strip(" ?.!'\"")
        if len(terms(piece) - frame) < min_terms:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry and out and terms(carry) - frame:
        out[-1] = f"{out[-1]} {carry}"
    return out


def fuse(ranked_lists: Sequence[Sequence[T]], *, rrf_k: float, key: Callable[[T], object]) -> list[T]:
    """Reciprocal-rank fusion, best first, without duplicates: an item several lists rank (a
    publisher's own search and the search of the fact it states) comes before one only a single
    list ranks as high."""
    scores: dict[object, float] = {}
    first: dict[object, T] = {}
    for ranked in ranked_lists:
        for rank, item in enumerate(ranked):
            k = key(item)
            scores[k] = scores.get(k, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(k, item)
    order = sorted(scores, key=lambda k: -scores[k])  # stable: ties keep first-seen order
    return [first[k] for k in order]


def named_terms(question: str, sources: Iterable[str] = ()) -> list[str]:
    """Capitalised words inside the question's sentences (names: "Sygic", "Wozniak", "OpenAI"),
    lowercased, without possessives, publisher mentions or month and day names.

    A question about a name that no retrieved text mentions is not answerable from that text,
    however well its other words match: the offline provider's sufficiency check uses this."""
    spans = [(s, e) for s, e, _ in find_sources(question, source_aliases(sources))]
    out: dict[str, None] = {}
    for m in _NAME.finditer(question):
        if _SENTENCE_START.search(question[: m.start()]) or any(s <= m.start() < e for s, e in spans):
            continue
        word = re.split(r"['’]", m.group(1))[0].lower()
        if len(word) > 1 and word not in _NOT_NAMES:
            out.setdefault(word, None)
    return list(out)


def clause_segments(question: str, sources: Sequence[str], *, min_terms: int = 3) -> list[SubQuery]:
    """The question's descriptive segments (`fact_segments`), each with the publisher whose clause
    holds it (from its mention to the next) and the date named there; none unless the question names
    at least two publishers and each clause describes something. "The Polygon report on November 9
    about X, and the Engadget review of Y" asks for X in Polygon's article of that day."""
    mentions = find_sources(question, source_aliases(sources))
    if len(mentions) < 2:
        return []
    out: list[SubQuery] = []
    for i, (start, end, values) in enumerate(mentions):
        clause = question[end: mentions[i + 1][0] if i + 1 < len(mentions) else len(question)]
        if i == 0:
            clause = f"{question[:start]} {clause}"
        after, before = date_window(clause)
        segments = fact_segments(clause, sources, min_terms=min_terms)
        if not segments:
            return []
        out += [SubQuery(seg, values, after, before) for seg in segments]
    return out
