"""Resolving a follow-up against its thread, without a model: pure text rules, no ORM.

The offline provider's `followup` task (and the tests) use `resolve_followup`. It knows no dataset:
it reads the shape of the message (a request to reformulate, an elliptical "and for X?", a pronoun)
and the names and noun phrases the previous turn's question and answer hold.

    "shorter please"            -> the previous question, answered again from the thread's evidence
    "and for Lisbon?"           -> the previous question with its name (or number) replaced by Lisbon
    "when was he born?"         -> the pronoun replaced by the person it most likely refers to
    "does it include X?"        -> "it" (its, they, this, that) replaced by the thing the previous
                                   question was about: "a hotel night in Paris" -> "the hotel night in Paris"
    a pronoun nothing fits      -> the message as typed, with the previous question's words added for
                                   the search ("Does it apply abroad (allowed)?"), never a guess
    anything else               -> the message as it is, searched afresh

A referent is a thing: never a figure, a unit, a currency code or sign, a date or a code glued to a
number ("EUR 180", "5 kg", "ISO 9001", "March 2020"), whatever its capitals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.lexical import STOPWORDS, UPPER, mentions, terms
from agents.noun_phrases import BE, DO_MODAL, INDEFINITE, PREPOSITIONS, Phrase, content_word, labels_a_figure, noun_phrases

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
    how: str  # "as_is", "reformulate", "ellipsis", "pronoun", "context" (a pronoun nothing fits), "first_turn"


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
    if PRONOUN.search(message) or demonstrative_pronouns(message):
        if not pronouns_to_resolve(message):
            return Resolved(message, True, "as_is")  # its pronouns point inside it
        resolved = replace_pronouns(message, previous, answer)
        if resolved != message:
            return Resolved(resolved, True, "pronoun")
        return Resolved(with_context(message, previous), True, "context")
    return Resolved(message, True, "as_is")


def with_context(message: str, previous: str) -> str:
    """`message` as typed, followed by the content words of the previous question it refers back
    to, as the search's context: "Does it include breakfast (spend hotel night Paris)?". Used when
    no phrase fits the pronoun: a guessed replacement would search for the wrong thing."""
    seen: dict[str, str] = {}
    for w in re.findall(r"[^\W_]+(?:['’-][^\W_]+)*", previous):
        if w.casefold() not in STOPWORDS and len(w) > 2 and not (terms(w) & terms(message)):
            seen.setdefault(w.casefold(), w)
    words = " ".join(seen.values())
    return f"{message.rstrip(' ?.!')} ({words})?" if words else message


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
    if rest and head.casefold() in PREPOSITIONS and not _CAPITALISED.match(rest):
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


# ---- which phrase a pronoun stands for ----------------------------------------------------------

_DEMONSTRATIVES = frozenset("this that these those".split())
_PLURAL = frozenset("they them their theirs".split())
_DEMONSTRATIVE = re.compile(r"\b(this|that|these|those)\b", re.I)
_OBJECT_QUESTION = re.compile(r"^\s*(?:what|which)\b(?:\s+[^\W\d_]+)?\s+(?:do|does|did|can|could|will|would|should|may|might|must)\b", re.I)


def _fits(phrase: str, message: str) -> bool:
    """A phrase that can carry the message's predicate: it has content words and the message does
    not already say it ("does it include Paris" is not about Paris): a name not written in the
    message, a common noun phrase not all of whose words the message has."""
    if phrase[:1].isupper():
        return not mentions(message, phrase)
    own = terms(phrase)
    return bool(own) and not own <= terms(PRONOUN.sub(" ", message))


def answer_names(previous: str, answer: str) -> list[str]:
    """The names the answer gives that the question did not, figures' labels ("EUR 180", "ISO 9001")
    left out, in order."""
    text = _BOILERPLATE.sub("", _CITATION.sub("", answer))
    folded = {n.casefold() for n in names(previous)}
    return [n for n in names(text) if n.casefold() not in folded and not any(n.casefold() in a for a in folded)
            and not labels_a_figure(n, text)]


def referent(previous: str, answer: str, personal: bool, message: str = "") -> str:
    """What a pronoun most likely stands for, as the words to put in its place ('' when nothing fits).

    Person pronouns (he/she/him/his/her; they after a "who" question): the first name the answer
    gives that the question did not, after a "who" question; otherwise the question's fullest name;
    failing that, the answer's first new name. Thing pronouns (it/its/this/that; they otherwise):
    the answer's first new name when the question asked for it ("what film did Jane Roe direct",
    "which hotel ...", or "what did Jane Roe direct" where the question's only phrases are names);
    otherwise the question's first noun phrase that fits (a name in its head
    standing for the whole, "a"/"an" made "the"), then the answer's new names, then its noun
    phrases. Never a figure, a unit, a code or a date (see noun_phrases)."""
    said = answer_names(previous, answer)
    said = [n for n in said if _fits(n, message)]
    if personal:
        asked = [n for n in names(previous) if _fits(n, message) and not labels_a_figure(n, previous)]
        if _WHO.match(previous) and said:
            return said[0]
        if asked:
            return max(asked, key=lambda n: len(n.split()))  # the fullest name the question gave
        return said[0] if said else ""
    phrases = noun_phrases(previous)
    asked_for = any(p.interrogative for p in phrases) or (_OBJECT_QUESTION.match(previous) and all(p.name for p in phrases))
    if said and asked_for:  # "what film did Jane Roe direct?", "what did Jane Roe direct?": the answer names it
        return said[0]
    text = _BOILERPLATE.sub("", _CITATION.sub("", answer))
    later = [p for p in noun_phrases(text) if p.determiner and not p.interrogative]
    full = names(previous)
    for p in [*(p for p in phrases if not p.interrogative), *(Phrase(n, n, "") for n in said), *later]:
        # a name as the question spells it in full ("St. Anthony Messenger", "What Are Little Girls Made Of")
        words = max((n for n in full if p.name and p.name in n), key=len, default=p.name) or _definite(p)
        if words and _fits(words, message):
            return words
    return ""


def _definite(p: Phrase) -> str:
    det = p.determiner.casefold()
    if det in INDEFINITE:
        return "the" + p.text[len(p.determiner):]
    if det in ("what", "which", "whose"):
        return ""
    return p.text[:1].lower() + p.text[1:] if det else p.text


def demonstrative_pronouns(message: str) -> list[re.Match]:
    """"this"/"that"/"these"/"those" used as pronouns: before a preposition, an auxiliary or the end
    ("why is that?", "similar to this for bicycles?"), or after an auxiliary with at most two words
    (one after a form of "be") to the next function word ("does that include breakfast?", "is that
    taxable?"; not "does that hotel include breakfast?", nor "told me that he is")."""
    out = []
    for m in _DEMONSTRATIVE.finditer(message):
        before = message[:m.start()].split()
        after = re.findall(r"[^\W_]+|[^\w\s]", message[m.end():])
        words = []
        for w in after:
            if not content_word(w):
                break
            words.append(w)
        aux = bool(before) and before[-1].casefold().strip(",") in (DO_MODAL | BE)
        nxt = after[0].casefold() if after else ""
        ends = not after or not nxt[:1].isalnum() or nxt in PREPOSITIONS or nxt in DO_MODAL or nxt in BE
        if (not words and ends) or (aux and words and len(words) <= (1 if before[-1].casefold() in BE else 2)):
            out.append(m)
    return out


_EXPLETIVE_AFTER = re.compile(r"\s+(?:is|was|'s|isn't|wasn't|will be|would be|seems)\s+(?:not\s+)?[^\W\d_]+\s+"
                              r"(?:to|that|whether|if)\b", re.I)
_EXPLETIVE_BEFORE = re.compile(r"\b(?:is|was|isn't|wasn't)\s+$", re.I)
_EXPLETIVE_NEXT = re.compile(r"\s+(?:not\s+)?[^\W\d_]+\s+(?:to|that|whether|if)\b", re.I)
# A sentence's end: "?", "!", ";", or "." after a word of three letters or more ("v.", "U.S." end none).
_SENTENCE_BREAK = re.compile(r"(?:[?!;]|(?<![\s.][^\W\d_])(?<![\s.][^\W\d_]{2})(?<![.][^\W\d_]{3})(?<=[^\W\d_]{3})\.)(?=\s)")


def pronouns_to_resolve(message: str) -> list[re.Match]:
    """The message's pronouns that refer back to the previous turn, in order. Left out: an "it"
    that only opens an extraposed clause ("it is not possible to ...", "is it possible to ..."),
    and a thing pronoun whose antecedent the message itself gives in an earlier sentence ("Is the
    compost sold in shops? Can I sell it?")."""
    out = []
    for m in sorted([*PRONOUN.finditer(message), *demonstrative_pronouns(message)], key=lambda m: m.start()):
        if m.group(0).casefold() == "it" and (_EXPLETIVE_AFTER.match(message, m.end()) or (
                _EXPLETIVE_BEFORE.search(message[:m.start()]) and _EXPLETIVE_NEXT.match(message, m.end()))):
            continue
        breaks = list(_SENTENCE_BREAK.finditer(message, 0, m.start()))
        thing = m.group(0).casefold() in (*_NEUTER, *_DEMONSTRATIVES, *_PLURAL)
        if thing and breaks and any(terms(p.name or p.text) for p in noun_phrases(message[:breaks[-1].start()])):
            continue
        out.append(m)
    return out


def replace_pronouns(message: str, previous: str, answer: str) -> str:
    """`message` with its third-person pronouns (and "this"/"that" used as pronouns) replaced by
    what each stands for (see `referent`); a pronoun nothing fits is left as it is."""
    cache: dict[bool, str] = {}
    who = bool(_WHO.match(previous))
    edits: list[tuple[int, int, str]] = []
    for m in pronouns_to_resolve(message):
        word = m.group(0)
        low = word.casefold()
        personal = low not in _NEUTER and low not in _DEMONSTRATIVES and (low not in _PLURAL or who)
        if personal not in cache:
            cache[personal] = referent(previous, answer, personal, message)
        name = cache[personal]
        if not name or any(name.casefold() in done.casefold() for _, _, done in edits):
            continue  # nothing fits, or said once already ("when did Acme open its first office?")
        if m.start() == 0 and word[:1].isupper():
            name = name[:1].upper() + name[1:]
        end = m.end()
        if low in ("its", "their") and not personal and not cache[personal][:1].isupper():
            pos, owned = end, list[tuple[str, int]]()  # (word, where it ends)
            while (w := re.match(r"\s+([^\W\d_][\w'’-]*)", message[pos:])) and content_word(w.group(1)) and len(owned) < 3:
                pos += w.end()
                owned.append((w.group(1), pos))
            if len(owned) > 1 and re.match(rf"\s*(?:{'|'.join(BE)})\s*$", message[:m.start()], re.I):
                owned.pop()  # "is its price higher ...": the last word is what is said of it
            if owned:  # "its price" -> "the price of the hotel night in Paris"
                lead = "The" if m.start() == 0 and word[:1].isupper() else "the"
                edits.append((m.start(), owned[-1][1], f"{lead} {' '.join(w for w, _ in owned)} of {cache[personal]}"))
                continue
        if low == "her":
            following = message[end:].split()
            possessive = bool(following) and following[0].strip("?.!,").casefold() not in PREPOSITIONS and \
                following[0][:1].isalpha()
            edits.append((m.start(), end, name + ("'s" if possessive else "")))
            continue
        edits.append((m.start(), end, name + {**_PERSONAL, **_NEUTER}.get(low, "")))
    for start, end, text in reversed(edits):
        message = message[:start] + text + message[end:]
    return message
