"""What a question pins down, and whether an answer's evidence mentions it.

A question names the things it is about ("the 16th Annual Young Hollywood Awards", "East
Lempster", "Windows 11") and asks something of them. A passage about a neighbouring thing (the 15th
awards, Lempster, Windows 10) can read as a perfect answer to a relevance model (0.99 for the 15th
awards asked about the 16th) and to word overlap alike. So every name the question pins down must
occur in some chunk the answer is composed from (its text, title or metadata), else the documents
do not speak of what was asked and the offline provider declines (agents.providers.offline).

The names, from the question's asking sentences: runs of consecutive capitalised words
(`agents.planning.named_terms`: never a sentence's first word, a month or weekday name, a facet
value) with the figures that identify a thing among or next to them: an ordinal ("16th"), a year
("1956"), a figure right after a name ("Windows 11"). Punctuation or any other word ends a run, and
all the words of one name must be in one chunk ("East Lempster" is not held by a chunk saying
"Lempster" and another saying "East"; "16th Annual Young Hollywood Awards" is not held by one about
the 15th and another about the 16th century).

Not names: anything in a statement (it sets the asker's context: "I'm extending a business trip to
Lisbon.", and the policy need not name Lisbon); a quantity the asker supplies and its unit ("a 3-day
trip", "EUR 4.50"): the evidence states the rule, not their case; an abbreviation in capitals
("USA", "CEO": it has many written forms, "United States", "U.S."); an adjective of origin
qualifying a noun or closing the question ("British singer", "... American?": asked of a thing, not
naming it); a capitalised word right after "what" or "which" (the kind asked for: "what
Nationality"). Asked which of two named things fits ("..., A or B?"), one option held is enough.

A question that pins down PINNED_ENOUGH names or more, every one held by the evidence, is answered
from what the relevance model picks whatever the model's score for the question as a whole
(`Anchoring.names_decide`, used by agents.providers.offline): a question naming that many things ("Which company,
reported by TechCrunch and The Verge, has spent billions ... and is accused by Epic Games ...?")
describes several facts no one passage holds, and the cross-encoder scores it low against each
passage that holds one (most such answerable questions of MultiHop-RAG's fit half under 0.1);
every one of its names found is the evidence that the documents speak of what was asked.

A word matches by its stem (agents.lexical.terms) or misspelt by one letter when it has at least
MIN_TYPO_LETTERS ("Apatim" for "Apratim"), a figure as a whole token. Pure: no database, no model.
The rule and what it did on each evaluation set: docs/evaluation.md, "Anchors".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agents.lexical import STOPWORDS, asked_sentences, choice_kind, choice_options, terms
from agents.noun_phrases import BE, DO_MODAL
from agents.planning import named_terms
from agents.sufficiency import SeenChunk, is_yes_no_comparison, plain_title

Name = tuple[str, ...]  # the lowercased words of one name, or one figure

_TOKEN = re.compile(r"\w+(?:[.,]\d+)*")
_ASKING = frozenset("what which".split())
_ORIGIN = re.compile(r"^[A-ZÀ-Þ][a-zà-ÿ]+(?:ian|ean|can|ese|ish)$")  # "Italian", "Korean", "American", "Chinese", "British"
_IDENTIFYING = re.compile(r"^(?:\d+(?:st|nd|rd|th)|1[0-9]{3}|20[0-9]{2})$", re.I)  # an ordinal or a year
_ACRONYM = re.compile(r"^[A-Z]{2,6}s?$")
# Two sides ask the same of each thing when their words, without the things' names, overlap this much
# (Jaccard): chosen on the fit halves, where HotpotQA's side-by-side questions reach 0.5 and above and
# MultiHop-RAG's claims naming two things mostly stay under 0.3 (docs/evaluation.md, "Sides of a
# comparison, and links back").
SAME_QUESTION = 0.5
SUBJECT_WITHIN = 6  # the two things compared open the question: at most this many words before them
_SHARED = re.compile(r"\b(?:both|in common|the same)\b", re.I)  # what two things share: "What do A and B have in common?"
MIN_TYPO_LETTERS = 6  # shorter names differ by a letter too often ("Bern", "Born")
# Names a question must pin down for their being held to decide it is answered (chosen on the fit
# halves: docs/evaluation.md, "Questions that name many things").
PINNED_ENOUGH = 3


def names(text: str, values: Iterable[str] = ()) -> list[Name]:
    """The names `text` pins down, in order: runs of its consecutive named words and identifying
    figures ("16th Annual Young Hollywood Awards", "Windows 11", "1956"). A run ends at punctuation
    or any other word ("University of Oxford" is two names)."""
    named = set(named_terms(text, values))
    found = list(_TOKEN.finditer(text))
    tokens = [m.group(0) for m in found]
    out: dict[Name, None] = {}
    run: list[str] = []

    def close(i: int) -> None:
        words = tuple(w.lower() for w in run if w.lower() not in STOPWORDS)
        after_asking = i - len(run) > 0 and tokens[i - len(run) - 1].lower() in _ASKING and len(run) == 1
        if words and not after_asking:
            out.setdefault(words, None)
        run.clear()

    for i, token in enumerate(tokens):
        if run and text[found[i - 1].end():found[i].start()].strip():
            close(i)  # punctuation between two words ends a name ("East Lempster, New Hampshire")
        if _ACRONYM.match(token):
            close(i)  # an abbreviation has many written forms ("USA", "United States", "U.S."): no anchor
            continue
        if _is_figure(token):
            # "16th Annual ...", "1956", "Windows 11"; not "3 nights", nor an amount ("EUR 4.50", "16 GB")
            if _IDENTIFYING.match(token) or run:
                run.append(token)
            else:
                close(i)
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


def _misspelt(word: str, text_terms: set[str]) -> bool:
    """A name of at least MIN_TYPO_LETTERS letters held with one letter added, dropped or changed
    ("Apatim" for "Apratim"): askers misspell names; a neighbouring thing rarely differs by one letter."""
    if len(word) < MIN_TYPO_LETTERS:
        return False
    stem_ = next(iter(terms(word)), word)
    return any(abs(len(t) - len(stem_)) <= 1 and _one_edit(stem_, t) for t in text_terms if t[:1] == stem_[:1] or t[-1:] == stem_[-1:])


def _one_edit(a: str, b: str) -> bool:
    """Are `a` and `b` one insertion, deletion or substitution apart (or equal)?"""
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i + 1:] == b[i + 1:] if len(a) == len(b) else a[i:] == b[i + 1:]


def _holds(name: Name, text: str, text_terms: set[str]) -> bool:
    """Does one chunk's text (lowercased, with its title) mention every word of `name`? A figure, or
    a word too short to be a term, as the token itself (not inside another: "3.1" is not in
    "3.11"); another word by its stem, or misspelt by one letter (`_misspelt`)."""
    for word in name:
        if _is_figure(word) or not terms(word):
            if not re.search(rf"(?<![\w.,]){re.escape(word)}(?![\w]|[.,]\d)", text):
                return False
        elif not (terms(word) <= text_terms or _misspelt(word, text_terms)):
            return False
    return True


@dataclass(frozen=True)
class Anchoring:
    """A question's names read against the evidence: those no chunk mentions (`missing_anchors`) and
    how many it pins down (its requirements: a choice's two options count once)."""

    missing: list[str]
    pinned: int

    @property
    def names_decide(self) -> bool:
        """Does the question pin down PINNED_ENOUGH names, all held, so that it is answered whatever
        the relevance model's score for it as a whole (this module's docstring)?"""
        return not self.missing and self.pinned >= PINNED_ENOUGH


def anchoring(question: str, evidence: Sequence[SeenChunk], values: Iterable[str] = ()) -> Anchoring:
    """`question`'s names against `evidence`, its requirements read once."""
    wanted = requirements(question, values)
    return Anchoring(_unheld(wanted, evidence), len(wanted))


def missing_anchors(question: str, evidence: Sequence[SeenChunk], values: Iterable[str] = ()) -> list[str]:
    """The names of `question` that no single chunk of `evidence` mentions (text or title), for each
    requirement none of whose alternatives is held; [] when the evidence holds them all."""
    return _unheld(requirements(question, values), evidence)


def _unheld(wanted: list[list[list[Name]]], evidence: Sequence[SeenChunk]) -> list[str]:
    if not wanted:
        return []
    texts = [f"{c.title}\n{c.about}\n{c.text}".lower() for c in evidence]
    read = [(t, terms(t)) for t in texts]

    def held(name: Name) -> bool:
        return any(_holds(name, t, tt) for t, tt in read)

    missing: list[str] = []
    for alternatives in wanted:
        unheld = [[" ".join(n) for n in alt if not held(n)] for alt in alternatives]
        if not any(not u for u in unheld):
            missing.extend(unheld[0])
    return missing


def sides_compared(question: str, parts: Sequence[str], values: Iterable[str] = ()) -> str | None:
    """How `question` (split into `parts`) sets named things side by side, each part one side:
    "every" when its answer needs what each side has (which of two is more, first, older: "Which
    came first, A or B?"; a yes or no of two names joined by "and": "Are A and B both ...?"; what
    two such names share: "What do A and B have in common?"), "any" when one side can answer it
    ("Which musician, A or B, is a member of Fuel?": the option shown to be one), None for a
    question of one part or one that does not set named things side by side (a yes or no of two
    claims: "Does the first article say X, while the second says Y?")."""
    if len(parts) < 2:
        return None
    kind = choice_kind(question)
    if kind is not None:
        return "any" if kind == "property" else "every"
    asked = " ".join(asked_sentences(question))
    if not (is_yes_no_comparison(question) or _SHARED.search(asked)):
        return None
    held = [{w.lower() for w in _TOKEN.findall(part)} for part in parts]

    def side(thing: Name) -> int | None:
        holding = [i for i, words in enumerate(held) if set(thing) <= words]
        return holding[0] if len(holding) == 1 else None

    for a, b, lead in _joined_by_and(asked, values):  # the question's subject: "Are A and B ...", "What type of film are both A and B"
        i, j = side(a), side(b)
        if i is not None and j is not None and i != j:
            # The same thing asked of each ("Are A musicians" / "B both musicians"), not two claims
            # that happen to name them ("A's report on X" / "B's interview about Y"). When the things
            # are the subject of the question's verb ("What type of structure does A and B have in
            # common"), what it says before them is asked of both, though a split leaves it with the
            # first side only; not when they are its object ("Who is associated with A and B").
            asked_of_both = terms(lead) if _before_subject(lead) else set()
            rest_i = (terms(parts[i]) - terms(" ".join(a))) | asked_of_both
            rest_j = (terms(parts[j]) - terms(" ".join(b))) | asked_of_both
            if len(rest_i & rest_j) >= SAME_QUESTION * len(rest_i | rest_j) > 0:
                return "every"
    return None


def _before_subject(lead: str) -> bool:
    """Whether `lead` ends with the verb a question asks of the subject after it ("What profession
    does", "What type of film are both", "Were")."""
    words = [w for w in _TOKEN.findall(lead.lower()) if w not in ("both", "the", "either")]
    return bool(words) and words[-1] in DO_MODAL | BE


def _joined_by_and(text: str, values: Iterable[str]) -> list[tuple[Name, Name, str]]:
    """The pairs of things `text` joins by "and", each a name or a run of capitalised words ("Daryl
    Hall and Gerry Marsden", "Disney Magazine and The Ring", '"500 Years Later" and "Manson"', "277
    Park Avenue and 126 Madison Avenue": a number opening a thing's name is part of it), that open the
    question: at most SUBJECT_WITHIN words and no comma before them ("What type of film are both A and
    B", not "..., as reported by both A and B"). Each pair comes with the text before its first thing."""
    values = list(values)
    found = list(_TOKEN.finditer(text))
    raw = [m.group(0) for m in found]
    tokens = [t.lower() for t in raw]
    ending: dict[int, Name] = {}
    starting: dict[int, Name] = {}
    for name in names(text, values):
        for i in range(len(tokens) - len(name) + 1):
            if tuple(tokens[i:i + len(name)]) == name:
                starting[i] = name
                ending[i + len(name) - 1] = name

    facet_words = [{w.lower() for w in _TOKEN.findall(v)} for v in values]

    def capitalised(i: int, step: int) -> Name | None:
        """The run of capitalised words ending (step -1) or starting (step 1) at i; not a facet value."""
        run = []
        while 0 <= i < len(raw) and raw[i][:1].isupper() and tokens[i] not in STOPWORDS:
            run.append(tokens[i])
            i += step
        return tuple(run[::step]) if run and not any(set(run) <= f for f in facet_words) else None

    def numbered(name: Name | None, number_from: int, number_to: int) -> Name | None:
        return tuple(tokens[number_from:number_to]) + name if name else None

    out = []
    for i, word in enumerate(tokens):
        if word != "and" or i == 0:
            continue
        after = i + 2 if i + 2 < len(tokens) and tokens[i + 1] in STOPWORDS else i + 1  # "and The Ring"
        number_end = after
        while number_end < len(tokens) and tokens[number_end].isdigit():
            number_end += 1  # "and 126 Madison Avenue"
        after_thing = numbered(starting.get(number_end) or capitalised(number_end, 1), after, number_end)
        before_thing = ending.get(i - 1) or capitalised(i - 1, -1)
        start = i - len(before_thing) if before_thing else 0
        while start > 0 and tokens[start - 1].isdigit():
            start -= 1  # a number opening the thing's name ("500 Years Later") is part of it, not a word before it
        before_thing = numbered(before_thing, start, i - len(before_thing or ()))
        if before_thing and after_thing and start <= SUBJECT_WITHIN and "," not in text[:found[start].start()]:
            out.append((before_thing, after_thing, text[:found[start].start()]))
    return out


def side_names(question: str, parts: Sequence[str], values: Iterable[str] = ()) -> list[list[Name]]:
    """For each side of a comparison (`parts`, as `sides_compared` reads them), its own names: the
    names of `question` whose words the part holds and no other part does (a name two parts hold,
    as a split can leave "of the Border" on both sides, is no one side's). A number written just before
    a name opens it here ("277 Park Avenue" is not the Park Avenue of another text's title)."""
    asked = " ".join(asked_sentences(question))
    tokens = list(_TOKEN.finditer(asked))
    found = [_with_its_number(asked, tokens, n) for n in names(asked, values)]
    held = [[n for n in found if set(n) <= {w.lower() for w in _TOKEN.findall(part)}] for part in parts]
    return [[n for n in own if sum(n in other for other in held) == 1] for own in held]


def _with_its_number(text: str, found: list[re.Match[str]], name: Name) -> Name:
    """`name` opened by the number written right before its first occurrence in `text` (`found`: its
    tokens), when one is ("277" of "does 277 Park Avenue"; not "4" of "GPT-4 Turbo")."""
    tokens = [m.group(0).lower() for m in found]
    for k in range(1, len(tokens) - len(name) + 1):
        if tuple(tokens[k:k + len(name)]) == name:
            number = found[k - 1]
            if number.group(0).isdigit() and not text[number.end():found[k].start()].strip() \
                    and (number.start() == 0 or text[number.start() - 1].isspace()):
                return (number.group(0), *name)
            return name
    return name


def quotes_name(own: Sequence[Name], quoted: Sequence[str]) -> bool:
    """Do the quotes of one side of a comparison (`quoted`: each quoted sentence with its document's
    title and what it is about) mention each of the side's own names (`side_names`)? A sentence
    about another thing is no evidence for the side, however well it reads as an answer (a sentence
    of the genus Centaurea for the common name of Myrtus; one on the "truth" anti-smoking campaign
    for what Truth in Science embraces)."""
    read = [(t.lower(), terms(t.lower())) for t in quoted]
    return all(any(_holds(n, t, tt) for t, tt in read) for n in own)


def from_own_text(own: Sequence[Name], quoted_from: Sequence[tuple[str, str]]) -> bool:
    """Does one of a side's quotes come from a text about the side (`quoted_from`: per quote, its
    document's title and what the document is about, title and metadata)? Its title or metadata names
    every one of the side's own names, or its title is a name the side gives ("White Zombie (band)"
    for "Rob Zombie's band White Zombie"). A question needing what each of two things is ("Are A and
    B both film directors?", "Who was born first, A or B?") reads each thing's own text; a sentence
    of a text about something else that mentions the name in passing ("a 1958 film directed by
    Wolfgang Becker") may speak of a namesake, and cannot say what the thing is not. A title giving
    part of a name gives all of its figures: "Park Avenue" is the street, not the text about "277
    Park Avenue"."""
    for title, about in quoted_from:
        named = {w.lower() for w in _TOKEN.findall(plain_title(title))}
        if quotes_name(own, [about]) or (named and _names_given(named, own)):
            return True
    return False


def _names_given(title_words: set[str], own: Sequence[Name]) -> bool:
    """Are a title's words all words of the side's names, with every figure of each name it shares a
    word with ("Park Avenue" gives part of "277 Park Avenue" without its number: another thing)?"""
    words = {w for name in own for w in name}
    figures = {w for name in own if title_words & set(name) for w in name if _is_figure(w)}
    return title_words <= words and figures <= title_words


def _is_figure(word: str) -> bool:
    """A word holding a digit ("277", "16th", "3.1"): a figure, read as written, never by its stem."""
    return any(ch.isdigit() for ch in word)
