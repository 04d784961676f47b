"""Lexical analysis without a model, for the offline provider and citation checks: terms, stems,
sentences, question parts, word shingles.

Deliberately simple and deterministic (no model): a crude suffix stemmer and a stopword list are
enough to tell whether retrieved text mentions what a question asks about.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from kb.sentence_split import split as split_sentences

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other
our ours ourselves out over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while who whom why will
with would you your yours yourself yourselves also may might must shall get gets got per via etc within without
whether versus vs compare compared comparison difference differ between according tell explain describe please
apply applies applied exactly does anything something much many kind one two use used using way ways need needs
still just ever really actually i'm i've i'd let's
""".split()) | frozenset("""
les des une est sont pour dans par sur avec sans que qui quoi quel quelle quels quelles combien comment pourquoi
quand où aux ces cette mon mes ton tes son ses nos vos leur leurs pas plus peut puis dois doit ont avez avons suis
être avoir fait faire tout tous toute toutes entre vers chez selon lors
der die das den dem des ein eine einen einem einer und oder aber nicht ist sind wird werden wie was wer wann warum
welche welcher welches für mit von bei nach aus auf über unter durch zum zur ich sie wir ihr kann können muss
los las una unos unas del por para con sin que qué quién cuál cuáles cuánto cuántos cómo dónde cuándo
""".split())

# Letters of any script and digits (not "_"): "congé", "Müller" and "東京" keep their letters.
_WORD = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)?")
_SUFFIXES = ("ing", "ed", "es", "s", "e")


# Pure functions of their text, called for the same words and sentences across every search round
# and sufficiency check of a run (millions of stems per evaluation): memoised, bounded.
@lru_cache(maxsize=1 << 16)
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


def mentions(text: str, phrase: str) -> bool:
    """Does `text` hold `phrase` as whole words (case-insensitive): "Vance" in "Orla Vance's", not in "Vancey"?"""
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text, re.I) is not None


def terms(text: str) -> set[str]:
    """Content terms of `text`: lowercased, stopwords and 1-2 letter words dropped, stemmed (a new
    set each call: callers may change it)."""
    return set(_terms(text))


@lru_cache(maxsize=1 << 14)
def _terms(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 2)


