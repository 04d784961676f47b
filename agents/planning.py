"""The question planner: question + the facets of the caller's scope -> sub-queries. Pure: no ORM.

A question often names things its documents are labelled with: a value of an enumeration key of
their metadata (a department, a product, a source, a category...) or a date ("the report of October
31, 2023", "the policy effective after 2024-01-01"). The scope's `Facets` (what the `facets` tool
shows: enumeration values per metadata key, and whether documents carry a date) let the planner
turn each such mention into a narrowing filter on its sub-query:

    "What did Acme Insurance say on March 3, 2024 about X, and how did the Legal team answer?"
    -> "... about X" narrowed to {"source": ["Acme Insurance"]} dated [2024-03-03, 2024-03-04)
    -> "... how did the Legal team answer" narrowed to {"department": ["Legal"]}

A question that names no facet value is split into its parts (clauses, list items, several
questions, both sides of a comparison), one sub-query each. Nothing here knows a dataset: which
keys are enumerations and which key is "the date" come from the corpus (kb.models.Corpus
`facet_keys`, `date_key`) or from the data itself (kb.metadata.scope_facets).

`Planner` is the interface the strategies use; `GeneralPlanner` is the default.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, TypeVar

from agents.languages import month_numbers, weekday_names
from agents.lexical import UPPER, split_question, terms
from kb.fusion import rrf_scores

# Month names of every language a corpus may be declared in (agents.languages: from Django's
# translations; the scope's language does not reach the planner, so a date is read in any of them).
# A named day is "October 31, 2023" or "31 October 2023" / "31. Oktober 2023" / "31 de octubre de
# 2023" (a word of at most three letters on both sides of the month). The words that
# relate a date to the question ("before", "after") are read in English only: a date in another
# language narrows to its day.
_MONTH_NUMBERS = month_numbers()
_MONTHS = "|".join(re.escape(m).replace(r"\ ", r"\s+") for m in sorted(_MONTH_NUMBERS, key=len, reverse=True))
_LINK = r"[^\W\d_]{1,3}\s+"
_NAMED = (rf"(?P<m1>{_MONTHS})\s+(?P<d1>\d{{1,2}}),\s+(?P<y1>\d{{4}})"
          rf"|(?P<d2>\d{{1,2}})\.?\s+(?P<m2>{_MONTHS})\s+(?P<y2>\d{{4}})"
          rf"|(?P<d3>\d{{1,2}})\s+{_LINK}(?P<m3>{_MONTHS})\s+{_LINK}(?P<y3>\d{{4}})")
_DATE = re.compile(rf"\b(?:(on|after|before|since|prior to|by|from|until)\s+)?"
                   rf"(?:{_NAMED}|\d{{4}}-\d{{2}}-\d{{2}})\b", re.I)
_NAMED_DAY = re.compile(_NAMED, re.I)
_YEAR = re.compile(r"\d{4}")  # every date names one: texts without are not searched for dates
_ISO_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_SEPARATORS = (" | ", " - ", ": ")
MAX_FACT_QUERIES = 6
FACT_MIN_TERMS = 3  # content words a question segment needs to be searched on its own


@dataclass(frozen=True)
class Facets:
    """What the caller's scope can be narrowed by: enumeration values (with document counts) per
    metadata key, and whether its documents carry a date (and its range)."""

    enumerations: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    dated: bool = False
    earliest: str | None = None
    latest: str | None = None

    @classmethod
    def from_tool(cls, content: Mapping | None) -> Facets:
        """From the `facets` tool's output (kb.metadata.scope_facets): {"enumerations": {key: {value:
        count}}, "dates": {"earliest", "latest"} | None}. Anything malformed is left out."""
        content = content or {}
        enums = content.get("enumerations")
        clean: dict[str, dict[str, int]] = {}
        for key, values in (enums.items() if isinstance(enums, Mapping) else ()):
            if isinstance(key, str) and isinstance(values, Mapping):
                clean[key] = {v: n for v, n in values.items() if isinstance(v, str) and v.strip()}
        dates = content.get("dates")
        dates = dates if isinstance(dates, Mapping) else {}
        return cls(clean, bool(dates), dates.get("earliest"), dates.get("latest"))

    @classmethod
    def from_summary(cls, summary: Mapping | None) -> Facets:
        """From what `summary` gives a prompt ({"narrow_by": {key: [value, ...]}, "dates": ...}): the
        values without their counts (0). Anything malformed is left out."""
        summary = summary or {}
        narrow_by = summary.get("narrow_by")
        enums = {k: {v: 0 for v in values if isinstance(v, str)}
                 for k, values in (narrow_by.items() if isinstance(narrow_by, Mapping) else ()) if isinstance(values, list)}
        return cls.from_tool({"enumerations": enums, "dates": summary.get("dates")})

    def values(self) -> list[str]:
        return [v for values in self.enumerations.values() for v in values]

    def summary(self) -> dict:
        """For a prompt: the values to narrow by, per key, and the date range."""
        out: dict = {"narrow_by": {k: list(v) for k, v in self.enumerations.items() if v}}
        if self.dated:
            out["dates"] = {"earliest": self.earliest, "latest": self.latest}
        return out


@dataclass(frozen=True)
class SubQuery:
    """One search of a plan: its text, the metadata values it is narrowed to, and a date window."""

    text: str
    narrow: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (metadata key, any of these values)
    date_after: str | None = None  # ISO date, inclusive
    date_before: str | None = None  # ISO date, exclusive

    def filters(self) -> dict | None:
        """The search tool's narrowing arguments, None when the sub-query is not narrowed."""
        out: dict = {}
        if self.narrow:
            out["metadata"] = {key: list(values) for key, values in self.narrow}
        if self.date_after:
            out["date_after"] = self.date_after
        if self.date_before:
            out["date_before"] = self.date_before
        return out or None


