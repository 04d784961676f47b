"""Noun phrases of a text without a model: what a follow-up's pronoun can stand for.

Grammar-shaped rules only (determiners, prepositions, auxiliaries, capitals, figures), no
vocabulary of any corpus; English word order. Used by agents.conversation_text.

A phrase is a run of content words (not stopwords, no figures), optionally led by a determiner
("a hotel night"), with one attached prepositional phrase ("a hotel night in Paris"). A run counts
as a noun phrase when a determiner leads it, a preposition precedes it (not "to" before a bare
verb: "to configure"), it is the subject after a question's auxiliary ("does the policy ...", "are
hotel stays ..."), or it is a capitalised name. In a subject after do/can/will... the run's last
word is the question's main verb ("what does the policy say") and is dropped (with a bare plural
object after it: "does the policy cover taxis"); a trailing "-ed" word is a participle ("get my car
prepared", "are hotel stays reimbursed"). A run ends where a name meets a lowercase word ("the
Eiffel Tower built"), and a lowercase word leads a name only after a determiner, a preposition or
"be" ("the film Blue Harbour"; not "does the policy cover Paris"). A phrase whose head holds a
figure's label (a code in capitals, a unit in lowercase or a calendar word next to a figure or a
currency sign: "EUR 180", "5 kg", "ISO 9001", "March 2020") names a quantity, a code or a date, not
a thing: it is never a referent. A number after a capitalised word that labels nothing is part of
the name ("Apollo 11").
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from dataclasses import dataclass

from agents.languages import month_numbers, weekday_names
from agents.lexical import STOPWORDS

PREPOSITIONS = frozenset("in on at for to from with by of about into over under after before during than as per".split())
_TOKEN = re.compile(r"[^\W_]+(?:['’.\-][^\W_]+)*|\S")
_DETERMINERS = frozenset("""a an the this that these those my our your his her its their each every any some another many much
few several""".split())
INDEFINITE = frozenset("a an some any each every another many much few several".split())
_INTERROGATIVE = frozenset("what which whose".split())
DO_MODAL = frozenset("do does did can could will would shall should may might must".split())
BE = frozenset("is are was were be been am has have had".split())
_ATTACH = frozenset("of in at for from on".split())
_CONNECTORS = frozenset("of the and de von van du la le".split())
_SENTENCE_MARKS = frozenset(".!?:;\"“”()[]-•*")


@dataclass(frozen=True)
class Phrase:
    """A noun phrase of a text: as written (with its determiner and attached phrase), the name its
    head holds ('' for a common noun), and whether a what/which leads it (then the answer names it)."""

    text: str
    name: str
    determiner: str
    interrogative: bool = False


def _figure(tok: str) -> bool:
    """A number ("180", "4.50", "2011–12"), or a currency sign; "VMF-213" and "SG-1" are names."""
    return tok[:1].isdigit() or (len(tok) == 1 and unicodedata.category(tok) == "Sc")


# Month and weekday names of every supported language (agents.languages, as the planner reads dates), and the
# English abbreviations ("Jan", "Mon") the calendar module has.
_CALENDAR = frozenset(month_numbers()) | weekday_names() | frozenset(w.casefold() for w in [*calendar.month_abbr, *calendar.day_abbr] if w)


def _label_shaped(tok: str) -> bool:
    """A word that, next to a figure, labels it: a code or acronym (all capitals: "EUR", "ISO"), a
    unit (lowercase: "kg", "percent") or a calendar word ("March", "Monday")."""
    return (tok.isupper() and tok.isalpha()) or tok[:1].islower() or tok.casefold() in _CALENDAR


def content_word(tok: str) -> bool:
    return tok[:1].isalpha() and not _figure(tok) and tok.casefold() not in STOPWORDS


def noun_phrases(text: str) -> list[Phrase]:
    """The noun phrases of `text` in order (see the module's rules), figures' labels left out."""
    found = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    toks = [t for t, _, _ in found]
    n = len(toks)
    labels = {toks[j].casefold() for i, t in enumerate(toks) if _figure(t) for j in (i - 1, i + 1)
              if 0 <= j < n and _label_shaped(toks[j])}
    label = {i for i, t in enumerate(toks) if t.casefold() in labels}  # "EUR" of "EUR 180", wherever it is written
    numbered = {i for i, t in enumerate(toks) if t.isdigit() and i > 0 and toks[i - 1][:1].isupper() and i - 1 not in label}

    def capital(i: int) -> bool:
        if i in numbered:
            return True  # "Apollo 11": the number is part of the name
        if not toks[i][:1].isupper():
            return False
        initial = i == 0 or toks[i - 1] in _SENTENCE_MARKS
        return not initial or (i + 1 < n and toks[i + 1][:1].isupper() and content_word(toks[i + 1]))

    def run(j: int, apposition: bool) -> int:
        """The end of the run of content words starting at j (a name may hold of/the/and)."""
        k = j + 1
        while k < n:
            if (content_word(toks[k]) or k in numbered) and k not in label:
                if capital(k - 1) and not capital(k):
                    break
                if capital(k) and not capital(k - 1) and not apposition:
                    break
                k += 1
            elif toks[k].casefold() in _CONNECTORS and capital(k - 1) and k + 1 < n and capital(k + 1) and content_word(toks[k + 1]):
                k += 2
            else:
                break
        return k

    def phrase(start: int, head: tuple[int, int], end: int, det: str, interrogative: bool = False) -> Phrase | None:
        if any(i in label for i in range(*head)):
            return None
        caps = [i for i in range(*head) if capital(i) or (toks[i].casefold() in _CONNECTORS and i > head[0])]
        name = ""
        if caps and capital(caps[0]):
            first, last = caps[0], max(i for i in caps if capital(i))
            if det and det[:1].isupper() and start > 0 and toks[start - 1] not in _SENTENCE_MARKS:
                first = start  # "The Beatles" mid-sentence: the article is part of the name
            name = text[found[first][1]:found[last][2]]
        return Phrase(text[found[start][1]:found[end - 1][2]], name, det, interrogative)

    out: list[Phrase] = []
    i = 0
    while i < n:
        low = toks[i].casefold()
        led = (low in _DETERMINERS or low in _INTERROGATIVE) and i + 1 < n and content_word(toks[i + 1])
        if not led and not content_word(toks[i]):
            i += 1
            continue
        j = i + 1 if led else i
        before = toks[i - 1].casefold() if i > 0 else ""
        # "the film Blue Harbour", "about old Triumph"; not "does the policy cover Paris" (a verb, then its object)
        k = run(j, apposition=before not in DO_MODAL and (led or before in PREPOSITIONS or before in BE))
        det = toks[i] if led else ""
        lowercase = not any(capital(x) for x in range(j, k))
        interrogative = led and low in _INTERROGATIVE
        end, trimmed = k, False
        if before in DO_MODAL and lowercase:  # the subject, then the main verb (and a bare plural object)
            bare_plural = k - j >= 3 and (k == n or not content_word(toks[k])) and toks[k - 1].casefold().endswith("s")
            end = k = k - (2 if bare_plural else 1)
            trimmed = True
        elif lowercase and ((k - j >= 2 and toks[k - 1].casefold().endswith("ed")) or  # "are hotel stays reimbursed"
                            (before in BE and not led and k - j == 1 and (k == n or not content_word(toks[k])))):  # "what is allowed"
            end = k = k - 1
            trimmed = True
        preposition = before in PREPOSITIONS and (before != "to" or led or not lowercase)  # "to configure": a verb
        if not (led or preposition or before in BE or before in DO_MODAL or not lowercase):
            i = max(k, i + 1)  # a verb, or a sentence's opening words: not a phrase
            continue
        if (led or preposition) and not trimmed and not interrogative and k < n and toks[k].casefold() in _ATTACH:
            m = k + 1 + int(k + 2 < n and toks[k + 1].casefold() in _DETERMINERS and content_word(toks[k + 2]))
            if m < n and content_word(toks[m]):  # one prepositional phrase attached: "a hotel night in Paris"
                tail = run(m, apposition=True)
                if not any(x in label for x in range(m, tail)):
                    end = tail
        if k > j and (p := phrase(i, (j, k), end, det, interrogative)):
            out.append(p)
        i = max(end, i + 1)
    return out


_CURRENCY = "".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) == "Sc")


def labels_a_figure(name: str, text: str) -> bool:
    """`name` is a code, a unit or a calendar word written next to a figure or a currency sign
    somewhere in `text` ("EUR 180", "ISO 9001", "March 2020"; not "Apollo 11")."""
    n = re.escape(name)
    figure = rf"(?:\d[\d.,]*|[{_CURRENCY}])"
    return " " not in name and _label_shaped(name) and bool(re.search(rf"{figure}\s*{n}\b|\b{n}\s*{figure}", text))
