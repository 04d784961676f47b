"""The thing a question's facts converge on: the answer to "which X did this, that and the other?".

A question asking for a named thing by describing several facts about it ("Who is the individual
that, according to The Verge, portrayed a reliable image in the cryptocurrency sector, admitted
challenges in overseeing a major exchange, and is accused by TechCrunch of ...?") is answered by no
single passage: each fact sits in another article, and the relevance model scores the question,
and its parts (fragments cut at commas and conjunctions), low against every one. What answers it is
the name the passages closest to each part have in common. So, for such a question, when one name
(not one the question itself uses) is given by the sentences the model ranks closest to every one
of its parts, that name is the answer, shown with, per part, the closest sentence naming it.

A name most of the caller's documents give is the collection's context, not an answer: a company's
own name, which every one of its policies states, is close to every part of any question about
them. So a name converges only when the share of the caller's documents naming it is known (the
caller passes `document_share`, counted within the caller's scope: kb.retrieval.documents_naming)
and at most COMMON_SHARE; without a way to count, nothing converges.

`converging_name` finds it from a judgement (agents.judge.Judgement: each part's candidate
sentences scored by the model, best first); the offline provider answers with it only when nothing
else answered the question and the anchors hold (agents.providers.offline). Pure but for the
judgement it is given: no database, no model call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agents.anchors import sides_compared
from agents.judge import Judgement, Quote
from agents.lexical import asked_sentences, mentions, terms
from agents.messages import DocumentShare
from agents.sufficiency import names_in

CLOSEST = 3  # a part's closest sentences (by the model's score) whose names count for it
MIN_PARTS = 2  # a question of fewer parts has no facts to converge
# A name more than this share of the caller's documents give is their common context ("Kestrel" in every
# one of Kestrel's policies), not what a question describes. Not fitted: "most documents". On MultiHop-RAG's
# 609 articles the most common name converged on ("Google") is in 0.18 of them.
COMMON_SHARE = 0.5
# A wh-word opening a sentence or a clause after a comma ("Who is ...", "Considering X, which ..."), after
# a preposition or not; not a relative pronoun after a noun ("a charter boat which is expensive").
_ASKS_FOR_A_THING = re.compile(r"(?:^|,)\s*(?:(?:in|of|at|for|from|by|to|with|on)\s+)?(?:who|whom|which|what)\b", re.I)
_POSSESSIVE = re.compile(r"[’']s$")


@dataclass(frozen=True)
class Convergence:
    """The name every part's closest sentences give, and per part the closest one naming it."""

    name: str
    quotes: list[tuple[str, Quote]]  # (part, quote)


def asks_for_a_thing(question: str) -> bool:
    """Does the question ask for something by a wh-word (who, which, what) opening one of its asking
    sentences or a clause of one, not for a yes or no, a time, a place or a reason?"""
    return any(_ASKS_FOR_A_THING.search(s.strip()) for s in asked_sentences(question))


def _name(raw: str) -> str:
    return _POSSESSIVE.sub("", raw.strip(" .,;:'’\"“”"))


def _names(sentence: str, question_terms: set[str]) -> set[str]:
    """The names a sentence gives that the question does not use itself."""
    out = set()
    for raw in names_in(sentence):
        name = _name(raw)
        if len(name) > 2 and not terms(name) <= question_terms:
            out.add(name)
    return out


def converging_name(judged: Judgement, document_share: DocumentShare | None, values: Iterable[str] = (), *,
                    min_parts: int = MIN_PARTS) -> Convergence | None:
    """The name the CLOSEST sentences of every part of `judged.question` give, when the question asks
    for a thing and has at least `min_parts` parts; None otherwise, when no name is given for every
    part, or without `document_share` (names -> the share of the caller's documents giving each).
    Nor for a question setting named things side by side (agents.anchors.sides_compared, `values`
    the facet values): it asks about the things it names ("Which came first, A or B?", "What type of
    film are both A and B?"), not for one it describes. A name more than COMMON_SHARE of the
    documents give does not count. Among several, the one given by the most distinct sentences,
    then the longest, and then the longest that holds it and converges too ("Sam Bankman-Fried" for
    "Bankman-Fried")."""
    parts = judged.parts
    if document_share is None or len(parts) < min_parts or not asks_for_a_thing(judged.question) or \
            sides_compared(judged.question, [p.part for p in parts], values):
        return None
    asked = terms(judged.question)
    closest = [p.quotes[:CLOSEST] for p in parts]
    candidates = {n for quotes in closest for q in quotes for n in _names(q.sentence, asked)}
    ranked: list[tuple[int, int, str]] = []
    for name in candidates:
        if all(any(mentions(q.sentence, name) for q in quotes) for quotes in closest):
            said = {q.sentence for quotes in closest for q in quotes if mentions(q.sentence, name)}
            ranked.append((len(said), len(name), name))
    if ranked:
        shares = document_share([n for _s, _l, n in ranked])
        ranked = [r for r in ranked if shares.get(r[2], 1.0) <= COMMON_SHARE]
    if not ranked:
        return None
    name = max(ranked)[2]
    # The longest name holding the chosen one that also converges ("Sam Bankman-Fried" for "Bankman-Fried").
    name = max((n for _s, _l, n in ranked if mentions(n, name)), key=len)
    return Convergence(name, [(p.part, next(q for q in quotes if mentions(q.sentence, name)))
                              for p, quotes in zip(parts, closest, strict=True)])


def quotes_once(convergence: Convergence) -> Sequence[tuple[str, Quote]]:
    """The convergence's quotes, a sentence quoted once (for the first part it is closest to)."""
    seen: set[str] = set()
    out = []
    for part, quote in convergence.quotes:
        if quote.sentence not in seen:
            seen.add(quote.sentence)
            out.append((part, quote))
    return out
