"""Choose the relevance model's thresholds on the fit halves of the evaluation sets.

A question is answered (agents.judge.Judgement.settled) when the word rules found an answer and
the best passage for the question scores at least `answers`, or, with none found by words, when
the best passage scores at least `sure`; in both cases only if the evidence holds the names the
question pins down (agents.anchors); a question pinning down `pinned` names or more, all held, is
answered whatever its scores (agents.anchors.PINNED_ENOUGH); a settled question the words found no
answer for is answered with the model's own picks unless they decline; and one left unanswered is
answered by the name its parts' closest sentences converge on (agents.consensus). Each set's fit
half is run with the model and `GROUNDED_JUDGE_TRACE` set: the offline provider appends, for every
answer it composes, what it was decided on (agents.judge.trace: the best passage's score, whether
the word rules found an answer, the names, whether the model's picks decline and whether the parts
converge, the last two worked out whatever the thresholds decided), e.g.:

    GROUNDED_RELEVANCE_MODEL=packaged GROUNDED_JUDGE_TRACE=/tmp/cal/hotpotqa.jsonl \\
        manage.py evaluate --sets hotpotqa --half fit --strategies auto --out /tmp/cal/hotpotqa

This script replays the decisions a pair (answers, sure) would make from the last answer of each
question and prints, per pair, each set's share of unanswerable questions declined and of
answerable ones abstained, and the pair with the best mean balanced accuracy over the sets (every
set weighing the same); it chooses the pair with the best mean among those that make no set worse
than the pair in use (`--current`, default the packaged model's): a threshold that helps one set
by hurting another is not kept, however the mean moves.
At the thresholds the trace was made with, the replay makes every question's decision the run made
(answered or declined; `--check SET=RECORDS` compares it per question with the run's records). The research before the
answer does not depend on the thresholds' values beyond `answers` (between rounds the model can
only find the evidence short), so under other values the replay is close to a run; the report
halves are measured afterwards, with the chosen values, by `manage.py evaluate --half report`.

    python bench/calibrate_relevance.py hotpotqa=/tmp/cal/hotpotqa.jsonl emanual=/tmp/cal/emanual.jsonl ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

import django  # noqa: E402

django.setup()

from agents.anchors import PINNED_ENOUGH  # noqa: E402
from bench.evaluation.dataset import load_corpus, load_questions  # noqa: E402
from bench.evaluation.suite import select  # noqa: E402
from kb.relevance import CALIBRATIONS, PACKAGED_NAME  # noqa: E402

GRID = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99]


def questions_by_text(set_name: str) -> dict[str, tuple[str, bool]]:
    """Question text -> (qid, whether the set gives it evidence; False: the right outcome is to decline)."""
    (chosen,) = select(set_name)
    corpus = load_corpus(chosen.corpus)
    return {q.question: (q.qid, bool(q.gold)) for q in load_questions(chosen.questions, corpus)}


class Judged(NamedTuple):
    """What one answer was decided on (agents.judge.trace)."""

    passage: float  # the best passage's score for the whole question
    found: bool  # the word rules found an answer
    anchored: bool  # the evidence holds every name the question pins down
    pinned: int  # how many names it pins down
    converged: bool  # the parts' closest sentences converge on a name (agents.consensus)
    own_declines: bool  # the model's own picks, composed, decline (a part unquoted, a side unanswered...)


def last_judgements(trace: Path) -> dict[str, Judged]:
    """Question text -> what its last answer in the trace was decided on (agents.judge.trace). A line
    written before a field was traced reads as the decision did then: holding the names, pinning
    none down, converging on no name, the model's picks not declining."""
    out: dict[str, Judged] = {}
    for line in trace.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out[row["question"]] = Judged(float(row["best_passage"]), bool(row["found_by_words"]), bool(row.get("anchored", True)),
                                      int(row.get("pinned", 0)), bool(row.get("converged", False)),
                                      bool(row.get("own_declines", False)))
    return out


def answered(one: Judged, answers: float, sure: float, pinned: int = PINNED_ENOUGH) -> bool:
    """The offline provider's decision (agents.providers.offline.compose_answer) under these thresholds:
    settled when the best passage reaches `answers` (the words found an answer) or `sure` (they did
    not), or when the question pins down `pinned` names; a settled question is answered with the
    words' answer, or with the model's own picks unless they decline; one not answered so is
    answered by the name its parts converge on; and nothing is answered whose evidence misses a name."""
    settled = one.passage >= (answers if one.found else sure) or one.pinned >= pinned
    return one.anchored and ((settled and (one.found or not one.own_declines)) or one.converged)


def rates(data: tuple, answers: float, sure: float, pinned: int = PINNED_ENOUGH) -> tuple[float, float, int, int]:
    """(nulls declined, answerable abstained, nulls, answerable) for the thresholds and the names a
    question must pin down to be answered on them alone."""
    judged, questions = data
    declined = abstained = nulls = answerables = 0
    for question, (_qid, answerable) in questions.items():
        if question not in judged:
            continue  # not in the half (or the sample) that was run
        stands = answered(judged[question], answers, sure, pinned)
        if answerable:
            answerables += 1
            abstained += not stands
        else:
            nulls += 1
            declined += not stands
    return (declined / nulls if nulls else float("nan"), abstained / answerables if answerables else float("nan"),
            nulls, answerables)


