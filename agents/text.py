"""Pure text helpers for the offline provider and citation checks: terms, sentences, question parts.

Deliberately simple and deterministic (no model): a crude suffix stemmer and a stopword list are
enough to tell whether retrieved text mentions what a question asks about.
"""

from __future__ import annotations

import re
import unicodedata

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other
our ours ourselves out over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while who whom why will
with would you your yours yourself yourselves also may might must shall get gets got per via etc within without
whether versus vs compare compared comparison difference differ between according tell explain describe please
apply applies applied exactly does anything something much many kind one two use used using way ways need needs
""".split())

_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
_SUFFIXES = ("ing", "ed", "es", "s", "e")


def stem(word: str) -> str:
    word = word.replace("’", "'").split("'")[0]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in _SUFFIXES:
        if len(word) - len(suffix) >= (3 if suffix == "s" else 4) and word.endswith(suffix) and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "aeiou0123456789":
        word = word[:-1]  # travelling/travel, billing/bill
    return word


def terms(text: str) -> set[str]:
    """Content terms of `text`: lowercased, stopwords and 1-2 letter words dropped, stemmed."""
    return {stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 2}


def ordered_terms(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for w in _WORD.findall(text.lower()):
        if w not in STOPWORDS and len(w) > 2:
            seen.setdefault(stem(w), None)
    return list(seen)


def coverage(part_terms: set[str], text_terms: set[str]) -> float:
    return len(part_terms & text_terms) / len(part_terms) if part_terms else 1.0


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n+")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|#+)\s*")


def sentences(text: str) -> list[str]:
    """Sentences and list items of a chunk, markup stripped, each an exact substring of `text`."""
    out = []
    for piece in _SENTENCE_END.split(text):
        piece = _BULLET.sub("", piece).strip()
        if len(piece) >= 12 and re.search(r"[A-Za-z]{3}", piece):
            out.append(piece)
    return out


def normalise(text: str) -> str:
    """For quote matching: casefolded, typographic quotes and dashes unified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text)
    text = text.translate(str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "–": "-", "—": "-", "\u00a0": " "}))
    text = re.sub(r"[*_`]", "", text)
    return re.sub(r"\s+", " ", text).strip().casefold()


# --- Splitting a question into parts ---------------------------------------------------------------
_CLAUSE_SPLIT = re.compile(
    r"(\s*[,;]?\s+\b(?:and also|and then|and|while|whereas|but|or|as well as|plus|also)\b\s+|\s*;\s*)", re.IGNORECASE
)
_BETWEEN = re.compile(r"\b(?:difference|differences|compare|comparison)\b.*?\bbetween\s+(.+?)\s+and\s+(.+?)(?:[?.!]|$)", re.I)
_VERSUS = re.compile(r"(.+?)\s+(?:versus|vs\.?|compared (?:to|with))\s+(.+?)(?:[?.!]|$)", re.I)
MAX_PARTS = 4


def split_question(question: str) -> list[str]:
    """The parts a complete answer must cover: sentences, clauses joined by and/while/or/but,
    and both sides of a comparison. A clause with fewer than two content terms stays attached
    to its neighbour ("travel and expense policy" is one part). At most MAX_PARTS parts."""
    parts: list[str] = []
    for sentence in re.split(r"(?<=[?!.])\s+|\n+", question.strip()):
        sentence = sentence.strip(" ?!.")
        if not sentence:
            continue
        compared = _comparison_parts(sentence)
        if compared:
            parts.extend(compared)
            continue
        parts.extend(_clauses(sentence))
    unique: list[str] = []
    for p in parts:
        if p and terms(p) and all(terms(p) != terms(u) for u in unique):
            unique.append(p)
    if len(unique) > MAX_PARTS:
        unique = unique[: MAX_PARTS - 1] + [" ".join(unique[MAX_PARTS - 1:])]
    return unique or [question.strip()]


def _comparison_parts(sentence: str) -> list[str]:
    m = _BETWEEN.search(sentence) or _VERSUS.search(sentence)
    if not m:
        return []
    left, right = m.group(1).strip(), m.group(2).strip()
    topic = sentence[: m.start()].strip() if m.re is _BETWEEN else ""
    topic_terms = " ".join(ordered_terms(topic))
    return [f"{left} {topic_terms}".strip(), f"{right} {topic_terms}".strip()]


def _clauses(sentence: str) -> list[str]:
    tokens = _CLAUSE_SPLIT.split(sentence)  # [clause, separator, clause, separator, ...]
    merged: list[str] = []
    for i in range(0, len(tokens), 2):
        piece = tokens[i].strip(" ,")
        if not piece:
            continue
        if merged and (len(terms(piece)) < 2 or len(terms(merged[-1])) < 2):
            merged[-1] = f"{merged[-1]}{tokens[i - 1]}{piece}"
        else:
            merged.append(piece)
    return merged