def ordered_terms(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for w in _WORD.findall(text.lower()):
        if w not in STOPWORDS and len(w) > 2:
            seen.setdefault(stem(w), None)
    return list(seen)


def key_words(text: str) -> list[str]:
    """Content words in their original form (for search queries, where stems would hurt), deduplicated."""
    seen: dict[str, str] = {}
    for w in _WORD.findall(text.lower()):
        if w not in STOPWORDS and len(w) > 2:
            seen.setdefault(stem(w), w)
    return list(seen.values())


def shingles(text: str, n: int = 5) -> frozenset[str]:
    """The text's word n-grams (lowercased): two texts sharing most of them are copies, not two
    texts that happen to share a phrase."""
    words = _WORD.findall(text.lower())
    return frozenset(" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))) if words else frozenset()


def contained_share(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of the smaller shingle set found in the other: 1.0 when one text is a copy of (a part of) the other."""
    small = min(len(a), len(b))
    return len(a & b) / small if small else 0.0


def coverage(part_terms: set[str], text_terms: set[str]) -> float:
    """Share of `part_terms` that occur in `text_terms` (both stemmed by `terms`). Words only: no
    list of equivalent words is kept here (any such list would be one corpus's vocabulary); meaning
    beyond shared words is the embedding search's and the relevance judge's job."""
    if not part_terms:
        return 1.0
    return len(part_terms & text_terms) / len(part_terms)


_ENDS = frozenset(".!?;…。！？")


def sentences(text: str) -> list[str]:
    """Sentences and list items of a chunk, headings dropped, hard-wrapped lines joined (a new list
    each call).

    Split by `kb.sentence_split.split` (never inside a figure, abbreviation, initial, URL or
    quotation), so a sentence equals a slice of `text` up to whitespace: joining a hard-wrapped
    sentence's lines only collapses whitespace, which `normalise` does too when a quote is checked.
    Kept: pieces of at least 12 characters with a word of three letters that end like a sentence or
    run to ten words."""
    return list(_sentences(text))


@lru_cache(maxsize=1 << 12)
def _sentences(text: str) -> tuple[str, ...]:
    out = []
    for start, end, heading in split_sentences(text):
        if heading:
            continue
        piece = " ".join(text[start:end].split())
        ends = piece.rstrip("\"'”’»)]」』")[-1:]  # a quoted or bracketed sentence ends inside its closing marks
        if len(piece) >= 12 and re.search(r"[^\W\d_]{3}", piece) and (piece[-1] == ")" or ends in _ENDS or len(piece.split()) >= 10):
            out.append(piece)
    return tuple(out)


_UNIFIED_MARKS = str.maketrans({"“": "'", "”": "'", '"': "'", "‘": "'", "’": "'", "–": "-", "—": "-", "\u00a0": " "})


def normalise(text: str) -> str:
    """For quote matching: casefolded, quotation marks and dashes unified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text)
    # Every quotation mark is one character: a quoted sentence's own quotes are shown as single ones.
    text = text.translate(_UNIFIED_MARKS)
    text = re.sub(r"[*_`]", "", text)
    return re.sub(r"\s+", " ", text).strip().casefold()


# --- Splitting a question into parts ---------------------------------------------------------------
# Clauses: joined by a conjunction, a semicolon, or a comma that starts a new question ("..., what is ...").
_CLAUSE_SPLIT = re.compile(
    r"(\s*[,;]?\s+\b(?:and also|and then|and|while|whereas|but|or|as well as|plus|also)\b\s+|\s*;\s*"
    r"|\s*,\s+(?=(?:what|which|how|when|where|who|whom|whose|why|can|could|should|must|will|would)\b))", re.IGNORECASE
)
_BETWEEN = re.compile(r"\b(?:difference|differences|compare|comparison)\b.*?\bbetween\s+(.+?)\s+and\s+(.+?)(?:[?.!]|$)", re.I)
# Only the separator and what follows: the left side is the text before it on its line. (A leading
# "(.+?)" would be retried from every start position: quadratic, 170 ms on a 4,000-character question.)
_VERSUS = re.compile(r"\s+(?:versus|vs\.?|compared (?:to|with))\s+(.+?)(?:[?.!]|$)", re.I)
MAX_PARTS = 4


_INTERROGATIVE = re.compile(r"^\s*(?:what|which|how|when|where|who|whom|whose|why|can|could|may|might|do|does|did|is|are|was|were|"
                            r"should|must|will|would|shall|has|have|tell|explain|list|describe|compare|give|show)\b", re.I)


def is_statement(sentence: str) -> bool:
    """A sentence that sets context ("I'm extending a trip.") rather than asking something."""
    return not sentence.rstrip().endswith("?") and not _INTERROGATIVE.match(sentence)


def question_context(question: str) -> str:
    """The statement sentences of a question: context that search queries should carry."""
    sents = _SENTENCES.split(question.strip())
    if len(sents) < 2:
        return ""
    return " ".join(s for s in sents if is_statement(s))


# Not after "St." or "J.", nor after an ellipsis that a lowercase word continues ("The Thing of It Is... is").
_SENTENCES = re.compile(r"(?<=[?!.…])(?<!\b[A-Z][a-z]\.)(?<!\b[A-Z]\.)(?<!\b[A-Z][a-z][a-z]\.)(?<!\.\.\.)(?<!…)\s+"
                        r"|(?:(?<=\.\.\.)|(?<=…))\s+(?![a-z])|\n+")


def split_question(question: str) -> list[str]:
    """The parts a complete answer must cover: sentences, clauses joined by and/while/or/but,
    and both sides of a comparison. A clause with fewer than two content terms stays attached
    to its neighbour ("travel and expense policy" is one part); statements only set context for
    the sentences that ask, unless those are only tags (`_is_tag`: "The fee is EUR 20. Right?",
    "The update failed. How do I fix this?"): then the whole question is one part. At most
    MAX_PARTS parts."""
    parts: list[str] = []
    asked, whole = _asking(question)
    if whole and len(asked) > 1:
        # Only a tag asks ("..., right?", "Can you clarify?"): it asks about the statements before it,
        # so the whole question is the one part (a tag alone is a part no sentence can answer).
        return [" ".join(x.strip() for x in asked).strip(" ?!.")]
    for sentence in asked:
        sentence = sentence.strip(" ?!.")
        compared = _choice_parts(sentence) or _comparison_parts(sentence)
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


def asked_sentences(question: str) -> list[str]:
    """The sentences of a question that ask something; its statements ("I'm extending a trip to
    Lisbon.") set the asker's context. All its sentences when it has one, no asking one, or only
    tags asking (`_is_tag`: "The fee is EUR 20. Right?" asks about the statement)."""
    return _asking(question)[0]


def _asking(question: str) -> tuple[list[str], bool]:
    """(asked_sentences, whether they are all the question's sentences because none asks for
    something of its own: only tags ask, or nothing does)."""
    sents = [x for x in _question_sentences(question) if x.strip(" ?!.")]
    if len(sents) < 2:
        return sents, False
    asked = [x for x in sents if not is_statement(x)]
    if all(_is_tag(x) for x in asked):  # vacuously when no sentence asks
        return sents, True
    return asked, False


_WH = re.compile(r"\b(?:what|which|how|when|where|who|whom|whose|why)\b", re.I)


_REFERS_BACK = re.compile(r"\b(?:this|that|these|those|it|them)\b", re.I)


def _is_tag(sentence: str) -> bool:
    """An asking sentence that asks for nothing of its own, so it asks about the statements before
    it: fewer than two content terms and no wh-word ("Right?", "Can you clarify?"), a word pointing
    back ("How can I fix this?", "What does it mean?") or no content term at all ("What should I
    do?"). "What is the per diem?" and "Where is Lisbon?" ask for something of their own."""
    held = len(terms(sentence))
    return held == 0 or (held < 2 and (not _WH.search(sentence) or bool(_REFERS_BACK.search(sentence))))


_QUOTED_SPAN = re.compile(r"[\"“][^\"”\n]{1,200}[\"”]")


def _question_sentences(question: str) -> list[str]:
    """The question's sentences; a mark inside a quoted title ("Hey Pa! There's a Goat on the Roof")
    ends none."""
    text = question.strip()
    hidden = _QUOTED_SPAN.sub(lambda m: re.sub(r"[?!.]", "\x00", m.group(0)), text)
    out, at = [], 0
    for m in _SENTENCES.finditer(hidden):
        out.append(text[at:m.start()])
        at = m.end()
    return [*out, text[at:]]


_OPTION = r"(?:(?:the|The)\s+)?(?:[\"“'‘][^\"”’]+[\"”'’]|[" + "A-Z0-9ÀÖØ-Þ" + r"][^,]*?)"
_CHOICE_BETWEEN_COMMAS = re.compile(rf"^(?P<pre>.+?),\s*(?P<a>{_OPTION})\s*,?\s+or\s+(?P<b>{_OPTION}),\s*(?P<post>.+)$")
_CHOICE_AT_END = re.compile(rf"^(?P<pre>.+?)[,:]\s*(?P<a>{_OPTION})\s*,?\s+or\s+(?P<b>{_OPTION})$")
_CHOICE_NAMES_AT_END = re.compile(r"^(?P<pre>.+?)\s+(?P<a>(?:[A-Z0-9ÀÖØ-Þ][\w.'’-]*\s*)+?)\s+or\s+(?P<b>(?:the\s+)?[A-Z0-9ÀÖØ-Þ\"“].*)$")
_CHOOSING = re.compile(r"^\s*(?:(?:in|of|at|for|from|by)\s+)?(?:which|who|whom|whose|what)\b", re.I)


def choice_options(sentence: str) -> tuple[str, str, str] | None:
    """(option A, option B, what is asked of them) for a question asking which of two named things
    fits ("Which band has released more albums, Blonde Redhead or White Zombie?", "Which musician,
    A or B, is a member of Fuel?", "Who was born first, A or B?"); None for any other sentence."""
    sentence = sentence.strip(" ?!.")
    if not _CHOOSING.match(sentence):
        return None
    for pattern in (_CHOICE_BETWEEN_COMMAS, _CHOICE_AT_END, _CHOICE_NAMES_AT_END):
        m = pattern.match(sentence)
        if m:
            asked = " ".join(x for x in (m.group("pre"), m.groupdict().get("post") or "") if x)
            return m.group("a").strip(), m.group("b").strip(), asked
    return None


_COMPARATIVE = re.compile(r"\b(?:more|most|less|least|fewer|fewest|first|last|earlier|earliest|later|latest|older|oldest|"
                          r"younger|youngest|longer|longest|shorter|shortest|larger|largest|bigger|biggest|smaller|"
                          r"smallest|higher|highest|lower|lowest|better|best|worse|worst|\w+er\s+than)\b", re.I)


def choice_kind(question: str) -> str | None:
    """For a question asking which of two named things fits: "property" when it asks which one has a
    property ("Which musician, A or B, is a member of Fuel?": a sentence showing one option has it
    answers it), "comparison" when it compares them ("Which came first, A or B?": that needs what
    both options have); None for any other question."""
    asked = [x for x in _question_sentences(question) if x.strip(" ?!.") and not is_statement(x)]
    if len(asked) != 1 or (found := choice_options(asked[0])) is None:
        return None
    return "comparison" if _COMPARATIVE.search(found[2]) else "property"


def _choice_parts(sentence: str) -> list[str]:
    """"Which P, A or B?" -> ["A P", "B P"]: each option with what is asked of it (the question word dropped)."""
    found = choice_options(sentence)
    if not found:
        return []
    a, b, asked = (re.sub(r"^(?:the|The)\s+", "", x) for x in found)
    topic = " ".join(key_words(_CHOOSING.sub("", asked)))
    return [f"{a} {topic}".strip(), f"{b} {topic}".strip()]


def _comparison_parts(sentence: str) -> list[str]:
    m = _BETWEEN.search(sentence)
    if m:
        left, right, topic = m.group(1).strip(), m.group(2).strip(), sentence[: m.start()].strip()
    else:
        versus = _versus(sentence)
        if versus is None:
            return []
        left, right, topic = versus[0].strip(), versus[1].strip(), ""
    topic_terms = " ".join(ordered_terms(topic))
    return [f"{left} {topic_terms}".strip(), f"{right} {topic_terms}".strip()]


def _versus(sentence: str) -> tuple[str, str] | None:
    """(left, right) of the first "A versus B" in the sentence: the first separator, from the left,
    with text before it on its line and a right side after it."""
    at = 0
    while (m := _VERSUS.search(sentence, at)) is not None:
        line_start = sentence.rfind("\n", 0, m.start()) + 1
        if line_start < m.start():
            return sentence[line_start:m.start()], m.group(1)
        at = m.start() + 1
    return None


_LIST_TAIL = re.compile(r",\s*(?!(?:what|which|how|when|where|who|whom|whose|why)\b)[\w'’-]+(?:\s+[\w'’-]+)?\s*$", re.I)


def _clauses(sentence: str) -> list[str]:
    """Clauses, a short one joined to its neighbour unless it names something; a clause that only
    names something ("Were Scott Derrickson | Ed Wood of the same nationality") takes the words that
    say what is asked from the clause that has them."""
    tokens = _CLAUSE_SPLIT.split(sentence)  # [clause, separator, clause, separator, ...]
    merged: list[str] = []
    for i in range(0, len(tokens), 2):
        piece = tokens[i].strip(" ,")
        if not piece:
            continue
        short = lambda p: len(terms(p)) < 2 and not _names(p)  # noqa: E731
        # "the lawyer, lobbyist and political consultant who...": the last items of a list, not a new clause.
        listed = merged and re.fullmatch(r"\s+(?:and|or)\s+", tokens[i - 1], re.I) and _LIST_TAIL.search(merged[-1])
        # "articles from both The Verge | Fortune, was involved in ...": two names the subject is described
        # by, set off by a comma before the predicate; the predicate is asked of one thing, not per name.
        paired = merged and re.fullmatch(r"\s+and\s+", tokens[i - 1], re.I) and _BOTH_TAIL.search(merged[-1]) \
            and _NAME_THEN_COMMA.match(piece)
        if merged and (short(piece) or short(merged[-1]) or listed or paired):
            merged[-1] = f"{merged[-1]}{tokens[i - 1]}{piece}"
        else:
            merged.append(piece)
    if len(merged) > 1:
        predicates = [_predicate(p) for p in merged]
        # What the clause with a predicate says after the name it opens with ("Carnegie Mellon University
        # | located in America"), word for word: its own names ("America") are part of what is asked.
        said = next((r for i, p in enumerate(merged) if predicates[i] and (r := _after_leading_name(p))), "")
        shared = said or " ".join(next((w for w in sorted(predicates, key=len, reverse=True) if w), []))
        merged = [p if predicates[i] else f"{p} {shared}".strip() for i, p in enumerate(merged)]
        # "Are the documentaries Out of Place | The Mosuo Sisters by the same director": a clause that
        # ends with a name shares what the next clause, opening with a name, says after it.
        for i in range(len(merged) - 1):
            rest = _after_leading_name(merged[i + 1])
            if predicates[i] and rest and _ENDS_WITH_NAME.search(merged[i]) and not terms(rest) <= terms(merged[i]):
                merged[i] = f"{merged[i]} {rest}"
    return merged


UPPER = "A-ZÀ-ÖØ-ÞΑ-ΩА-Я"  # capitals of the Latin, Greek and Cyrillic scripts, for regex classes
_CAPITAL_WORD = re.compile(rf"(?<![\w'’])[{UPPER}][\w'’-]*")
_NAME_WORD = rf"(?:[\"“'‘][^\"”'’]+[\"”'’]|[{UPPER}][\w.'’-]*)"
_NAME_RUN = rf"{_NAME_WORD}(?:\s+{_NAME_WORD})*"  # "The Verge", "'The Age'", "Sam Bankman-Fried"
_BOTH_TAIL = re.compile(rf"\bboth\s+(?:the\s+)?{_NAME_RUN}\s*$")
_NAME_THEN_COMMA = re.compile(rf"(?:the\s+)?{_NAME_RUN}\s*,")
_LEADING_NAME = re.compile(rf"^\s*(?:(?i:both|the|either)\s+)?"
                           rf"((?:\d+\s+)?{_NAME_WORD}(?:\s+(?:(?:of|de|la|von|van|du|del)\s+)?{_NAME_WORD})*)"  # "126 Madison Avenue"
                           r"\s+(?:both\s+)?(.+)$")
_ENDS_WITH_NAME = re.compile(rf"(?:[{UPPER}][\w.'’-]*|[\"”'’])\s*$")
# A capitalised word read as an adjective of origin after a name ("James Norman Hall Argentinian").
ADJECTIVE_OF_ORIGIN = re.compile(r"^[A-ZÀ-Þ][a-zà-ÿ]+(?:ian|ean|can|ese|ish|ic|ine)$")


def _after_leading_name(clause: str) -> str:
    """The words after the name a clause opens with, when it opens with one and has more to say
    ("Jimo District both located in China" -> "located in China"); "" otherwise. A name's last word
    that reads as an adjective of origin ("... Hall Argentinian authors") stays with what is said."""
    m = _LEADING_NAME.match(clause)
    if not m or _INTERROGATIVE.match(clause) or not terms(m.group(2)):
        return ""
    name, rest = m.group(1).split(), m.group(2)
    if len(name) > 2 and ADJECTIVE_OF_ORIGIN.match(name[-1]):
        rest = f"{name[-1]} {rest}"
    words = rest.split()
    # Put after another name, a capitalised word before a lowercase one ("Opera composers") describes
    # it; left capitalised it would read as part of that name.
    if len(words) > 1 and words[0][:1].isupper() and not words[0].isupper() and words[1][:1].islower():
        rest = rest[:1].lower() + rest[1:]
    return rest


def _names(clause: str) -> set[str]:
    """Capitalised words of a clause, not counting its first word when that is a question word."""
    words = _CAPITAL_WORD.findall(clause)
    if words and clause.lstrip().startswith(words[0]) and _INTERROGATIVE.match(clause):
        words = words[1:]
    return {stem(w.lower()) for w in words}


def _predicate(clause: str) -> list[str]:
    """A clause's content words that are not names: what it asks about them."""
    names = _names(clause)
    return [w for w in key_words(clause) if stem(w) not in names]


_INSTRUCTION_LIKE = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b[^.]{0,40}\b(?:rules|instructions|prompt|guidelines|policies above)\b"
    r"|\b(?:system prompt|you are now|act as|new instructions|developer mode|jailbreak)\b"
    r"|\b(?:search|query|access)\s+(?:the\s+)?(?:other\s+)?tenant\b", re.IGNORECASE)


def looks_like_instructions(text: str) -> bool:
    """A sentence addressed to a model rather than to employees (kept out of extractive answers)."""
    return bool(_INSTRUCTION_LIKE.search(text))