def row(data: list, answers: float, sure: float, pinned: int = PINNED_ENOUGH) -> tuple[list[float], float]:
    """One table row's figures (each set's nulls declined and answerable abstained) and the mean, over
    the sets weighing the same, of each set's balanced accuracy (its two shares averaged)."""
    figures, balanced = [], []
    for _name, one in data:
        declined, abstained, nulls, answerables = rates(one, answers, sure, pinned)
        figures += [declined, abstained]
        shares = [x for x in (declined if nulls else None, 1 - abstained if answerables else None) if x is not None]
        balanced.append(sum(shares) / len(shares))
    return figures, sum(balanced) / len(balanced)


def no_set_worse(figures: list[float], than: list[float]) -> bool:
    """Does no set decline fewer nulls or abstain on more answerable questions than under `than`?
    (A threshold that helps one set by hurting another is not kept, however the mean moves.)"""
    for i, (now, before) in enumerate(zip(figures, than, strict=True)):  # row()'s order: declined, abstained, per set
        if math.isnan(now) or math.isnan(before):
            continue  # a set without questions of that kind
        if (now < before - 1e-9) if i % 2 == 0 else (now > before + 1e-9):
            return False
    return True


def _cells(figures: list[float]) -> str:
    return " | ".join(f"{x:.3f}" for x in figures)


def disagreements(judged: dict[str, Judged], questions: dict[str, tuple[str, bool]], records: Path,
                  answers: float, sure: float) -> list[str]:
    """The qids whose `auto` run (a `manage.py evaluate --records` records.jsonl of the traced run)
    was answered or declined otherwise than the replay at (answers, sure) decides: none, when the
    trace was made at that pair and the replay follows the provider."""
    text_of = {qid: text for text, (qid, _answerable) in questions.items()}
    out = []
    for line in records.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        text = text_of.get(record["qid"])
        if record["strategy"] != "auto" or text is None:
            continue
        run_answered = record["outcome"] != "not_enough_evidence"
        if text not in judged or answered(judged[text], answers, sure) != run_answered:
            out.append(record["qid"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", metavar="SET=TRACE")
    configured = CALIBRATIONS[PACKAGED_NAME]
    parser.add_argument("--current", default=f"{configured.answers},{configured.sure}", metavar="ANSWERS,SURE",
                        help="the pair in use, which a new one must not make any set worse than (default: the packaged model's)")
    parser.add_argument("--check", action="append", default=[], metavar="SET=RECORDS",
                        help="a traced run's records.jsonl (evaluate --records): list the questions whose run decided "
                             "otherwise than the replay at the pair in use (the trace's pair)")
    args = parser.parse_args()
    answers_in_use, sure_in_use = (float(x) for x in args.current.split(","))
    data = [(name, (last_judgements(Path(trace)), questions_by_text(name)))
            for name, trace in (item.split("=", 1) for item in args.sets)]
    for name, records in (item.split("=", 1) for item in args.check):
        judged, questions = dict(data)[name]
        differ = disagreements(judged, questions, Path(records), answers_in_use, sure_in_use)
        print(f"{name}: the replay at ({answers_in_use:.2f}, {sure_in_use:.2f}) decides {len(differ)} question(s) "
              f"otherwise than the run{': ' + ', '.join(differ) if differ else ''}")
    columns = " | ".join(f"{n} declined | {n} abstained" for n, _ in data) + " | mean balanced accuracy |"
    print("| answers | sure | " + columns)
    print("|---|---|" + "---|---|" * len(data) + "---|")
    in_use, in_use_mean = row(data, answers_in_use, sure_in_use)
    best = (-1.0, 0.0, 0.0)
    kept = (in_use_mean, answers_in_use, sure_in_use)
    for answers in GRID:
        for sure in (s for s in GRID if s >= answers):
            figures, mean = row(data, answers, sure)
            best = max(best, (mean, answers, sure))
            if no_set_worse(figures, in_use):
                kept = max(kept, (mean, answers, sure))
            print(f"| {answers:.2f} | {sure:.2f} | " + _cells(figures) + f" | {mean:.3f} |")
    for name, one in data:
        _d, _a, nulls, answerables = rates(one, 0.5, 0.5)
        print(f"{name}: {answerables} answerable and {nulls} unanswerable questions")
    print(f"in use: answers = {answers_in_use:.2f}, sure = {sure_in_use:.2f} (mean balanced accuracy {in_use_mean:.3f})")
    print(f"best mean: answers = {best[1]:.2f}, sure = {best[2]:.2f} (mean balanced accuracy {best[0]:.3f})")
    print(f"chosen, no set worse than in use: answers = {kept[1]:.2f}, sure = {kept[2]:.2f} (mean balanced accuracy {kept[0]:.3f})")
    # With that pair: how many names a question must pin down, all held, to be answered on them alone.
    print("\n| names pinned | " + columns)
    print("|---|" + "---|---|" * len(data) + "---|")
    for pinned in (1, 2, 3, 4, 5, 6, 99):
        figures, mean = row(data, kept[1], kept[2], pinned)
        print(f"| {'never' if pinned == 99 else pinned} | " + _cells(figures) + f" | {mean:.3f} |")


if __name__ == "__main__":
    main()
