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
SQuAD-style normalisation of the extracted answer or of its first sentence.
"""

from __future__ import annotations

import math
import re
import string
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
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCT))
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
