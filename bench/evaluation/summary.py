"""Per-question results -> figures by strategy and question type. Pure: no ORM.

Each figure is computed over the questions it applies to and is None where none do: retrieval
metrics and evidence recall over answerable questions, abstention over unanswerable ones, answer
accuracy over questions with a gold answer (an abstention counts as the answer "Insufficient
information.", the benchmark's gold answer for unanswerable questions). "All facts" is the share of
answerable questions whose final context holds every gold fact; answer containment is over answerable
questions with a gold answer, answer precision over the quotations of answers to answerable
questions; both judge any answering strategy, the offline provider's extractive answers included.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from bench.evaluation.metrics import RetrievalScores, lenient_correct, mean, percentile, strict_correct

ABSTAIN_OUTCOME = "not_enough_evidence"
ABSTAIN_TEXT = "Insufficient information."
RETRIEVAL_ONLY = "retrieved"  # outcome of the search:/facets: baselines, which retrieve but do not answer
ALL = "all"


@dataclass(frozen=True)
class QuestionResult:
    """What one strategy did with one question. Holds ids and numbers only, never corpus text."""

    qid: str
    question_type: str
    strategy: str
    answerable: bool
    outcome: str
    scores: RetrievalScores | None  # None for unanswerable questions
    context_size: int
    lenient: bool | None = None  # None: no gold answer, or the strategy generates no text
    strict: bool | None = None
    citations: int = 0
    citations_verified: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    relevance_ms: float = 0.0  # of it, the relevance model's scoring (rerank steps and inside provider calls)
    error: str = ""
    contained: bool | None = None  # gold short answer in the answer; None: not judged (no gold answer, not answerable, no answer)
    quotes: int = 0  # quotations followed by a citation, in the answer
    quotes_on_gold: int = 0  # of them, citing a chunk of a document that holds gold evidence
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> QuestionResult:
        """Inverse of as_dict (records.jsonl back into results, e.g. to merge shards)."""
        scores = data.get("scores")
        return cls(**{**data, "scores": RetrievalScores(**scores) if scores else None})


def judge_answer(*, answer: str, outcome: str, gold: str | None, generates_text: bool) -> tuple[bool | None, bool | None]:
    """(lenient, strict) correctness of one answer, None when it cannot be judged."""
    if gold is None or not generates_text:
        return None, None
    prediction = ABSTAIN_TEXT if outcome == ABSTAIN_OUTCOME else answer
    return lenient_correct(prediction, gold), strict_correct(prediction, gold)


def _figures(results: list[QuestionResult]) -> dict:
    """Figures of one group; abstention only for strategies that answer (retrieval-only baselines do not)."""
    answerable = [r for r in results if r.answerable and r.scores is not None]
    answerable_scores = [r.scores for r in answerable if r.scores is not None]
    unanswerable = [r for r in results if not r.answerable]
    judged = [r for r in results if r.lenient is not None]
    citations = sum(r.citations for r in results)
    verified = sum(r.citations_verified for r in results)
    latencies = [r.latency_ms for r in results]

    def score(name: str) -> float | None:
        return mean(getattr(r.scores, name) for r in answerable)

    answering = [r for r in answerable if r.outcome != RETRIEVAL_ONLY]
    quotes = sum(r.quotes for r in answering)

    return {
        "questions": len(results),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "hits_at_4": score("hits_at_4"),
        "hits_at_10": score("hits_at_10"),
        "mrr_at_10": score("mrr_at_10"),
        "map_at_10": score("map_at_10"),
        "evidence_recall": score("evidence_recall"),
        "all_facts": mean(float(s.evidence_recall >= 1.0) for s in answerable_scores),
        "null_abstained": mean(float(r.outcome == ABSTAIN_OUTCOME) for r in unanswerable if r.outcome != RETRIEVAL_ONLY),
        "answerable_abstained": mean(float(r.outcome == ABSTAIN_OUTCOME) for r in answerable if r.outcome != RETRIEVAL_ONLY),
        "accuracy_lenient": mean(float(bool(r.lenient)) for r in judged),
        "accuracy_strict": mean(float(bool(r.strict)) for r in judged),
        "answer_containment": mean(float(r.contained) for r in answering if r.contained is not None),
        "answer_precision": sum(r.quotes_on_gold for r in answering) / quotes if quotes else None,
        "quotes_per_answer": mean(r.quotes for r in answering) if answering else None,
        "citations": citations,
        "citations_verified_share": verified / citations if citations else None,
        "citations_unverified": citations - verified,
        "mean_context_size": mean(r.context_size for r in results),
        "model_calls": sum(r.model_calls for r in results),
        "tool_calls": sum(r.tool_calls for r in results),
        "tokens": sum(r.input_tokens + r.output_tokens for r in results),
        "model_calls_per_question": mean(r.model_calls for r in results),
        "tool_calls_per_question": mean(r.tool_calls for r in results),
        "tokens_per_question": mean(r.input_tokens + r.output_tokens for r in results),
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
        "relevance_ms_p50": percentile([r.relevance_ms for r in results], 50),
        "relevance_share": sum(r.relevance_ms for r in results) / sum(latencies) if sum(latencies) else None,
        "errors": sum(1 for r in results if r.error),
    }


def summarise(results: Iterable[QuestionResult]) -> dict[str, dict[str, dict]]:
    """{strategy: {"all" | question_type: figures}}, strategies and types in first-seen order."""
    grouped: dict[str, dict[str, list[QuestionResult]]] = {}
    for r in results:
        by_type = grouped.setdefault(r.strategy, {ALL: []})
        by_type[ALL].append(r)
        by_type.setdefault(r.question_type, []).append(r)
    return {strategy: {qtype: _figures(rs) for qtype, rs in by_type.items()} for strategy, by_type in grouped.items()}


def paired_with_base(results: Iterable[QuestionResult], kind: str) -> dict[str, list[tuple[QuestionResult, QuestionResult]]]:
    """For each strategy named "<kind>:<base>" whose base strategy also ran: (its result, the base's)
    per question both ran, in the first's order (conversation and history modes compare a question
    asked in a thread with the same question asked alone)."""
    by_strategy: dict[str, dict[str, QuestionResult]] = {}
    for r in results:
        by_strategy.setdefault(r.strategy, {})[r.qid] = r
    out: dict[str, list[tuple[QuestionResult, QuestionResult]]] = {}
    for strategy, mine in by_strategy.items():
        prefix, _, base = strategy.partition(":")
        if prefix == kind and base in by_strategy:
            out[strategy] = [(r, alone) for qid, r in mine.items() if (alone := by_strategy[base].get(qid)) is not None]
    return out
