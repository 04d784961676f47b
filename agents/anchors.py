"""What a question pins down, and whether an answer's evidence mentions it.

A question names the things it is about ("the 16th Annual Young Hollywood Awards", "East
Lempster", "Windows 11") and asks something of them. A passage about a neighbouring thing (the 15th
awards, Lempster, Windows 10) can read as a perfect answer to a relevance model (0.99 for the 15th
awards asked about the 16th) and to word overlap alike, so an answer is only as good as its
evidence's hold on those anchors: every name and identifying figure of the question must occur in
one of the chunks the answer cites (its text, title or metadata), else the documents do not speak
of what was asked and the offline provider declines (agents.providers.offline).

The anchors:
- runs of the question's capitalised words inside its sentences (`agents.planning.named_terms`:
  never a sentence's first word, a month or weekday name, a facet value), each a name whose words
  must all be in one chunk ("East Lempster" is not held by a chunk saying "Lempster" and another
  saying "East"); punctuation or any other word ends a run;
- the figures that identify a thing: an ordinal ("16th"), a year ("1956"), a figure right after a
  name ("Windows 11"). A quantity the asker supplies ("a 3-day trip", "EUR 4.50") is not one, nor
  the unit or currency it is in: the evidence states its rule, not their case.

Not anchors: anything in a statement (it sets the asker's context: "I'm extending a business trip
to Lisbon." and the policy need not name Lisbon); an adjective of origin qualifying a noun or
closing the question ("British singer", "... American?": asked of a thing, not naming it); a
capitalised word right after "what" or "which" (the kind asked for: "what Nationality"). Asked
which of two named things fits ("..., A or B?"), one option held is enough: the answer may show
one has it. A name matches by its words' stems (agents.lexical.terms), a figure as a whole token,
an all-capitals name ("CEO", "HR") also by the initials of consecutive words ("Chief Executive
Officer"). Pure: no database, no model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agents.lexical import STOPWORDS, asked_sentences, choice_options, terms
from agents.planning import named_terms
from agents.sufficiency import SeenChunk

Name = tuple[str, ...]  # the lowercased words of one name, or one figure

_TOKEN = re.compile(r"\w+(?:[.,]\d+)*")
_ASKING = frozenset("what which".split())
_ORIGIN = re.compile(r"^[A-ZÀ-Þ][a-zà-ÿ]+(?:ian|ean|can|ese|ish)$")  # "Italian", "Korean", "American", "Chinese", "British"
_IDENTIFYING = re.compile(r"^(?:\d+(?:st|nd|rd|th)|1[0-9]{3}|20[0-9]{2})$", re.I)  # an ordinal or a year
_ACRONYM = re.compile(r"^[A-Z]{2,6}s?$")
_WORD = re.compile(r"[^\W\d_]+")
_CITED = re.compile(r"\[c:(\d+)\]")
MAX_INITIALS = 6


def names(text: str, values: Iterable[str] = ()) -> list[Name]:
    """The names and figures `text` pins down, in order: runs of its consecutive named words, and its
    tokens holding a digit. A run ends at any other word ("University of Oxford" is two names)."""
    named = set(named_terms(text, values))
    found = list(_TOKEN.finditer(text))
    tokens = [m.group(0) for m in found]
    out: dict[Name, None] = {}
    run: list[str] = []

    def close(i: int) -> None:
        words = tuple(w.lower() for w in run if w.lower() not in STOPWORDS or _ACRONYM.match(w))
        after_asking = i - len(run) > 0 and tokens[i - len(run) - 1].lower() in _ASKING and len(run) == 1
        if words and not after_asking:
            out.setdefault(words, None)
        run.clear()

    for i, token in enumerate(tokens):
        if run and text[found[i - 1].end():found[i].start()].strip():
            close(i)  # punctuation between two words ends a name ("East Lempster, New Hampshire")
        if any(ch.isdigit() for ch in token):
            # "16th", "1956", "Windows 11"; not "3 nights", nor an amount in a unit or currency ("EUR 4.50")
            after_name = bool(run) and not _ACRONYM.match(run[-1])
            if run and _ACRONYM.match(run[-1]):
                run.pop()
            close(i)
            if _IDENTIFYING.match(token) or after_name:
                out.setdefault((token.lower(),), None)
            continue
        if _ACRONYM.match(token) and i > 0 and any(ch.isdigit() for ch in tokens[i - 1]) and \
                not text[found[i - 1].end():found[i].start()].strip():
            close(i)  # a unit or currency after an amount ("4.50 EUR", "16 GB")
            continue
        is_name = token[:1].isupper() and token.lower() in named and not (_ORIGIN.match(token) and _qualifies(tokens, i))
        if is_name:
            run.append(token)
        else:
            close(i)
    close(len(tokens))
    return list(out)


def _qualifies(tokens: list[str], i: int) -> bool:
    """An adjective of origin is read as one when a lowercase word follows it or it ends the text."""
    return i + 1 == len(tokens) or tokens[i + 1][:1].islower()


def requirements(question: str, values: Iterable[str] = ()) -> list[list[list[Name]]]:
    """What an answer's evidence must mention: a list of requirements, each met by any one of its
    alternatives, an alternative being names that must all be held. Every name of the question is
    a requirement of one alternative; the two options of a choice question are one requirement of
    two alternatives (either option's names)."""
    asked = " ".join(asked_sentences(question))
    found = names(asked, values)
    choice = choice_options(asked)
    if choice is None:
        return [[[name]] for name in found]
    option_a, option_b, _asked = choice

    def within(option: str) -> list[Name]:
        words = {w.lower() for w in _TOKEN.findall(option)}
        return [n for n in found if set(n) <= words]

    a, b = within(option_a), within(option_b)
    return [[a, b], *([[name]] for name in found if name not in a and name not in b)]


def _initials(text: str) -> set[str]:
    """The initials of every run of 2..MAX_INITIALS consecutive words of `text`, lowercased."""
    firsts = [w[0].lower() for w in _WORD.findall(text)]
    return {"".join(firsts[i:i + n]) for n in range(2, MAX_INITIALS + 1) for i in range(len(firsts) - n + 1)}


def _holds(name: Name, text: str, text_terms: set[str], acronyms: set[str]) -> bool:
    """Does one chunk's text (lowercased, with its title) mention `name`? `acronyms`: the question's
    all-capitals words, lowercased, which may also stand for the initials of words."""
    if len(name) == 1 and (any(ch.isdigit() for ch in name[0]) or not terms(name[0])):
        # a figure, or a name too short to be a term ("HR"): the token itself, not inside another
        if re.search(rf"(?<![\w.,]){re.escape(name[0])}(?![\w]|[.,]\d)", text):
            return True
    elif terms(" ".join(name)) <= text_terms:
        return True
    if len(name) != 1 or name[0] not in acronyms:
        return False
    acronym = name[0][:-1] if len(name[0]) > 2 and name[0].endswith("s") else name[0]  # "KPIs"
    return acronym in _initials(text)


def missing_anchors(question: str, evidence: Sequence[SeenChunk], values: Iterable[str] = ()) -> list[str]:
    """The names of `question` that no single chunk of `evidence` mentions (text or title), for each
    requirement none of whose alternatives is held; [] when the evidence holds them all."""
    wanted = requirements(question, values)
    if not wanted:
        return []
    texts = [f"{c.title}\n{c.about}\n{c.text}".lower() for c in evidence]
    read = [(t, terms(t)) for t in texts]
    acronyms = {m.group(0).lower() for m in _TOKEN.finditer(question) if _ACRONYM.match(m.group(0))}

    def held(name: Name) -> bool:
        return any(_holds(name, t, tt, acronyms) for t, tt in read)

    missing: list[str] = []
    for alternatives in wanted:
        unheld = [[" ".join(n) for n in alt if not held(n)] for alt in alternatives]
        if not any(not u for u in unheld):
            missing.extend(unheld[0])
    return missing


def cited_chunks(answer: str, chunks: Sequence[SeenChunk]) -> list[SeenChunk]:
    """The chunks of `chunks` that `answer` cites ([c:<id>])."""
    ids = {int(m) for m in _CITED.findall(answer)}
    return [c for c in chunks if c.chunk_id in ids]