@dataclass(frozen=True)
class DocumentRequest:
    """A question about documents as wholes rather than a fact in them: "summary" (summarise X, the
    main points of X: answered from summarise_document) or "pages" (which pages or sections talk
    about X, list all ... about X: answered from search_pages). `subject`: what it is about, the
    question without the words that ask for a summary or a list."""

    kind: str  # "summary" | "pages"
    subject: str
    quoted: bool = False  # the subject is a name the question quotes (a document's title, say)


_SUMMARY_ASK = re.compile(r"\b(?:summari[sz]e|summari[sz]ing|summary|sum\s+up|recap|overview|gist|tl;?\s*dr|"
                          r"(?:main|key)\s+(?:points?|ideas?|takeaways?))\b", re.I)
_PAGES_ASK = re.compile(r"\b(?:(?:which|what)\s+(?:pages?|sections?|chapters?)|on\s+which\s+pages?|"
                        r"(?:list|name|show|enumerate)\s+(?:all|every|each)|all\s+(?:the\s+)?(?:pages?|sections?|chapters?))\b", re.I)
_FRAMING = re.compile(r"\b(?:please|can\s+you|could\s+you|give\s+me|me|a|an|the\s+document|document|of|in|what\s+are|"
                      r"what\s+is|briefly|short|brief)\b", re.I)

_PAGES_FRAMING = re.compile(r"\b(?:(?:the|its)\s+)?(?:pages?|sections?|chapters?)\b|\b(?:that|which|where)\b|"
                            r"\b(?:talk|speak|mention|cover|discuss|explain|describe|say|deal|refer)s?(?:\s+(?:about|with|to))?\b",
                            re.I)

# A name in quotes: opened after a space, closed before one or the end (an apostrophe inside a word, as in
# "What's", neither opens nor closes it).
_QUOTED = re.compile(r"(?<!\w)([\"“'‘])(.+?)[\"”'’](?!\w)")


def document_request(question: str) -> DocumentRequest | None:
    """The DocumentRequest a question makes, or None for a question about facts. Wording only: no
    dataset's titles or terms. A summary asked about one thing is a summary; asking where something
    is said, or for every mention of it, is a pages request."""
    quoted = _QUOTED.search(question)
    # Several parts (outside a quoted name): each is a fact to find (the planner's sub-queries).
    if len(split_question(_QUOTED.sub(" it ", question))) > 1:
        return None
    for kind, pattern in (("summary", _SUMMARY_ASK), ("pages", _PAGES_ASK)):
        if m := pattern.search(_QUOTED.sub(lambda q: " " * len(q.group(0)), question)):
            if kind == "summary" and quoted is not None and terms(quoted.group(2)):
                return DocumentRequest(kind, " ".join(quoted.group(2).split()), quoted=True)
            rest = question[: m.start()] + " " + question[m.end():]
            rest = (_FRAMING if kind == "summary" else _PAGES_FRAMING).sub(" ", rest)
            subject = " ".join(rest.replace("'", " ").replace('"', " ").split()).strip(" ?.!:,;")
            if terms(subject):
                return DocumentRequest(kind, subject)
    return None


