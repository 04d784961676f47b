"""The one sentence splitter for document text: spans that are exact slices of the text.

`split(text)` returns the sentences of `text` as (start, end, heading) spans: `text[start:end]` is a
sentence exactly as written (only surrounding whitespace and a list item's bullet are left out), so a
quoted sentence never changes a character, and above all never a figure. Used by
`kb.sentences.sentence_spans` (sentence vectors at ingest) and `agents.lexical.sentences` (the
sentences the offline provider quotes and the sufficiency check reads).

Blocks first: a blank line, a list item ("- ", "* ", "+ ", "• ", "1. ", "12) ") and a Markdown heading
line ("# ...") each start a new block, and a heading is a block of its own (its span has `heading`
set). Single line breaks inside a block are hard wraps: a sentence may run across them.

Within a block, a sentence ends after . ! ? … (or a run of them; closing quotes and brackets may
follow) when whitespace and then the start of a sentence follow: a capital letter of any script
(À-Ý, Ä, Ω, Д ...), a letter of a script without case (CJK, Arabic ...) or a digit, possibly after an
opening quote or bracket or ¿ ¡. The CJK full stops 。！？ need no whitespace after them. So the rule
never cuts inside a token (no whitespace, no cut): decimals "4.50", thousands "1,000.5", versions
"v2.3.1", times "10.30", dates "3.4.2024", URLs and e-mail addresses stay whole. It does not cut:

- after an abbreviation of `ABBREVIATIONS` ("Dr. Smith", "approx. 30", "vs. Linux");
- after a single letter or dotted letters: initials ("J. R. R. Tolkien", "John F. Kennedy"),
  "e.g.", "i.e.", "U.S.", "z.B.";
- after a number of one or two digits: an ordinal in many languages ("am 3. Mai", "2. Stock");
- after a word of at most four letters when a digit follows ("No. 5", "Art. 12", "Jan. 3", "p. 7"):
  a sentence that ends in such a word and a next one starting with a figure are far rarer than a
  short abbreviation before a number, in any language;
- after an ellipsis a lowercase word continues ("Wait... what"), nor anywhere a lowercase word
  follows ("etc. and more");
- inside a quotation ('He said "Stop. Now." and left.' is one sentence).

When in doubt it joins: two sentences quoted as one are still exact, a cut one is not what the text says.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import NamedTuple

# Abbreviations (lowercase, without the final period) after which a capitalised word continues the
# sentence: titles and reference words of a few languages. A list of abbreviations, not a vocabulary
# of any domain; single letters and dotted letters (e.g., i.e., U.S.) are recognised by shape, and
# short words before a number ("No. 5", "Nr. 5", "p. 7") by length, so neither needs listing.
ABBREVIATIONS = frozenset("""
dr dra drs mr mrs ms mme mlle messrs prof profs sr sra srta jr st vs cf vgl approx ca env bzw resp
""".split())

_CJK_STOPS = "。！？"
# Terminal marks (a run: "?!", "..."), then closing quotes and brackets, then whitespace.
_CANDIDATE = re.compile(r"([.!?…‼⁇⁈⁉؟।॥]+|[。！？]+)([\"'”’»›)\]」』]*)(\s*)")
_OPENERS = "\"'“‘„«‹([¿¡「『"
_DOTTED_LETTERS = re.compile(r"(?:[^\W\d_]\.)*[^\W\d_]")
_BULLET = re.compile(r"(?:[-*+•]|\d{1,3}[.)])\s+")  # "2024. " starts no list item
_LIST_OR_HEADING = re.compile(r"[ \t]*(?:[-*+•]|\d{1,3}[.)]|#+)\s")
# Quotation marks whose role is read from their position: an opener follows whitespace (or an opening
# bracket) and precedes a non-space; a closer follows a non-space. Single quotes are apostrophes too: not tracked.
_QUOTE_MARKS = "\"“”„«»「」『』"
_QUOTE_MARK = re.compile(f"[{_QUOTE_MARKS}]")
_ALWAYS_OPEN = "„«「『"  # « » as in French, with or without spaces inside
_ALWAYS_CLOSE = "»」』"


class Span(NamedTuple):
    start: int
    end: int
    heading: bool = False  # a Markdown heading line, kept whole


def split(text: str) -> list[Span]:
    """The sentences of `text` in order, as spans (see the module docstring for the rule).

    Every `text[start:end]` is non-empty, starts and ends with a non-space character and is an exact
    slice; spans do not overlap. A list item's bullet is outside its first sentence's span."""
    out: list[Span] = []
    for start, end, heading in _blocks(text):
        if heading:
            out.append(Span(start, end, True))
            continue
        bullet = _BULLET.match(text, start, end)
        if bullet and bullet.end() < end:
            start = bullet.end()
        out.extend(Span(s, e) for s, e in _sentences_of_block(text, start, end))
    return out


def _blocks(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, heading) of each non-empty block, stripped of surrounding whitespace."""
    blocks: list[tuple[int, int, bool]] = []
    cur_start: int | None = None
    cur_end = 0

    def close() -> None:
        nonlocal cur_start
        if cur_start is not None:
            blocks.append((cur_start, cur_end, False))
        cur_start = None

    pos = 0
    for line in text.splitlines(keepends=True):
        line_start, pos = pos, pos + len(line)
        body = line.strip()
        if not body:
            close()
            continue
        s = line_start + (len(line) - len(line.lstrip()))
        e = line_start + len(line.rstrip())
        if body.startswith("#") and _LIST_OR_HEADING.match(line + " "):
            close()
            blocks.append((s, e, True))
            continue
        if _LIST_OR_HEADING.match(line):
            close()
        if cur_start is None:
            cur_start = s
        cur_end = e
    close()
    return blocks


