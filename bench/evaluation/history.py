"""History replay of `manage.py evaluate --history`: a question asked as the last turn of the
conversation its set gives it. Pure: no ORM.

A question line may carry the conversation's earlier turns (`history`, bench.evaluation.dataset).
They are replayed as the thread a follow-up is made standalone against (agents.conversations
`Thread`): each earlier user turn with the agent turn that followed it, as given by the set. The
given agent texts are not stored as runs: a Run is the audit record of an answer this product
produced, so storing a dataset's answer as one would fake the trail. Nor are the earlier user
turns asked through the agent: the answers the set's users reacted to are the given ones, and
asking every turn again would multiply the cost by the conversation's length for a thread that no
longer matches the question. So the last turn runs through the real turn runner
(agents.conversations.turn_runner: the traced `followup` call, then the strategy) over the given
thread, cut to the tenant's history budget like any thread, and is stored as a standalone run
whose `followup` step shows the history it saw. A question without history is asked alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from bench.evaluation.dataset import Turn
from bench.evaluation.summary import ABSTAIN_OUTCOME, QuestionResult, paired_with_base


def history_pairs(turns: Iterable[Turn]) -> list[tuple[str, str]]:
    """Earlier turns as (user text, agent text) pairs, oldest first: each user turn with the agent
    turns that followed it ("" when none did); agent turns before any user turn pair with ""."""
    pairs: list[list[str]] = []
    for turn in turns:
        if turn.speaker == "user" or not pairs:
            pairs.append([turn.text if turn.speaker == "user" else "", turn.text if turn.speaker != "user" else ""])
        else:
            pairs[-1][1] = f"{pairs[-1][1]}\n{turn.text}".strip()
    return [(question, answer) for question, answer in pairs]


def history_figures(results: Iterable[QuestionResult]) -> dict[str, dict]:
    """Per history:<strategy>, on the questions that carried earlier turns and were run both ways:
    evidence recall and abstention of the last turn replayed in its conversation and of the question
    asked alone (`<strategy>`). Figures only."""
    figures = {}
    for strategy, both in paired_with_base(results, "history").items():
        pairs = [(r, alone) for r, alone in both if r.extra.get("history_turns")]
        if not pairs:
            continue
        figures[strategy] = {"questions": len(pairs), **{
            f"{name}_{side}": _share(pairs, side_index, test)
            for name, test in (("evidence_recall", None), ("null_declined", False), ("answerable_abstained", True))
            for side_index, side in ((0, "history"), (1, "alone"))}}
    return figures


def _share(pairs: list[tuple[QuestionResult, QuestionResult]], side: int, answerable: bool | None) -> float | None:
    """Mean evidence recall (answerable None) or the abstention share over answerable / unanswerable questions."""
    if answerable is None:
        values = [scores.evidence_recall for p in pairs if (scores := p[side].scores) is not None]
    else:
        values = [float(p[side].outcome == ABSTAIN_OUTCOME) for p in pairs if p[side].answerable == answerable]
    return round(sum(values) / len(values), 4) if values else None
