"""Resolving a follow-up against its thread, without a model: pure text rules, no ORM.

The offline provider's `followup` task (and the tests) use `resolve_followup`. It knows no dataset:
it reads the shape of the message (a request to reformulate, an elliptical "and for X?", a pronoun)
and the names the previous turn's question and answer hold.

    "shorter please"            -> the previous question, answered again from the thread's evidence
    "and for Lisbon?"           -> the previous question with its name (or number) replaced by Lisbon
    "when was he born?"         -> the pronoun replaced by the name it most likely refers to
    anything else               -> the message as it is, searched afresh
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.lexical import UPPER, key_words

# Words of a request to say the previous answer again differently; a message made only of these
# (and of pronouns and fillers) needs no new search.
_REFORMULATE = frozenset("""
shorter short briefer brief briefly concise concisely summarise summarize summary tldr tl dr simpler simply simple
rephrase reword explain clarify clearer clarification mean meant elaborate detail details detailed longer again
sentence sentences bullet bullets points list words plain english repeat said say
""".split())
_FILLER = frozenset("""
please pls can could would you make it that this the a an in into one two three few some more less bit little what do does
did by your answer reply me to so ok okay thanks thank and just give write put version of as with
""".split())
_ELLIPSIS = re.compile(r"^\s*(?:(?:and|but|also|or|ok|okay|then)[,\s]+)?(?:(?:what|how)\s+about|(?:and\s+)?(?P<prep>for|in|at|on|"
                       r"with|about|of|by|during|from|to|per|regarding|concerning))\s+(?P<what>[^?.!]+?)\s*[?.!]*\s*$", re.I)
_LEADING_AND = re.compile(r"^\s*(?:and|but|also|or)\s+", re.I)
_CAPITALISED = re.compile(rf"(?<![\w'’])[{UPPER}][\w'’.-]*(?:\s+(?:(?:of|the|de|von|van|and|du|la|le)\s+)?[{UPPER}][\w'’.-]*)*")
_NUMBER = re.compile(r"\b\d[\d.,]*\b")
_PERSONAL = {"he": "", "she": "", "him": "", "they": "", "them": "", "his": "'s", "their": "'s", "theirs": "'s", "hers": "'s"}
_NEUTER = {"it": "", "its": "'s"}
PRONOUN = re.compile(  # a third-person pronoun (the follow-up rules, and the evaluation that builds follow-ups)
    r"\b(he|she|him|his|her|hers|they|them|their|theirs|it|its)\b", re.I)
_PREPOSITIONS = frozenset("in on at for to from with by of about into over under after before during than as per".split())
_WHO = re.compile(r"^\s*(?:who|whom|whose)\b", re.I)
_WHAT = re.compile(r"^\s*(?:what|which)\b", re.I)
_CITATION = re.compile(r"\[c:\d+\]\s*(?:\([^)]*\))?")
_BOILERPLATE = re.compile(r"^(?:Extractive answer|What the documents do say)[^\n]*$|^\s*\d+\.\s[^\n]*:\s*$", re.M)
_QUESTION_WORDS = frozenset("what which who whom whose when where why how is are was were do does did can could".split())


@dataclass(frozen=True)
class Resolved:
    """A follow-up made standalone: the question to answer, whether it needs a new search, and how."""

    question: str
    retrieve: bool
    how: str  # "as_is", "reformulate", "ellipsis", "pronoun", "first_turn"


def resolve_followup(message: str, history: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> Resolved:
    """`message` made standalone against `history` ((standalone question, answer) per earlier turn,
    oldest first). Only the last turn is read: a follow-up refers to what was just said."""
    message = " ".join(message.split())
    if not history:
        return Resolved(message, True, "first_turn")
    previous, answer = history[-1]
    if is_reformulation(message):
        return Resolved(previous, False, "reformulate")
    if m := _ELLIPSIS.match(message):
        what = m.group("what").strip()
        if len(what.split()) <= 6 and not (set(what.casefold().split()) & _QUESTION_WORDS):
            return Resolved(replace_counterpart(previous, what, m.group("prep")), True, "ellipsis")
    if PRONOUN.search(message):
        resolved = replace_pronouns(message, previous, answer)
        if resolved != message:
            return Resolved(resolved, True, "pronoun")
        words = " ".join(key_words(previous))
        return Resolved(f"{message.rstrip(' ?.!')} ({words})?" if words else message, True, "pronoun")
    return Resolved(message, True, "as_is")


def is_reformulation(message: str) -> bool:
    """A request to say the last answer again differently ("shorter please", "can you explain that?")."""
    words = [w.casefold() for w in re.findall(r"[^\W_]+", message)]
    return bool(words) and len(words) <= 12 and any(w in _REFORMULATE for w in words) and \
        all(w in _REFORMULATE or w in _FILLER or w in _PERSONAL or w in _NEUTER or w == "her" for w in words)


def names(text: str) -> list[str]:
    """Capitalised spans ("Jane Roe", "Lisbon") in order, a sentence's first word left out unless it
    starts a longer name."""
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        stripped = sentence.lstrip(" -•*\"'“")
        for m in _CAPITALISED.finditer(stripped):
            name = m.group(0).strip(" .'’")
            if m.start() == 0 and " " not in name:
                continue
            if m.start() == 0 and name.split()[0].casefold() in _QUESTION_WORDS:
                name = name.split(" ", 1)[1]
            if len(name) > 1:
                out.append(name)
    return list(dict.fromkeys(out))


def replace_counterpart(previous: str, what: str, prep: str | None) -> str:
    """The previous question asked about `what` instead: its last name (or number, for a number)
    replaced; without one, `what` added with its preposition."""
    body = _LEADING_AND.sub("", previous).rstrip()
    phrase = f"{prep} {what}" if prep else what
    head, _, rest = phrase.partition(" ")
    if rest and head.casefold() in _PREPOSITIONS and not _CAPITALISED.match(rest):
        # "and per week?" after "... per night?": the same preposition's phrase, as long, replaced
        same = list(re.finditer(rf"\b{re.escape(head)}\s+[\w'’-]+(?:\s+[\w'’-]+){{{len(rest.split()) - 1}}}", body, re.I))
        if same:
            last = same[-1]
            return body[:last.start()] + phrase + body[last.end():]
    if _NUMBER.fullmatch(what.strip()):
        found = list(_NUMBER.finditer(body))
    else:
        spans = names(body)
        found = [m for n in spans for m in re.finditer(re.escape(n), body)][-1:] if spans else []
        found = sorted(found, key=lambda m: m.start())
    if found:
        last = found[-1]
        return body[:last.start()] + what + body[last.end():]
    end = body[-1] if body[-1:] in "?.!" else "?"
    return f"{body.rstrip('?.! ')} {prep or 'for'} {what}{end}"


def referent(previous: str, answer: str, personal: bool) -> str:
    """The name a pronoun most likely refers to: for he/she/they after a "who" question, the first
    name the answer gives that the question did not; otherwise the question's own subject; failing
    that, the answer's first new name."""
    asked = names(previous)
    said = names(_BOILERPLATE.sub("", _CITATION.sub("", answer)))
    folded = {n.casefold() for n in asked}
    new = [n for n in said if n.casefold() not in folded and not any(n.casefold() in a for a in folded)]
    if personal and _WHO.match(previous) and new:
        return new[0]
    if not personal and _WHAT.match(previous) and not asked and new:
        return new[0]
    if asked:
        return max(asked, key=lambda n: len(n.split()))  # the fullest name the question gave
    return new[0] if new else ""


def replace_pronouns(message: str, previous: str, answer: str) -> str:
    """`message` with its third-person pronouns replaced by the name each refers to (unchanged when none is found)."""
    cache: dict[bool, str] = {}

    def sub(m: re.Match) -> str:
        word = m.group(0)
        low = word.casefold()
        personal = low not in _NEUTER
        if personal not in cache:
            cache[personal] = referent(previous, answer, personal)
        name = cache[personal]
        if not name:
            return word
        if low == "her":
            following = message[m.end():].split()
            possessive = bool(following) and following[0].strip("?.!,").casefold() not in _PREPOSITIONS and \
                following[0][:1].isalpha()
            return name + ("'s" if possessive else "")
        return name + {**_PERSONAL, **_NEUTER}.get(low, "")

    return PRONOUN.sub(sub, message)