def pick_document(subject: str, ranked: Sequence[tuple[int, str]]) -> int | None:
    """The document a request about `subject` means among ranked (document id, title) pairs (a
    page search's, best first): the one whose title holds the largest share of the subject's words
    when some title holds at least half of them (of two that hold as many, the one with fewer other
    words: "Guide > Setup" over "Guide > Setup > Network" for "Guide > Setup"), else the best-ranked."""
    if not ranked:
        return None
    wanted = terms(subject)
    titles = dict(reversed(ranked))  # first (best-ranked) title per document
    order = list(dict.fromkeys(doc for doc, _ in ranked))
    if wanted:
        def fit(doc: int) -> tuple[float, float]:
            own = terms(titles[doc])
            return len(wanted & own) / len(wanted), len(wanted & own) / max(len(own), 1)
        best = max(order, key=fit)  # max keeps the first of equals: the better-ranked
        if fit(best)[0] >= 0.5:
            return best
    return order[0]


class Planner(Protocol):
    def plan(self, question: str, facets: Facets) -> list[SubQuery]:
        """Sub-queries that together cover every part of `question`, narrowed where it names facet values."""
        ...


@dataclass(frozen=True, slots=True)
class Mention:
    """A facet value named in a text: its span, its metadata key and the stored values it denotes."""

    start: int
    end: int
    key: str
    values: tuple[str, ...]


