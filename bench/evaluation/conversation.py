"""Conversation mode of `manage.py evaluate`: a question asked as the second turn of a thread.

A multi-hop question names the thing its first hop is about ("... the company where Ravi Sethi
worked ..."). The thread built here asks about that thing first ("Tell me about Ravi Sethi.") and
then asks the question with the name replaced by a pronoun ("... the company where he worked ...").
The second turn must be resolved against the thread (agents.conversations) before it can be
searched; its evidence recall is compared with the same question asked standalone, on the same
questions, in the same run.

Which name: the question's longest mention of one of its gold documents' titles (a trailing
parenthesis such as "(1945)" dropped), else the longest capitalised name in the question that one
of its gold documents' titles contains. A question that already holds a third-person pronoun is
left out: the follow-up would then have two candidate referents. Which pronoun: the one that document's own text uses most for its
subject (he / she / they / it). Questions with neither are left out of conversation mode (the
report says how many). Pure text: no ORM, no dataset-specific wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agents.conversation_text import PRONOUN, names
from bench.evaluation.dataset import CorpusDoc, Question
from bench.evaluation.summary import QuestionResult, paired_with_base

_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_PRONOUN_FORMS = {  # subject, object and possessive forms
    "he": ("he", "him", "his"), "she": ("she", "her", "her"), "they": ("they", "them", "their"), "it": ("it", "it", "its"),
}
_PREPOSITIONS = frozenset("by of with to for on in from than about at into over under after before against between".split())
_COUNTED = {
    "he": re.compile(r"\b(?:he|his|him)\b", re.I),
    "she": re.compile(r"\b(?:she|her|hers)\b", re.I),
    "they": re.compile(r"\b(?:they|their|them)\b", re.I),
    "it": re.compile(r"\b(?:it|its)\b", re.I),
}
OPENING = "Tell me about {name}."


@dataclass(frozen=True)
class TwoTurns:
    """A question as a thread: the first turn, the follow-up, and the name the follow-up refers back to."""

    first: str
    followup: str
    name: str


def split_question(question: Question, docs: Mapping[str, CorpusDoc]) -> TwoTurns | None:
    """The question as two turns, or None when it names nothing of its gold documents."""
    gold = [docs[g.doc_key] for g in question.gold if g.doc_key is not None and g.doc_key in docs]
    if not gold:
        return None
    text = question.question
    if PRONOUN.search(text):
        return None  # a pronoun of its own would be a second referent: the follow-up must have one
    found: list[tuple[str, CorpusDoc]] = []
    for doc in gold:
        title = _PAREN.sub("", doc.title).strip()
        if len(title) > 2 and (m := _mention(text, title)):
            found.append((m.group(0), doc))  # as the question spells it
    if not found:
        for name in names(text):
            holder = next((d for d in gold if _mention(d.title, name)), None)
            if holder is not None and len(name) > 2:
                found.append((name, holder))
    if not found:
        return None
    name, doc = max(found, key=lambda pair: len(pair[0]))
    followup = refer_back(text, name, pronoun_for(doc))
    if followup == text:
        return None
    return TwoTurns(first=OPENING.format(name=name), followup=followup, name=name)


def pronoun_for(doc: CorpusDoc) -> str:
    """The pronoun the document's own text uses most (he, she, they or it; it on a tie or none)."""
    counts = {p: len(rx.findall(doc.text)) for p, rx in _COUNTED.items()}
    best = max(counts, key=lambda p: (counts[p], p == "it"))
    return best if counts[best] else "it"


def refer_back(text: str, name: str, pronoun: str) -> str:
    """`text` with its first mention of `name` (and a "the" before it) replaced by `pronoun`, possessive kept."""
    subject, obj, possessive = _PRONOUN_FORMS[pronoun]
    m = _mention(text, name)
    if m is None:
        return text
    start, end = m.start(), m.end()
    word = subject
    if text[end:end + 2] in ("'s", "’s"):
        word, end = possessive, end + 2
    before = text[:start]
    the = re.search(r"\b(?:the|The)\s+$", before)
    if the:
        before = before[:the.start()]
    previous_word = before.split()[-1].casefold() if before.split() else ""
    if word == subject and previous_word in _PREPOSITIONS:
        word = obj
    if not before.strip() or before.rstrip().endswith((".", "?", "!")):
        word = word.capitalize()
    return before + word + text[end:]


def _mention(text: str, name: str) -> re.Match | None:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text, re.I)


def conversation_figures(results: Iterable[QuestionResult]) -> dict[str, dict]:
    """Per conversation strategy, on the questions both it and its standalone strategy answered:
    evidence recall of the second turn and of the standalone question, their difference in points,
    and how often the follow-up was resolved back to the name it referred to."""
    figures = {}
    for strategy, both in paired_with_base(results, "conversation").items():
        # (second turn, its evidence recall, the standalone question's), for questions both scored
        pairs = [(t, t.scores.evidence_recall, standalone.scores.evidence_recall) for t, standalone in both
                 if t.scores is not None and standalone.scores is not None]
        if not pairs:
            continue
        second = sum(recall for _, recall, _ in pairs) / len(pairs)
        alone = sum(recall for _, _, recall in pairs) / len(pairs)
        resolved = sum(bool(t.extra.get("resolved_back")) for t, _, _ in pairs)
        figures[strategy] = {"questions": len(pairs), "second_turn_recall": round(second, 4), "standalone_recall": round(alone, 4),
                             "difference_points": round(100 * (second - alone), 1), "resolved_back": round(resolved / len(pairs), 4)}
    return figures
