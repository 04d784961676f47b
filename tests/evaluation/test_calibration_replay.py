"""bench/calibrate_relevance.py replays the judge's decisions from a trace (agents.judge.trace): an
answer stands only above its threshold and when the evidence holds the question's names; a
question pinning down enough names, all held, whatever its scores."""

from __future__ import annotations

import json

from bench.calibrate_relevance import answered as answered_at
from bench.calibrate_relevance import disagreements, last_judgements, no_set_worse, rates


def test_the_replay_declines_an_answer_whose_evidence_misses_a_name(tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"question": "words", "best_passage": 0.6, "found_by_words": True, "anchored": True},
        {"question": "words, a name missing", "best_passage": 0.9, "found_by_words": True, "anchored": False},
        {"question": "model", "best_passage": 0.8, "found_by_words": False, "anchored": True},
        {"question": "model, a name missing", "best_passage": 0.99, "found_by_words": False, "anchored": False},
        {"question": "an old trace line", "best_passage": 0.99, "found_by_words": False},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    judged = last_judgements(trace)
    questions = {q["question"]: (str(i), True) for i, q in enumerate(rows)}
    declined, abstained, nulls, answerable = rates((judged, questions), 0.5, 0.7)
    assert (nulls, answerable) == (0, 5)
    assert abstained == 2 / 5  # the two whose evidence misses a name
    assert rates((judged, questions), 0.5, 0.95)[1] == 3 / 5  # and the model's answer under a higher `sure`


def test_the_replay_answers_a_question_pinning_down_enough_names_all_held(tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"question": "three names held", "best_passage": 0.01, "found_by_words": False, "anchored": True, "pinned": 3},
        {"question": "three names, one missing", "best_passage": 0.01, "found_by_words": False, "anchored": False, "pinned": 3},
        {"question": "two names held", "best_passage": 0.01, "found_by_words": True, "anchored": True, "pinned": 2},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    questions = {q["question"]: (str(i), True) for i, q in enumerate(rows)}
    judged = last_judgements(trace)
    assert rates((judged, questions), 0.5, 0.7, pinned=3)[1] == 2 / 3
    assert rates((judged, questions), 0.5, 0.7, pinned=99)[1] == 1.0


def test_the_replay_follows_the_providers_decision_beyond_the_thresholds(tmp_path):
    """A settled question the words found nothing for is answered with the model's own picks unless
    they decline; one left unanswered is answered by the name its parts converge on (the consensus
    rule), but never when its evidence misses a name."""
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"question": "the model's picks decline", "best_passage": 0.99, "found_by_words": False, "anchored": True,
         "own_declines": True},
        {"question": "the words' answer stands whatever the model's picks", "best_passage": 0.99, "found_by_words": True,
         "anchored": True, "own_declines": True},
        {"question": "low, but the parts converge", "best_passage": 0.01, "found_by_words": False, "anchored": True,
         "converged": True},
        {"question": "converging, a name missing", "best_passage": 0.01, "found_by_words": False, "anchored": False,
         "converged": True},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    questions = {q["question"]: (str(i), True) for i, q in enumerate(rows)}
    judged = last_judgements(trace)
    answered = [answered_at(judged[q["question"]], 0.5, 0.7) for q in rows]
    assert answered == [False, True, True, False]
    assert rates((judged, questions), 0.5, 0.7)[1] == 2 / 4


def test_a_pair_that_makes_any_set_worse_is_not_kept():
    in_use = [0.9, 0.1, 0.8, 0.2]  # set A declined, abstained; set B declined, abstained
    assert no_set_worse([0.9, 0.05, 0.8, 0.2], in_use)  # A abstains less, B the same
    assert not no_set_worse([1.0, 0.0, 0.8, 0.25], in_use)  # A much better, B abstains more
    assert not no_set_worse([0.85, 0.0, 0.9, 0.1], in_use)  # A declines fewer nulls
    assert no_set_worse([float("nan"), 0.1, 0.8, 0.2], in_use)  # A without nulls in this run


def test_the_check_lists_the_questions_a_run_decided_otherwise(tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"question": "picks decline", "best_passage": 0.99, "found_by_words": False, "anchored": True, "own_declines": True},
        {"question": "an old line, picks not traced", "best_passage": 0.99, "found_by_words": False, "anchored": True},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    questions = {"picks decline": ("q1", True), "an old line, picks not traced": ("q2", True), "not run": ("q3", True)}
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps({"qid": qid, "strategy": "auto", "outcome": "not_enough_evidence"})
                                 for qid in ("q1", "q2")) + "\n", encoding="utf-8")
    # both runs declined; the old line replays as answered (the model's picks were not traced)
    assert disagreements(last_judgements(trace), questions, records, 0.5, 0.7) == ["q2"]
