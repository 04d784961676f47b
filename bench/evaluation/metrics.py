"""Answer-quality metrics. Pure: no ORM, no Django; inputs are plain texts and keys.

Retrieval metrics follow MultiHop-RAG's official `retrieval_evaluate.py` exactly, so figures sit
beside the paper's Table 5: a context chunk is relevant when it contains a gold fact after spaces
and newlines are removed from both; Hits@K counts questions with at least one relevant chunk in
the top K; MRR@10 uses the first relevant rank; MAP@10 adds, at each relevant rank, the number of
gold facts seen there for the first time divided by the rank, and divides the sum by
min(#gold facts, 10). Gold items without a fact (tenant question sets naming expected documents)
match any chunk of that document instead.

Answer accuracy follows the official `qa_evaluate.py` (lenient: the lower-cased, whitespace-split
prediction shares at least one word with the gold answer) plus a strict variant: exact match after
SQuAD-style normalisation of the extracted answer or of its first sentence. Answer containment
(the gold short answer occurs in the answer) and answer precision (quoted sentences that come from
documents holding gold evidence) need no generated text, so they also judge the offline provider's
extractive answers.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

K_HITS_SMALL = 4
K_CONTEXT = 10


@dataclass(frozen=True)
class GoldItem:
    """One piece of expected evidence: a fact sentence and/or the key of the document holding it."""

    fact: str | None = None
    doc_key: str | None = None

    def key(self) -> str:
        """Identity used for "seen for the first time" (the official script compares the stripped fact)."""
        return strip_spaces(self.fact) if self.fact else f"doc:{self.doc_key}"


@dataclass(frozen=True)
class ContextChunk:
    """A chunk as the metric sees it: its text and the key of its document."""

    text: str
    doc_key: str = ""


@dataclass(frozen=True)
class RetrievalScores:
    hits_at_4: float
    hits_at_10: float
    mrr_at_10: float
    map_at_10: float
    evidence_recall: float


def strip_spaces(text: str) -> str:
    """The official normalisation: remove spaces and newlines, nothing else."""
    return text.replace(" ", "").replace("\n", "")


def match_matrix(context: Sequence[ContextChunk], gold: Sequence[GoldItem]) -> list[list[bool]]:
    """matrix[rank][i]: does context chunk `rank` hold gold item `i`."""
    stripped = [strip_spaces(c.text) for c in context]
    facts = [strip_spaces(g.fact) if g.fact else None for g in gold]
    return [
        [(fact in text) if fact is not None else (bool(g.doc_key) and chunk.doc_key == g.doc_key)
         for fact, g in zip(facts, gold, strict=True)]
        for text, chunk in zip(stripped, context, strict=True)
    ]


def retrieval_scores(context: Sequence[ContextChunk], gold: Sequence[GoldItem], *, k: int = K_CONTEXT) -> RetrievalScores:
    """Scores of one ranked context against one question's gold evidence (which must not be empty)."""
    if not gold:
        raise ValueError("retrieval metrics are defined only for questions with gold evidence")
    matrix = match_matrix(context[:k], gold)
    keys = [g.key() for g in gold]
    hits4 = hits10 = False
    first_rank: int | None = None
    ap_sum = 0.0
    found: set[str] = set()
    for rank, row in enumerate(matrix, start=1):
        if not any(row):
            continue
        hits10 = True
        hits4 = hits4 or rank <= K_HITS_SMALL
        first_rank = first_rank or rank
        fresh = 0
        for hit, key in zip(row, keys, strict=True):
            if hit and key not in found:
                found.add(key)
                fresh += 1
        ap_sum += fresh / rank
    return RetrievalScores(
        hits_at_4=float(hits4),
        hits_at_10=float(hits10),
        mrr_at_10=1.0 / first_rank if first_rank else 0.0,
        map_at_10=ap_sum / min(len(gold), 10),
        evidence_recall=evidence_recall(context[:k], gold, matrix=matrix),
    )


def evidence_recall(context: Sequence[ContextChunk], gold: Sequence[GoldItem], *, matrix: list[list[bool]] | None = None) -> float:
    """Share of the distinct gold items present anywhere in the context (order does not matter)."""
    if not gold:
        raise ValueError("evidence recall is defined only for questions with gold evidence")
    matrix = matrix if matrix is not None else match_matrix(context, gold)
    keys = [g.key() for g in gold]
    present = {key for i, key in enumerate(keys) if any(row[i] for row in matrix)}
    return len(present) / len(set(keys))


# --- Answers --------------------------------------------------------------------------------------

_OFFICIAL_ANSWER = re.compile(r'The answer to the question is "(.*?)"')
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "\u2018\u2019\u201c\u201d")
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)", re.S)


