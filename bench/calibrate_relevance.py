"""Choose the relevance model's thresholds on the fit halves of the evaluation sets.

A question is answered (agents.judge.Judgement.settled) when the word rules found an answer and
the best passage for the question scores at least `answers`, or, with none found by words, when
the best passage scores at least `sure`; in both cases only if the evidence holds the names the
question pins down (agents.anchors); a question pinning down `pinned` names or more, all held, is
answered whatever its scores (agents.anchors.PINNED_ENOUGH). Each set's fit half is run with the model and
`GROUNDED_JUDGE_TRACE` set: the offline provider appends, for every answer it composes, the best
passage's score and whether the word rules found an answer (agents.judge.trace), e.g.:

    GROUNDED_RELEVANCE_MODEL=packaged GROUNDED_JUDGE_TRACE=/tmp/cal/hotpotqa.jsonl \\
        manage.py evaluate --sets hotpotqa --half fit --strategies auto --out /tmp/cal/hotpotqa

This script replays the decisions a pair (answers, sure) would make from the last answer of each
question and prints, per pair, each set's share of unanswerable questions declined and of
answerable ones abstained; it picks the pair with the best mean balanced accuracy over the sets,
every set weighing the same (a threshold that helps one set by hurting another is not preferred).
The research before the answer does not depend on the thresholds' values beyond `answers` (between
rounds the model can only find the evidence short), so the replay is close to a run; the report
halves are measured afterwards, with the chosen values, by `manage.py evaluate --half report`.

    python bench/calibrate_relevance.py hotpotqa=/tmp/cal/hotpotqa.jsonl emanual=/tmp/cal/emanual.jsonl ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

import django  # noqa: E402

django.setup()

from agents.anchors import PINNED_ENOUGH  # noqa: E402
from bench.evaluation.dataset import load_corpus, load_questions  # noqa: E402
from bench.evaluation.suite import select  # noqa: E402

GRID = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99]


def questions_by_text(set_name: str) -> dict[str, tuple[str, bool]]:
    """Question text -> (qid, whether the set gives it evidence; False: the right outcome is to decline)."""
    (chosen,) = select(set_name)
    corpus = load_corpus(chosen.corpus)
    return {q.question: (q.qid, bool(q.gold)) for q in load_questions(chosen.questions, corpus)}


def last_judgements(trace: Path) -> dict[str, tuple[float, bool, bool, int]]:
    """Question text -> (the best passage's score for it, whether the word rules found an answer,
    whether the evidence holds the question's names, how many it pins down), from the last answer
    decided for it in the trace (agents.judge.trace; a line written before the names were traced
    counts as holding them, and as pinning none down)."""
    out: dict[str, tuple[float, bool, bool, int]] = {}
    for line in trace.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out[row["question"]] = (float(row["best_passage"]), bool(row["found_by_words"]), bool(row.get("anchored", True)),
                                int(row.get("pinned", 0)))
    return out


def rates(data: tuple, answers: float, sure: float, pinned: int = PINNED_ENOUGH) -> tuple[float, float, int, int]:
    """(nulls declined, answerable abstained, nulls, answerable) for the thresholds and the names a
    question must pin down to be answered on them alone."""
    judged, questions = data
    declined = abstained = nulls = answerables = 0
    for question, (_qid, answerable) in questions.items():
        if question not in judged:
            continue  # not in the half (or the sample) that was run
        passage, found, anchored, named = judged[question]
        answered = anchored and (passage >= (answers if found else sure) or named >= pinned)
        if answerable:
            answerables += 1
            abstained += not answered
        else:
            nulls += 1
            declined += not answered
    return (declined / nulls if nulls else float("nan"), abstained / answerables if answerables else float("nan"),
            nulls, answerables)


def row(data: list, answers: float, sure: float, pinned: int = PINNED_ENOUGH) -> tuple[list[str], float]:
    """One table row's cells (each set's nulls declined and answerable abstained) and the mean, over
    the sets weighing the same, of each set's balanced accuracy (its two shares averaged)."""
    cells, balanced = [], []
    for _name, one in data:
        declined, abstained, nulls, answerables = rates(one, answers, sure, pinned)
        cells += [f"{declined:.3f}", f"{abstained:.3f}"]
        shares = [x for x in (declined if nulls else None, 1 - abstained if answerables else None) if x is not None]
        balanced.append(sum(shares) / len(shares))
    return cells, sum(balanced) / len(balanced)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", metavar="SET=TRACE")
    args = parser.parse_args()
    data = [(name, (last_judgements(Path(trace)), questions_by_text(name)))
            for name, trace in (item.split("=", 1) for item in args.sets)]
    columns = " | ".join(f"{n} declined | {n} abstained" for n, _ in data) + " | mean balanced accuracy |"
    print("| answers | sure | " + columns)
    print("|---|---|" + "---|---|" * len(data) + "---|")
    best = (-1.0, 0.0, 0.0)
    for answers in GRID:
        for sure in (s for s in GRID if s >= answers):
            cells, mean = row(data, answers, sure)
            best = max(best, (mean, answers, sure))
            print(f"| {answers:.2f} | {sure:.2f} | " + " | ".join(cells) + f" | {mean:.3f} |")
    for name, one in data:
        _d, _a, nulls, answerables = rates(one, 0.5, 0.5)
        print(f"{name}: {answerables} answerable and {nulls} unanswerable questions")
    print(f"chosen: answers = {best[1]:.2f}, sure = {best[2]:.2f} (mean balanced accuracy {best[0]:.3f})")
    # With that pair: how many names a question must pin down, all held, to be answered on them alone.
    print("\n| names pinned | " + columns)
    print("|---|" + "---|---|" * len(data) + "---|")
    for pinned in (1, 2, 3, 4, 5, 6, 99):
        cells, mean = row(data, best[1], best[2], pinned)
        print(f"| {'never' if pinned == 99 else pinned} | " + " | ".join(cells) + f" | {mean:.3f} |")


if __name__ == "__main__":
    main()
