"""Is a question answered by the evidence? Per part, on sentences, not on words found somewhere. Pure.

A part of a question is *supported* when one retrieved sentence answers it: the sentence (read
with its document's title, which a paragraph does not repeat) holds the part's content terms,
weighted by how specific they are (names and numbers count double, words every document uses
count half), and, when the part asks for a kind of answer (a person, a place, a date or year, a
number), the sentence holds one that the question does not already give; when the part asks about
a quantity ("a 7-hour flight") and the evidence sets conditions on its unit, the sentence's
conditions must admit it (agents.quantities): "under six hours" answers another case. A part whose best
sentence falls short of that is *open*; the evidence may still name what the question only
describes (the woman who played a role, the company that makes a product): those names, found in
the sentences that best match the part, are the next searches (`hop_queries`), the bridge of a
multi-hop question.

Used by the offline provider (judge, agent and answer) and by agents.services (the parts a run's
evidence left open).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

from agents.citations import RetrievedChunk
from agents.lexical import ADJECTIVE_OF_ORIGIN, STOPWORDS, UPPER, key_words, sentences, split_question, stem, terms
from agents.messages import ContextChunk
from agents.planning import NOT_NAMES, fact_segments, named_terms, without_facets
from agents.quantities import quantities, quantity_fit

SUPPORTED = 0.85  # weighted share of a part's terms one sentence (with its title) must hold to answer it
ANSWERABLE = 0.5  # below this nothing retrieved answers the part: it is declined
MAX_HOPS = 3  # names searched per judgement


@dataclass(frozen=True)
class SeenChunk:
    chunk_id: int
    text: str
    score: float
    flagged: bool
    about: str = ""  # document title and metadata values: what the chunk is about besides its text
    title: str = ""  # the document's title alone


@dataclass(frozen=True)
class Support:
    """The best sentence found for a part and how well it answers it."""

    part: str
    score: float  # weighted share of the part's terms it holds, 0 when the kind of answer is missing too
    sentence: str = ""
    chunk_id: int | None = None

    @property
    def supported(self) -> bool:
        return self.score >= SUPPORTED

    @property
    def answerable(self) -> bool:
        return self.score >= ANSWERABLE


# Words nearly every document uses: they say little about which sentence answers a part.
_GENERIC = frozenset(stem(w) for w in """
name named known call called also first last new old year years time times number type kind part well make made
many much people person thing things like include includes including based following later early late since
""".split())
_ASKS = (
    ("year", re.compile(r"^\s*(?:in\s+)?(?:what|which)\s+year\b|^\s*when\b|\bwhat\s+(?:date|year)\b", re.I)),
    ("number", re.compile(r"^\s*how\s+(?:many|much|long|old|far|tall|big|large|high)\b", re.I)),
    ("person", re.compile(r"^\s*(?:who|whom|whose)\b", re.I)),
    ("place", re.compile(r"^\s*where\b|\bin\s+(?:what|which)\s+(?:city|country|state|town|county)\b", re.I)),
)
_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|hundred|thousand|million)\b", re.I)
_CAPITALISED = re.compile(rf"(?<![\w'’])[{UPPER}][\w'’.-]*(?:\s+(?:(?:of|the|de|von|van|and|du|la|le)\s+)?[{UPPER}][\w'’.-]*)*")


def answer_kind(part: str) -> str:
    """What kind of answer a part asks for: year, number, person, place, or "" (anything)."""
    for kind, pattern in _ASKS:
        if pattern.search(part):
            return kind
    return ""


def _names(part: str, values: Iterable[str]) -> set[str]:
    """The stems of the names a part uses: capitalised words inside it, and its first word when that
    is capitalised content (a part split from a question's middle starts with a name)."""
    names = {stem(n) for n in named_terms(part, values)}
    first = re.match(rf"\s*([{UPPER}][\w'’-]*)", part)
    if first and (word := first.group(1).lower()) not in STOPWORDS:
        names |= terms(word)
    return names


_SUBJECT = re.compile(r"^\s*(?:(?:are|is|was|were|do|does|did|has|have|had)\s+(?:both\s+|the\s+)?)?"
                      r"(?P<subject>(?:[\"“]?[A-ZÀ-ÖØ-Þ0-9][\w'’.&-]*[\"”]?\s*){1,6})", re.I)


def subject_name(part: str) -> str:
    """The name a part asks about when it opens with it ("Gerry Marsden both musicians", "Are both
    Rutgers University ... located"): capitalised words at its start, after an auxiliary verb; ""
    when the part opens otherwise ("What is the hotel limit in Lisbon" asks about a limit)."""
    m = _SUBJECT.match(part)
    if not m:
        return ""
    words: list[str] = []
    tokens = part[m.start("subject"):].split()
    for i, word in enumerate(tokens):
        word = word.strip("\"“”,?")
        joins = word.lower() in _NAME_JOINERS and i + 1 < len(tokens) and tokens[i + 1][:1].isupper()
        if not (word[:1].isupper() or word[:1].isdigit() or (words and joins)):
            break
        words.append(word)
    while words and words[0].lower() in STOPWORDS:  # "Both Truth in Science" names "Truth in Science"
        words = words[1:]
    name = " ".join(words)
    return "" if not words or name.lower() in STOPWORDS or _INTERROGATIVE_WORD.match(name) else name


_NAME_JOINERS = frozenset("of in the and de du von van la le for on".split())
_INTERROGATIVE_WORD = re.compile(r"^(?:what|which|who|whom|whose|when|where|why|how|are|is|was|were|do|does|did)\b", re.I)


def _about_subject(subject: str, sentence: str, title: str) -> bool:
    """A sentence is about the part's subject when its document's title (or metadata) names it, or
    the sentence opens with it; a sentence that mentions it in passing is about something else."""
    words = {stem(w.lower()) for w in re.findall(r"\w+", subject) if w.lower() not in STOPWORDS}
    if not words:
        return True
    in_title = {stem(w.lower()) for w in re.findall(r"\w+", title)}
    opening = {stem(w.lower()) for w in re.findall(r"\w+", sentence)[: len(words) + 3]}
    return words <= in_title or words <= opening


def _weights(part: str, values: Iterable[str]) -> dict[str, float]:
    names = _names(part, values)
    out = {}
    for t in terms(without_facets(part, values)):
        out[t] = 2.0 if t in names or t.isdigit() else 0.5 if t in _GENERIC else 1.0
    return out


# A labelled field ("Owner: Security Team.", "Version: 2", "Responsable : équipe RH"): a label of one
# to three words, a colon, then its value.
_FIELD = re.compile(r"^\s*[^\W\d_][\w'’-]*(?:\s+[\w'’-]+){0,2}\s?:\s")


def holds_answer_kind(kind: str, sentence: str, part: str) -> bool:
    """Does `sentence` hold the kind of answer `part` asks for (answer_kind): a year the part does not
    give, a number, or for a person or a place a capitalised word the part does not use, past the
    sentence's first word (capitalised because it comes first), in a name that is not only month
    or day names ("1 March 2026").
    A labelled field ("Owner: Security Team.") states its label's value: it holds a person or a
    place for a part only when it shares a term with the part (a field of a document's header
    about something else answers nothing asked)."""
    if kind == "year":
        return bool(set(_YEAR.findall(sentence)) - set(_YEAR.findall(part)))
    if kind == "number":
        return bool(_NUMBER.search(sentence))
    if kind in ("person", "place"):
        if _FIELD.match(sentence) and not terms(sentence) & terms(part):
            return False
        asked = {w.lower() for w in re.findall(r"\w+", part)}
        spans = (m.group(0).split() for m in _CAPITALISED.finditer(sentence) if m.start() > 0)
        return any(words[0] not in asked and not set(words) <= NOT_NAMES for words in ([_bare(w) for w in span] for span in spans))
    return True


def _bare(word: str) -> str:
    """A capitalised word as the part's words are compared with it: lowercased, without a full stop,
    quote or possessive ("Orrin." and "Orrin's" are "orrin")."""
    return re.sub(r"['’]s$", "", word.strip(".'’-")).lower()


def passage_holds_answer_kind(kind: str, text: str, part: str) -> bool:
    """Does a passage (a chunk's text) hold the kind of answer `part` asks for: one of its sentences
    does (holds_answer_kind), each read on its own, so that a sentence's first word and a heading
    (not a sentence) are not taken for a name; a passage without sentences is read whole."""
    return any(holds_answer_kind(kind, s, part) for s in sentences(text) or [text])


_RELATIVE = re.compile(r"^(?P<head>\S.{6,}?)\s+(?:(?:at|in|on|of|for|by|from|with|to|during)\s+)?"
                       r"(?:which|who|whom|whose|that|where)\s+(?P<description>.{8,})$", re.I)


_ASKING = re.compile(r"\b(?:what|which|how (?:many|much|long|far|old)|when|where|who|whom|whose)\b", re.I)


def split_relative(part: str) -> tuple[str, str] | None:
    """(what is asked, the description of what it is asked about) when a part describes its subject
    by a relative clause: "When was the palace founded | at which Columba de Dunbar died in 1435".
    A multi-hop question's two halves are usually answered by two different texts."""
    m = _RELATIVE.match(part.strip(" ?.!"))
    if not m or len(terms(m.group("head"))) < 1 or len(terms(m.group("description"))) < 2:
        return None
    head, description = m.group("head"), m.group("description")
    if _ASKING.search(description) and not _ASKING.match(head):
        # "... a Disney ride | that debuted in what year": the question is in the relative clause; what
        # comes before it describes the subject.
        return description, head
    return head, description


def support(part: str, chunks: Iterable[SeenChunk], values: Iterable[str] = ()) -> Support:
    """The part's best sentence among `chunks` (flagged chunks are never evidence) and its score.

    A part whose subject is described by a relative clause is as supported as the weaker of its two
    halves, each on its own best sentence; the sentence returned is the one answering what is asked."""
    chunks = list(chunks)
    values = list(values)
    halves = split_relative(part)
    if halves:
        described = _support(halves[1], chunks, values)
        asked = _support(halves[0], linked_chunks(described, halves[1], chunks, values), values)
        return Support(part, min(asked.score, described.score), asked.sentence, asked.chunk_id)
    return _support(part, chunks, values)


def linked_chunks(found: Support, part: str, chunks: list[SeenChunk], values: list[str]) -> list[SeenChunk]:
    """The chunk of a sentence found for `part` and the chunks about a name that sentence gives (by
    title, or by mention): where what is asked about the subject it identifies can be answered."""
    if found.chunk_id is None:
        return []
    names = [n.casefold() for n in bridge_names(part, chunks, values, top=1)]
    return [c for c in chunks if c.chunk_id == found.chunk_id or any(
        n == plain_title(c.title).casefold() or n in c.text.casefold() for n in names)]


def _support(part: str, chunks: list[SeenChunk], values: list[str]) -> Support:
    weights = _weights(part, values)
    total = sum(weights.values())
    if not total:
        return Support(part, 1.0)
    kind = answer_kind(part)
    names = _names(part, values) & set(weights)
    subject = subject_name(without_facets(part, values))
    best = Support(part, 0.0)
    evidence = list(_evidence(chunks))
    # A quantity the part asks about ("a 7-hour flight") counts as one more term when the evidence sets
    # conditions on its unit: held by a sentence whose condition admits it, and a sentence whose
    # conditions exclude it ("under six hours") answers another case, so it scores half.
    asked = quantities(part)
    fits = [quantity_fit(asked, sentence) if asked else None for _, sentence, _ in evidence]
    quantity_weight = 1.0 if any(fit is not None for fit in fits) else 0.0
    total += quantity_weight
    for (chunk, sentence, held), fit in zip(evidence, fits, strict=True):
        score = (sum(w for t, w in weights.items() if t in held)
                 + (quantity_weight if fit else 0.0)) / total
        if fit is False:
            score *= 0.5
        if kind and not holds_answer_kind(kind, sentence, part):
            score *= 0.8  # the words fit but the answer asked for is not in it
        if 2 * len(names & held) < len(names) or (subject and not _about_subject(subject, sentence, chunk.about)):
            # a text naming little of what the part names, or not about what it asks about, does not answer it
            score = min(score, ANSWERABLE * 0.98)
        if score > best.score:
            best = Support(part, round(score, 6), sentence, chunk.chunk_id)
    return best


def _evidence(chunks: Iterable[SeenChunk]) -> Iterator[tuple[SeenChunk, str, frozenset[str]]]:
    """Every sentence of the chunks that may be evidence (flagged ones never are), with the terms it
    holds together with its document's title and metadata."""
    for chunk in chunks:
        if not chunk.flagged:
            for sentence, held in _read(chunk.text, chunk.about):
                yield chunk, sentence, held


@lru_cache(maxsize=4096)
def _read(text: str, about: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """A chunk's sentences with the terms each holds together with what the chunk is about. Read once
    per chunk: every part, fact and judgement of a run reads the same retrieved chunks again."""
    about_terms = terms(about)
    return tuple((sentence, frozenset(terms(sentence) | about_terms)) for sentence in sentences(text) or [text])


def parts_support(question: str, chunks: list[SeenChunk], values: Iterable[str] = ()) -> list[Support]:
    values = list(values)
    return [support(p, chunks, values) for p in split_question(question)]


def about_text(title: str, metadata: object) -> str:
    """What a chunk is about besides its text: its document's title and string metadata values."""
    values = [v for v in metadata.values() if isinstance(v, str)] if isinstance(metadata, Mapping) else []
    return " ".join([title, *values])


def seen_chunk(chunk: RetrievedChunk | ContextChunk) -> SeenChunk:
    """A retrieved chunk (or one placed in a prompt) as sufficiency reads it: its text, and what it is about."""
    return SeenChunk(chunk.chunk_id, chunk.text, chunk.score, bool(chunk.flags), about_text(chunk.title, chunk.metadata), chunk.title)


def answering_chunks(question: str, chunks: list[SeenChunk], values: Iterable[str] = ()) -> list[int]:
    """For each fact the question states (agents.planning.fact_segments: "which company, reported by
    X to have ..., has also faced ..."), the chunk holding the sentence that best answers it, when one
    does (ANSWERABLE): a question that lists several facts needs each one's evidence, which the
    consensus of its searches can rank below a chunk several of them share. In fact order, once each."""
    values = list(values)
    out: dict[int, None] = {}
    for segment in fact_segments(question, values):
        best = support(segment, chunks, values)
        if best.chunk_id is not None and best.score >= ANSWERABLE:
            out.setdefault(best.chunk_id, None)
    return list(out)


def open_parts(question: str, chunks: list[SeenChunk], values: Iterable[str] = ()) -> list[str]:
    """The parts of `question` no retrieved sentence answers (agents.services stores them with the run)."""
    return [s.part for s in parts_support(question, chunks, values) if not s.answerable]


def unsupported_parts(question: str, answer: str, cited: list[SeenChunk], retrieved: list[SeenChunk]) -> list[str]:
    """The parts of a multi-part `question` an answer speaks to without a citation that supports them.

    A part counts when the retrieved evidence answers it (ANSWERABLE), the answer's own words cover
    it as much, and none of `cited` (the chunks the answer's verified citations point at) does: the
    answer then states that part from text it did not cite. A part nothing retrieved answers is the
    run's `missing` (open_parts), and a single-part question is judged by its citations alone."""
    parts = split_question(question)
    if len(parts) < 2:
        return []
    said = [SeenChunk(0, answer, 0.0, False)]
    return [p for p in parts
            if support(p, said).answerable and support(p, cited).score < ANSWERABLE and support(p, retrieved).answerable]


def bridge_names(part: str, chunks: list[SeenChunk], values: Iterable[str] = (), *, top: int = 2) -> list[str]:
    """Names the sentences that best match `part` give and the part does not: the entity a
    multi-hop question describes ("the woman who portrayed X") once the first search found text on
    it. Multi-word names and quoted titles first, then single capitalised words that are not a
    sentence's first word; the title of a chunk whose text matches the part counts too."""
    values = list(values)
    weights = _weights(part, values)
    asked = {w.lower() for w in re.findall(r"\w+", part)}
    # A text about something the part names ("the author of The Thing of It Is...") is where the
    # name it does not give is found: its sentences come first.
    folded = part.casefold()
    named = {c.chunk_id for c in chunks if len(t := plain_title(c.title).casefold()) > 3 and t in folded}
    top_weight = max(weights.values(), default=0.0)
    scored = [(sum(w for t, w in weights.items() if t in held) + (top_weight if chunk.chunk_id in named else 0.0),
               sentence, chunk.title) for chunk, sentence, held in _evidence(chunks)]
    scored.sort(key=lambda x: -x[0])
    out: dict[str, None] = {}
    for _score, sentence, title in scored[:top]:
        # The names the sentence gives, then what it is about: a paragraph's "He" is its title.
        for name in [*names_in(sentence), plain_title(title)]:
            words = {w.lower() for w in re.findall(r"\w+", name)}
            if words and not words <= asked and not words <= STOPWORDS:
                out.setdefault(name, None)
    return list(out)


def plain_title(title: str) -> str:
    """A document title without a trailing qualifier: "USS Essex (CV-9)" -> "USS Essex"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def names_in(sentence: str) -> list[str]:
    """The names a sentence gives: quoted titles, multi-word capitalised names, then single capitalised
    words (not month or day names: "September" leads to no text about it)."""
    quoted = [m.group(1) for m in re.finditer(r'"([^"]{3,80})"', sentence)]
    spans = []
    for m in _CAPITALISED.finditer(sentence):
        name = m.group(0).strip(" .'’")
        if m.start() == 0 and " " not in name:
            continue  # a sentence's first word
        if len(name) > 2:
            # "George Abbott and John Cecil Holm" names two people; "Bedknobs and Broomsticks" one title.
            sides = name.split(" and ")
            spans.extend(sides if len(sides) > 1 and all(" " in x for x in sides) else [name])
    multi = [n for n in spans if " " in n]
    single = [n for n in spans if " " not in n and not n.isupper() and n.lower() not in NOT_NAMES]
    return list(dict.fromkeys([*quoted, *multi, *single]))


def hop_queries(question: str, chunks: list[SeenChunk], values: Iterable[str] = (),
                supports: list[Support] | None = None) -> list[str]:
    """Follow-up searches for the parts the evidence does not yet answer: each name the best
    sentences give for what the part only describes, with the part's words those sentences lack."""
    values = list(values)
    out: dict[str, None] = {}
    titles = [t for c in chunks for t in (plain_title(c.title).casefold(), c.about.casefold()) if t]
    for s in parts_support(question, chunks, values) if supports is None else supports:
        if s.supported:
            continue
        halves = split_relative(s.part)
        if halves:  # the names the description's sentences give, with what is asked about them
            described, lacking = halves[1], key_words(without_facets(halves[0], values))
        else:
            described = s.part
            lacking = [w for w in key_words(without_facets(s.part, values)) if stem(w) not in terms(s.sentence)]
        # A name the part gives that no retrieved document is about is looked up first.
        unseen = [n for n in names_in(s.part) if (" " in n or n in s.part.split('"')[1::2])
                  and not any(n.casefold() in t or (t and t in n.casefold()) for t in titles)]
        # The name closing the described half comes first: after a relative clause holding the question it
        # is the name the clause follows, the thing asked about ("... represented N | which was founded in what year").
        if halves:
            closing = halves[1].rstrip(" ,\"'")
            unseen.sort(key=lambda n: not closing.endswith(n))
        for name in [*unseen[:1], *bridge_names(described, chunks, values)][:MAX_HOPS]:
            own = terms(name)
            out.setdefault(" ".join([name, *[w for w in lacking if stem(w) not in own][:6]]), None)
    return list(out)[:MAX_HOPS]


_YES_NO_QUESTION = re.compile(r"^\s*(?:are|is|was|were|do|does|did|can|could|has|have|had|both)\b", re.I)
_SAME = re.compile(r"\bsame\b", re.I)
_FRAMING = frozenset(stem(w) for w in "both same also either neither considered located situated".split())
# Adjectives of nationality or origin have these endings in English ("Swedish", "Austrian", "Chinese").
_DEMONYM = re.compile(r"^[A-ZÀ-Þ][a-zà-ÿ]+(?:an|ian|ish|ese|ic|i|ch)$")


def is_yes_no_comparison(question: str) -> bool:
    """A question asked to be answered yes or no ("Are A and B both ...?", "Were A and B ...?")."""
    return bool(_YES_NO_QUESTION.match(question))


def yes_no_verdict(question: str, chunks: list[SeenChunk], values: Iterable[str] = ()) -> str | None:
    """"yes" or "no" for a yes/no question comparing two or more things ("Are A and B both
    magazines?", "Were A and B of the same nationality?"), from each part's best sentence; None when
    the question is not one, or a part has no answering sentence (then the answer says so instead).

    "Both X" is yes when every part's sentence (with its title) holds the predicate's words; "the
    same X" is yes when the parts' sentences share a value of the kind compared: a year, an
    adjective of origin ("Swedish"), else a capitalised name the question does not give."""
    if not is_yes_no_comparison(question):
        return None
    values = list(values)
    read = [s if s.answerable else subject_support(s.part, chunks, values) for s in parts_support(question, chunks, values)]
    found = [s for s in read if s is not None]
    if len(found) < 2 or len(found) < len(read):
        return None
    texts = [f"{s.sentence} {_about_of(s, chunks)}" for s in found]
    if _SAME.search(question):
        asked = {w.lower() for w in re.findall(r"\w+", question)}
        kinds = [set(_YEAR.findall(t)) for t in texts] if "year" in asked else \
            [{w for w in re.findall(r"\w+", t) if _DEMONYM.match(w) and w.lower() not in asked} for t in texts]
        if not all(kinds):
            kinds = [{m.group(0) for m in _CAPITALISED.finditer(t) if m.group(0).lower() not in asked} for t in texts]
        shared = set.intersection(*kinds) if all(kinds) else set()
        return "yes" if shared else "no"
    # What is asked of each thing: the words every part shares ("A located in America", "B located
    # in America"), each held by every part's sentence.
    shared = set.intersection(*(terms(without_facets(s.part, values)) for s in found)) - _FRAMING
    names = {stem(n) for n in named_terms(question, values)}
    predicate = shared or {t for t in terms(without_facets(question, values)) if t not in names and t not in _FRAMING}
    if not predicate:
        return None
    held = [terms(t) for t in texts]
    fits = [all(_holds(p, h) for p in predicate) for h in held]
    return "yes" if all(fits) else "no"


def _holds(term: str, held: set[str]) -> bool:
    """A sentence's terms hold a term: itself, or a word it begins or that begins it ("america" /
    "american", "argentin" / "argentinian"), five letters shared at least."""
    if term in held:
        return True
    return len(term) >= 5 and any(len(h) >= 5 and (h.startswith(term) or term.startswith(h)) for h in held)


def subject_support(part: str, chunks: list[SeenChunk], values: Iterable[str] = ()) -> Support | None:
    """For a part of a yes/no comparison that no sentence answers: the best sentence of a text
    titled with the part's subject ("Are both A and B X?": the text about B), which says what B is
    when it does not say it is X; None when no retrieved text is about the subject. Its score stays
    that of the part it does not answer."""
    subject = subject_name(without_facets(part, list(values))).split()
    if len(subject) > 2 and ADJECTIVE_OF_ORIGIN.match(subject[-1]):
        subject = subject[:-1]  # "James Norman Hall Argentinian (authors)": the adjective is what is asked
    words = {stem(w.lower()) for w in re.findall(r"\w+", " ".join(subject)) if w.lower() not in STOPWORDS}
    if not words:
        return None
    titled = [c for c in chunks if not c.flagged and words <= {stem(w.lower()) for w in re.findall(r"\w+", plain_title(c.title))}]
    if not titled:
        return None
    best = _support(part, titled, list(values))
    return best if best.sentence else None


def _about_of(s: Support, chunks: list[SeenChunk]) -> str:
    return next((c.about for c in chunks if c.chunk_id == s.chunk_id), "")