def extract_answer(text: str) -> str:
    """The official extraction: the quoted answer when the model used the template, else all text."""
    found = _OFFICIAL_ANSWER.search(text)
    return found.group(1) if found else text


def lenient_correct(prediction: str, gold: str) -> bool:
    """Official qa_evaluate.py: at least one shared lower-cased whitespace-separated word."""
    return bool(set(extract_answer(prediction).lower().split()) & set(gold.lower().split()))


def normalise_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces. Punctuation outside
    ASCII that stands between words (a dash: "May 1, 1989—was") separates them like a space
    (SQuAD's list is ASCII only, which would read "1989—was" as one word); curly quotes go like ASCII ones."""
    text = "".join(" " if ord(ch) > 127 and unicodedata.category(ch).startswith("P") else ch for ch in text.translate(_PUNCT))
    text = _ARTICLES.sub(" ", text.lower())
    return " ".join(text.split())


def strict_correct(prediction: str, gold: str) -> bool:
    """Exact match after normalisation, of the extracted answer or of its first sentence."""
    answer = extract_answer(prediction).strip()
    target = normalise_answer(gold)
    if not target:
        return False
    candidates = [answer, answer.splitlines()[0] if answer else ""]
    first = _FIRST_SENTENCE.match(answer)
    if first:
        candidates.append(first.group(1))
    return any(normalise_answer(c) == target for c in candidates)


_YES_NO = ("yes", "no")
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]*)[\"\u201d]")
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")
_QUOTE_CITED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{3,}?)[\"\u201d]\s*[,.;:]?\s*"
                          r"\[\s*c:\s*(\d+(?:\s*[,;]\s*(?:c:)?\s*\d+)*)\s*\]", re.I)


def _without_question_echo(answer: str, question: str) -> str:
    """The answer minus the pieces that only repeat the question.

    An answer's lines and quoted passages that, normalised, are part of the question (the offline
    provider heads each part of its answer with the part's words; "not found" lists quote them)
    are dropped, so a comparison answer is not credited for restating "A or B".
    """
    asked = f" {normalise_answer(question)} "
    kept = []
    for line in answer.splitlines():
        line = _QUOTED.sub(lambda m: "" if _echoes(m.group(1), asked) else m.group(0), line)
        if not _echoes(_LIST_MARK.sub("", line), asked):
            kept.append(line)
    return "\n".join(kept)


def _echoes(piece: str, asked: str) -> bool:
    norm = normalise_answer(piece)
    return bool(norm) and f" {norm} " in asked


def stated_yes_no(answer: str) -> str | None:
    """The yes/no an answer states: outside quotations (a quoted sentence saying "no" is evidence,
    not a verdict), the first yes or no word; None when it states neither."""
    words = normalise_answer(_QUOTED.sub(" ", answer)).split()
    return next((w for w in words if w in _YES_NO), None)


def answer_contains(answer: str, gold: str, *, question: str = "") -> bool | None:
    """Does the answer hold the gold short answer? SQuAD-normalised, on whole words, after removing
    what only repeats the question. A yes/no gold answer must be the yes/no the answer states
    (`stated_yes_no`). None when the gold answer normalises to nothing."""
    target = normalise_answer(gold)
    if not target:
        return None
    body = _without_question_echo(extract_answer(answer), question) if question else extract_answer(answer)
    if target in _YES_NO:
        return stated_yes_no(body) == target
    return f" {target} " in f" {normalise_answer(body)} "


def quoted_citations(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    """The answer's quotations with the chunk ids cited right after them: '"..." [c:1, c:2]'."""
    return [(m.group(1).strip(), tuple(int(i) for i in re.findall(r"\d+", m.group(2)))) for m in _QUOTE_CITED.finditer(answer)]


def quote_precision_counts(answer: str, chunk_docs: dict[int, str], gold_docs: Iterable[str]) -> tuple[int, int]:
    """(quoted sentences, those citing a chunk of a document that holds gold evidence).

    `chunk_docs` maps a cited chunk id to its document's key (a chunk id it lacks counts as not
    gold). A quotation citing several chunks counts once, as gold when any of them is.
    """
    gold = set(gold_docs)
    quotes = quoted_citations(answer)
    on_gold = sum(1 for _, ids in quotes if any(chunk_docs.get(i) in gold for i in ids))
    return len(quotes), on_gold


# --- Aggregation ----------------------------------------------------------------------------------

def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean, None for no values (a metric that does not apply is not a zero)."""
    items = list(values)
    return sum(items) / len(items) if items else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]; None for no values."""
    items = sorted(values)
    if not items:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must be within [0, 100]")
    pos = (len(items) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return items[lo] + (items[hi] - items[lo]) * (pos - lo)