def _starts_sentence(ch: str) -> bool:
    return ch.isdigit() or (ch.isalpha() and not ch.islower())


def _quoted_regions(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """(open, close) positions of the outermost quotations in text[start:end], in order; unclosed
    ones are not quotations."""
    regions: list[tuple[int, int]] = []
    stack: list[int] = []
    for m in _QUOTE_MARK.finditer(text, start, end):
        i, ch = m.start(), m.group()
        before = text[i - 1] if i > start else " "
        after = text[i + 1] if i + 1 < end else " "
        opens = ch in _ALWAYS_OPEN or (ch not in _ALWAYS_CLOSE and (before.isspace() or before in _OPENERS)
                                       and not after.isspace())
        if opens:
            stack.append(i)
        elif stack and (ch in _ALWAYS_CLOSE or not before.isspace()):
            opened = stack.pop()
            while regions and regions[-1][0] > opened:  # a quotation nested in this one
                regions.pop()
            regions.append((opened, i))
    return regions


def _sentences_of_block(text: str, start: int, end: int) -> list[tuple[int, int]]:
    regions = _quoted_regions(text, start, end)
    spans: list[tuple[int, int]] = []
    s = start
    for m in _CANDIDATE.finditer(text, start, end):
        marks, closers, space = m.group(1), m.group(2), m.group(3)
        nxt = m.end()
        if nxt >= end or not (space or marks[-1] in _CJK_STOPS):
            continue
        first = nxt
        while first < end - 1 and text[first] in _OPENERS:
            first += 1
        if not (_starts_sentence(text[first]) or marks[-1] in _CJK_STOPS):
            continue
        stop = m.start(1) + len(marks) + len(closers)
        at = bisect_left(regions, (stop, stop)) - 1
        if at >= 0 and regions[at][0] < stop <= regions[at][1]:
            continue
        if marks == "." and not closers and _continues_after_period(text, s, m.start(), text[first]):
            continue
        spans.append((s, stop))
        s = nxt
    spans.append((s, end))
    return [(a, b) for a, b in spans if b > a]


def _continues_after_period(text: str, sentence_start: int, period: int, following: str) -> bool:
    """Whether the single period at `period` belongs to an abbreviation or an initial, not a sentence end."""
    word_start = period
    while word_start > sentence_start and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:period].lstrip(_OPENERS)
    if not word:
        return False
    if word.lower() in ABBREVIATIONS or _DOTTED_LETTERS.fullmatch(word) or (word.isdigit() and len(word) <= 2):
        return True
    return following.isdigit() and len(word) <= 4 and word.isalpha()