def value_aliases(values: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Name a text may use -> the stored values it denotes: a value, and its head before a separator
    ("Acme | Claims desk" is also "Acme"; "Acme - East" and "Acme - West" are both "Acme")."""
    aliases: dict[str, set[str]] = {}
    for value in values:
        names = {value}
        for sep in _SEPARATORS:
            if sep in value:
                names.add(value.split(sep, 1)[0])
        for name in names:
            if len(name.strip()) >= 3:
                aliases.setdefault(name.strip(), set()).add(value)
    return {name: tuple(sorted(v)) for name, v in aliases.items()}


_NamePattern = tuple[str, str, str, tuple[str, ...], re.Pattern[str]]


@lru_cache(maxsize=256)
def _mention_patterns(enumerations: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[_NamePattern, ...]:
    """(name, lowercased when ASCII, key, stored values, pattern) of every name of the facet values, longest first.
    Built once per set of facets: planning and sufficiency look for mentions in every part and
    sentence they read."""
    names = [(name, key, vals) for key, values in enumerations for name, vals in value_aliases(values).items()]
    return tuple((name, name.lower() if name.isascii() else "", key, vals, re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])", re.I))
                 for name, key, vals in sorted(names, key=lambda n: -len(n[0])))


def find_mentions(text: str, facets: Facets) -> list[Mention]:
    """Facet values named in `text`, in text order, longest name first when two overlap.

    Matching ignores case but a mention must start with a capital letter ("The Age" names a value,
    "the age of" does not); a value stored in lowercase is not named by a sentence's first word
    ("Travel costs..." does not narrow to a category "travel")."""
    found: list[Mention] = []
    taken: list[tuple[int, int]] = []
    # Between ASCII strings ignoring case is comparing lowercase: a name absent so cannot match (most
    # values are named in no text). Elsewhere re's case rules are wider ("İ" matches "I"): no shortcut.
    lowered = text.lower() if text.isascii() else None
    for name, ascii_lower, key, vals, pattern in _mention_patterns(tuple((k, tuple(v)) for k, v in facets.enumerations.items())):
        if lowered is not None and ascii_lower and ascii_lower not in lowered:
            continue
        for m in pattern.finditer(text):
            if not m.group(0)[0].isupper() or any(s < m.end() and m.start() < e for s, e in taken):
                continue
            if name[0].islower() and _SENTENCE_START.search(text[: m.start()]):
                continue  # a lowercase value ("travel") capitalised only because a sentence starts with it
            taken.append((m.start(), m.end()))
            found.append(Mention(m.start(), m.end(), key, vals))
    return sorted(found, key=lambda m: m.start)


def _day(match: str) -> dt.date:
    if m := _ISO_DAY.search(match):
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    named = _NAMED_DAY.search(match)
    if named is None:
        raise ValueError(f"not a date: {match!r}")
    form = next(i for i in "123" if named.group(f"m{i}"))
    month = _MONTH_NUMBERS.get(" ".join(named.group(f"m{form}").split()).casefold())
    if month is None:  # matched ignoring case but casefolded otherwise (Turkish dotless i)
        raise ValueError(f"not a month: {named.group(f'm{form}')!r}")
    return dt.date(int(named.group(f"y{form}")), month, int(named.group(f"d{form}")))


def _dates(text: str) -> list[re.Match[str]]:
    return list(_DATE.finditer(text)) if _YEAR.search(text) else []


def date_window(clause: str) -> tuple[str | None, str | None]:
    """[after, before) from the first date named in a clause: "on D" is that day, "after D" from the
    next day, "before D" up to it."""
    for m in _dates(clause):
        try:
            day = _day(m.group(0))
        except ValueError:  # "2023-02-31"
            continue
        word = (m.group(1) or "on").lower()
        if word in ("after", "since", "from"):
            return (day + dt.timedelta(days=1) if word == "after" else day).isoformat(), None
        if word in ("before", "prior to", "by", "until"):
            return None, day.isoformat()
        return day.isoformat(), (day + dt.timedelta(days=1)).isoformat()
    return None, None


def dated_pieces(text: str) -> list[str]:
    """`text` cut after each date it names; the text whole when it names fewer than two."""
    ends = [m.end() for m in _dates(text)]
    if len(ends) < 2:
        return [text]
    starts = [0, *ends[:-1]]
    return [text[s:e] for s, e in zip(starts, ends, strict=True)]


def without_facets(text: str, values: Iterable[str] = ()) -> str:
    """`text` without the facet values and dates it names: filters on metadata match those, not the
    words of a chunk."""
    facets = Facets({"": {v: 1 for v in values}})
    spans = [(m.start, m.end) for m in find_mentions(text, facets)] + [m.span() for m in _dates(text)]
    out, last = [], 0
    for s, e in sorted(spans):
        if s >= last:
            out.append(text[last:s])
            last = e
    out.append(text[last:])
    return " ".join("".join(out).split())


class GeneralPlanner:
    """The default planner (see the module docstring). Per facet value the question names: one
    sub-query with the clause that value governs (and the date named there), then one per fact the
    question describes, narrowed to the values it names; with none named, one sub-query per part."""

    def plan(self, question: str, facets: Facets) -> list[SubQuery]:
        mentions = find_mentions(question, facets)
        if not mentions:
            parts = split_question(question)
            return [SubQuery(p) for p in parts] if len(parts) > 1 else [SubQuery(question)]
        subs = self.mention_queries(question, mentions, facets)
        subs += clause_facts(question, mentions, facets)[:MAX_FACT_QUERIES]
        narrow = _merged_narrowing(mentions)
        segments = fact_segments(question, facets.values())
        if len(segments) > 1:
            subs += [SubQuery(seg, narrow) for seg in segments[:MAX_FACT_QUERIES]]
        return _unique(subs)

    @staticmethod
    def mention_queries(question: str, mentions: list[Mention], facets: Facets) -> list[SubQuery]:
        """One sub-query per mention (per date, when one value is named with several), narrowed to it."""
        subs: list[SubQuery] = []
        for i, mention in enumerate(mentions):
            clause_start = mentions[i - 1].end if i else 0
            clause_end = mentions[i + 1].start if i + 1 < len(mentions) else len(question)
            clause = question[clause_start:clause_end]
            pieces = dated_pieces(question[mention.end:clause_end]) if facets.dated else [question[mention.end:clause_end]]
            for piece in pieces:
                after, before = date_window(piece) if facets.dated else (None, None)
                if len(pieces) > 1 or len(mentions) > 1:
                    # Its own words first, then the question's without the other values and dates
                    # (they describe other documents; this search is narrowed to one value).
                    text = f"{piece if len(pieces) > 1 else clause} {without_facets(question, facets.values())}"
                else:
                    text = question
                subs.append(SubQuery(text, ((mention.key, mention.values),), after, before))
        return subs


def _merged_narrowing(mentions: list[Mention]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every value named, under the key named most (two keys at once would require both)."""
    by_key: dict[str, set[str]] = {}
    for m in mentions:
        by_key.setdefault(m.key, set()).update(m.values)
    key = max(by_key, key=lambda k: sum(1 for m in mentions if m.key == k))
    return ((key, tuple(sorted(by_key[key]))),)


def _unique(subs: list[SubQuery]) -> list[SubQuery]:
    return list(dict.fromkeys(subs))


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


def fuse(ranked_lists: Sequence[Sequence[T]], *, rrf_k: float, key: Callable[[T], object]) -> list[T]:
    """Reciprocal-rank fusion (kb.fusion), best first, without duplicates: an item several lists rank
    comes before one only a single list ranks as high; ties keep first-seen order."""
    first: dict[object, T] = {}
    for ranked in ranked_lists:
        for item in ranked:
            first.setdefault(key(item), item)
    scores = rrf_scores((([key(item) for item in ranked], 1.0) for ranked in ranked_lists), rrf_k=rrf_k)
    order = sorted(first, key=lambda k: -scores[k])
    return [first[k] for k in order]


_SEGMENT_SPLIT = re.compile(r"[,;]|\b(?:and|while|but|despite|whereas|although|whilst)\b", re.I)


def fact_segments(question: str, values: Iterable[str] = (), *, min_terms: int = FACT_MIN_TERMS) -> list[str]:
    """The question's descriptive segments: cut at commas, semicolons and conjunctions, a piece with
    fewer than `min_terms` content words joined to the next, without the facet values and dates it
    names. A multi-hop question describes each fact it needs in one such segment, which a search of
    the whole question ranks low. Every content word counts: no list of words that "only frame" a
    question is kept (which words frame depends on the corpus's genre: "article" in news, "policy"
    in a handbook)."""
    out: list[str] = []
    carry = ""
    for piece in _SEGMENT_SPLIT.split(without_facets(question, values)):
        piece = f"{carry} {piece}".strip(" ?.!'\"") if carry else piece.strip(" ?.!'\"")
        if len(terms(piece)) < min_terms:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry and out and terms(carry):
        out[-1] = f"{out[-1]} {carry}"
    return out


def clause_facts(question: str, mentions: list[Mention], facets: Facets) -> list[SubQuery]:
    """The descriptive segments of each mention's clause (from it to the next), narrowed to it and
    dated like it; none unless at least two values are named and each clause describes something.
    "The Polygon review of November 9 about X, and the Engadget one about Y" asks for X in the first."""
    if len(mentions) < 2:
        return []
    out: list[SubQuery] = []
    for i, mention in enumerate(mentions):
        clause = question[mention.end: mentions[i + 1].start if i + 1 < len(mentions) else len(question)]
        if i == 0:
            clause = f"{question[:mention.start]} {clause}"
        after, before = date_window(clause) if facets.dated else (None, None)
        segments = fact_segments(clause, facets.values())
        if not segments:
            return []
        out += [SubQuery(seg, ((mention.key, mention.values),), after, before) for seg in segments]
    return out


_NAME = re.compile(rf"(?<![\w'’])([{UPPER}]\w*(?:['’][^\W\d_]+)?)")
_SENTENCE_START = re.compile(r"(?:^|[.?!:;\"“(]\s*)$")
# Capitalised words that name no one: month and weekday names (of every supported language, see
# agents.languages), the English pronoun I.
NOT_NAMES = frozenset(_MONTH_NUMBERS) | weekday_names() | frozenset("i i'm i've".split())


def named_terms(question: str, values: Iterable[str] = ()) -> list[str]:
    """Capitalised words inside the question's sentences (names: "Sygic", "Wozniak", "OpenAI"),
    lowercased, without possessives, facet values or month and day names; a sentence's first word
    is never counted (it is capitalised because it comes first)."""
    spans = [(m.start, m.end) for m in find_mentions(question, Facets({"": {v: 1 for v in values}}))]
    out: dict[str, None] = {}
    for m in _NAME.finditer(question):
        if _SENTENCE_START.search(question[: m.start()]) or any(s <= m.start() < e for s, e in spans):
            continue
        word = re.split(r"['’]", m.group(1))[0].lower()
        if len(word) > 1 and word not in NOT_NAMES:
            out.setdefault(word, None)
    return list(out)
