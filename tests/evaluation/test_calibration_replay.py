"""bench/calibrate_relevance.py replays the judge's decisions from a trace (agents.judge.trace): an
answer stands only above its threshold and when the evidence holds the question's names; a
question pinning down enough names, all held, whatever its scores."""

from __future__ import annotations

import json

from bench.calibrate_relevance import last_judgements, rates


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
